/*
 * tests/mpi/device_net.h — the tiny two-unit model that the device-state
 * tests (test_ddp_device.c, test_offload.c) run on host and device state
 * and compare bitwise, with what they share: building it, reading and
 * writing its buffers wherever they live, and one micro-step's backward
 * with gradients every rank can compute for every other.
 *
 *   unit a: a.w [7 x 3] (linear-weight init), a.e [5] (0.5)
 *   unit b: b.w [2 x 5] (linear-weight init), b.s [1] (0.75)
 *
 * 37 parameters in all (NPV), flattened in this order (par_off). The
 * including file defines nothing of this and includes the test headers
 * first; rank and world are its MPI rank and size.
 */
#ifndef ACX_TESTS_DEVICE_NET_H
#define ACX_TESTS_DEVICE_NET_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "sharding/model.h"
#include "tests/acx_test_mpi.h"

#define NPAR 4
#define NPV  (21 + 5 + 10 + 1)

static int rank, world;

static const char *const par_name[NPAR] = {"a.w", "a.e", "b.w", "b.s"};
static const int par_off[NPAR + 1] = {0, 21, 26, 36, NPV};
static const int par_unit[NPAR] = {0, 0, 1, 1};

typedef enum { OPT_ADAMW, OPT_SGD_MOM, OPT_SGD_NESTEROV } opt_kind_t;

typedef struct net {
    acx_accelerator_t *acc;
    acx_model_t *m;
    acx_unit_t *u[2];
    acx_param_t *p[NPAR];
    acx_optimizer_t *opt;
} net_t;

#define TRY(call)                                                                                  \
    do {                                                                                           \
        acx_status_t st_ = (call);                                                                 \
        if (st_ != ACX_OK) return st_;                                                             \
    } while (0)

/* acx_init with cfg (seed 4242 and 100-byte buckets, so there are several),
 * the model above, the optimizer (AdamW lr 1e-2, or SGD lr 0.05 momentum
 * 0.9 weight decay 1e-3, Nesterov or not), acx_prepare. */
static inline acx_status_t net_build(net_t *net, acx_config_t cfg, opt_kind_t opt) {
    cfg.seed = 4242;
    cfg.bucket_size_mb = 100.0 / (1024 * 1024);
    memset(net, 0, sizeof *net);
    TRY(acx_init(NULL, NULL, &cfg, &net->acc));
    TRY(acx_model_create(net->acc, &net->m));
    TRY(acx_model_add_unit(net->m, "a", &net->u[0]));
    TRY(acx_model_add_unit(net->m, "b", &net->u[1]));
    TRY(acx_unit_add_param(net->u[0], "a.w", 2, (int64_t[]){7, 3}, ACX_INIT_SPEC_LINEAR_WEIGHT,
                           &net->p[0]));
    TRY(acx_unit_add_param(net->u[0], "a.e", 1, (int64_t[]){5}, ACX_INIT_SPEC_CONSTANT(0.5),
                           &net->p[1]));
    TRY(acx_unit_add_param(net->u[1], "b.w", 2, (int64_t[]){2, 5}, ACX_INIT_SPEC_LINEAR_WEIGHT,
                           &net->p[2]));
    TRY(acx_unit_add_param(net->u[1], "b.s", 1, (int64_t[]){1}, ACX_INIT_SPEC_CONSTANT(0.75),
                           &net->p[3]));
    if (opt == OPT_ADAMW) {
        acx_adam_hparams_t hp = ACX_ADAMW_DEFAULT;
        hp.lr = 1e-2;
        TRY(acx_adamw_create(net->m, &hp, &net->opt));
    } else {
        acx_sgd_hparams_t hp = {
            .lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3, .nesterov = opt == OPT_SGD_NESTEROV};
        TRY(acx_sgd_create(net->m, &hp, &net->opt));
    }
    return acx_prepare(net->acc, net->m, net->opt, NULL);
}

static inline void net_close(net_t *net) {
    if (net->acc) acx_finalize(net->acc);
    net->acc = NULL;
}

/* out[n] = buf[n]: a device buffer of d, or host memory (d NULL). The
 * parameters and gradients the program sees live in ctx.dev's memory, the
 * optimizer state in shard_dev's. */
static inline acx_status_t read_on(const acx_devops_t *d, const net_t *net, float *out,
                                   const float *buf, size_t n) {
    if (d != NULL) return d->to_host(out, buf, n * sizeof(float), net->m->ctx.stream);
    memcpy(out, buf, n * sizeof(float));
    return ACX_OK;
}

/* A parameter or gradient buffer of the model (ctx.dev's memory or host). */
static inline acx_status_t read_buf(const net_t *net, float *out, const float *buf, size_t n) {
    return read_on(net->m->ctx.dev, net, out, buf, n);
}

static inline acx_status_t write_buf(const net_t *net, float *buf, const float *in, size_t n) {
    const acx_devops_t *d = net->m->ctx.dev;
    if (d != NULL) return d->to_device(buf, in, n * sizeof(float), net->m->ctx.stream);
    memcpy(buf, in, n * sizeof(float));
    return ACX_OK;
}

/* gradient element e of rank r at micro-step s: a multiple of 2^-10 in (-2, 2) */
static inline float grad_val(int s, int r, int e) {
    uint32_t h = acx_test_hash3(r, (size_t)e, 1000 + s);
    return (float)((int)(h % 4001u) - 2000) / 1024.0f;
}

/* One micro-step's backward: every gradient += grad_val (element `poison`
 * of the last rank: +inf instead, when poison >= 0), each unit reported
 * ready; then acx_backward_end. grads_p (may be NULL): this rank's
 * gradient buffers right after they were written, before the reduction. */
static inline acx_status_t backward(net_t *net, int s, int poison, float *grads_p) {
    float tmp[NPV];
    for (int u = 1; u >= 0; u--) {
        TRY(acx_unit_acquire(net->u[u]));
        for (int q = 0; q < NPAR; q++) {
            if (par_unit[q] != u) continue;
            size_t n = (size_t)(par_off[q + 1] - par_off[q]);
            float *g = acx_param_grad(net->p[q]);
            if (g == NULL) return ACX_ERR_INTERNAL;
            TRY(read_buf(net, tmp, g, n));
            for (size_t k = 0; k < n; k++) {
                int e = par_off[q] + (int)k;
                tmp[k] += (e == poison && rank == world - 1) ? INFINITY : grad_val(s, rank, e);
            }
            TRY(write_buf(net, g, tmp, n));
        }
        if (grads_p != NULL)
            for (int q = 0; q < NPAR; q++)
                if (par_unit[q] == u)
                    TRY(read_buf(net, grads_p + par_off[q], acx_param_grad(net->p[q]),
                                 (size_t)(par_off[q + 1] - par_off[q])));
        TRY(acx_unit_grads_ready(net->u[u]));
        TRY(acx_unit_release(net->u[u]));
    }
    return acx_backward_end(net->acc);
}

#endif /* ACX_TESTS_DEVICE_NET_H */

/*
 * tests/mpi/test_param_groups.c — parameter groups
 * (acx_optimizer_add_param_group): per-group weight decay and lr scale,
 * under every strategy and world size, on host and device (emulated)
 * state and with the optimizer offloaded, and in checkpoints.
 * tests/mpi/param_groups.test runs np = 1, 2, 3 in this order, in one
 * directory (DIR = tests/tmp/param_groups, emptied by the np = 1 run).
 *
 *   hand    three parameters: a.weight [5 x 2] in group "decay" (weight
 *           decay 0.1), a.bias [3] in group "no_decay" (weight decay 0,
 *           lr_scale 0.5), c.weight [2 x 2] in none (the create-time decay
 *           0.01), units "a" and "c"; AdamW and SGD with momentum, a linear
 *           schedule (factor 1, 0.75, 0.5), three steps with gradients that
 *           are the same on every rank. After every step the gathered
 *           parameters must equal a double-precision loop written here from
 *           torch.optim's formulas (relative 1e-6), and acx_optimizer_lr
 *           must be the unscaled scheduled lr; at the end the local shard's
 *           padding (elements no parameter owns) is 0 in the master weights
 *           and every state array. Under no_shard,
 *           shard_grad_op and full_shard on host state, no_shard and
 *           full_shard on device_state: emulated, and no_shard with
 *           offload_optimizer: cpu.
 *   net     tests/mpi/shard_net.h's model with groups "no_decay" (the
 *           1-D parameters, weight decay 0) and "head" (head.weight,
 *           weight decay 0.05, lr_scale 0.5), AdamW and SGD, three steps
 *           under no_shard, shard_grad_op and full_shard: against a double
 *           reference with the same groups (relative 1e-5) and, at 2 and
 *           3 ranks, against the 1-rank run's parameters (DIR/np1_*.bin,
 *           relative 1e-6).
 *   ckpt    np = 2 saves after two steps (full_shard, AdamW, groups) to
 *           DIR/groups.h5, and a copy without the param_groups attributes
 *           (what acx wrote before groups existed: DIR/old.h5). np = 3
 *           loads groups.h5 under every strategy: acx_checkpoint_info
 *           lists the groups; one more step equals the 1-rank three-step
 *           run (relative 1e-6). Copies edited with HDF5 (an lr_scale out
 *           of range, two groups of one name) fail acx_checkpoint_verify. A program whose groups
 * differ is refused under a strict load with a message naming the group or the parameter and both
 * values (lr_scale, weight_decay, membership, no groups); non-strict loads the state and trains on
 * with the program's groups (checked against the reference). old.h5 loads strictly into a program
 * without groups and is refused by one with groups ("predates parameter groups").
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "runtime/optim_state.h"
#include "sharding/model.h"
#include "tests/acx_test_mpi.h"
#include "tests/mpi/shard_net.h"

#define STEPS 3
#define TOL_1 1e-6 /* against a 1-rank run or the hand loop */
#define TOL_R 1e-5 /* against the double reference of shard_net.h's model */

static int rank, world;
static char dir[1024];

#define TRY(call)                                                                                  \
    do {                                                                                           \
        acx_status_t st_ = (call);                                                                 \
        if (st_ != ACX_OK) return st_;                                                             \
    } while (0)

/* ||a - b|| / ||b|| */
static double rel(const float *a, const double *b, int n) {
    double num = 0, den = 0;
    for (int i = 0; i < n; i++) {
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* ================================================================ hand */

#define H_NPAR 3
#define H_NP   (10 + 3 + 4)
static const char *const h_name[H_NPAR] = {"a.weight", "a.bias", "c.weight"};
static const int h_ndim[H_NPAR] = {2, 1, 2};
static const int64_t h_shape[H_NPAR][2] = {{5, 2}, {3, 0}, {2, 2}};
static const int h_unit[H_NPAR] = {0, 0, 1};
static const int h_off[H_NPAR + 1] = {0, 10, 13, H_NP};
/* per parameter: weight decay and lr scale of its group (c.weight: the
 * create-time 0.01, scale 1) */
static const double h_wd[H_NPAR] = {0.1, 0.0, 0.01};
static const double h_scale[H_NPAR] = {1.0, 0.5, 1.0};
#define H_LR 0.02

/* gradient of element e at step s, the same on every rank: binary
 * fractions of magnitude 0.25..0.75, both signs */
static double h_grad(int s, int e) {
    return ((e + s) % 2 ? -1.0 : 1.0) * (0.25 + 0.125 * ((3 * e + s) % 5));
}

typedef struct h_case {
    const char *name;
    int strategy, device_state, offload, sgd;
} h_case_t;

typedef struct h_net {
    acx_accelerator_t *acc;
    acx_model_t *m;
    acx_unit_t *u[2];
    acx_param_t *p[H_NPAR];
    acx_optimizer_t *opt;
    acx_scheduler_t *sched;
} h_net_t;

static acx_status_t h_open(h_net_t *n, const h_case_t *c) {
    acx_config_t cfg = ACX_CONFIG_DEFAULT;
    cfg.seed = 77;
    cfg.sharding_strategy = c->strategy;
    cfg.device_state = c->device_state;
    cfg.offload_optimizer = c->offload ? ACX_OFFLOAD_CPU : ACX_OFFLOAD_NONE;
    memset(n, 0, sizeof *n);
    TRY(acx_init(NULL, NULL, &cfg, &n->acc));
    TRY(acx_model_create(n->acc, &n->m));
    TRY(acx_model_add_unit(n->m, "a", &n->u[0]));
    TRY(acx_model_add_unit(n->m, "c", &n->u[1]));
    for (int q = 0; q < H_NPAR; q++)
        TRY(acx_unit_add_param(n->u[h_unit[q]], h_name[q], h_ndim[q], h_shape[q],
                               ACX_INIT_SPEC_UNIFORM(-1.0, 1.0), &n->p[q]));
    if (c->sgd) {
        acx_sgd_hparams_t hp = {.lr = H_LR, .momentum = 0.9, .weight_decay = 0.01};
        TRY(acx_sgd_create(n->m, &hp, &n->opt));
    } else {
        acx_adam_hparams_t hp = ACX_ADAMW_DEFAULT;
        hp.lr = H_LR;
        hp.weight_decay = 0.01;
        TRY(acx_adamw_create(n->m, &hp, &n->opt));
    }
    TRY(acx_optimizer_add_param_group(n->opt, "decay", 0.1, 1.0, 1, &n->p[0]));
    TRY(acx_optimizer_add_param_group(n->opt, "no_decay", 0.0, 0.5, 1, &n->p[1]));
    TRY(acx_scheduler_create(n->opt, ACX_SCHED_LINEAR, 0, 4, 0.0, &n->sched));
    return acx_prepare(n->acc, n->m, n->opt, NULL);
}

/* Every parameter gathered into out [H_NP] (host memory). */
static acx_status_t h_gather(h_net_t *n, float *out) {
    for (int q = 0; q < H_NPAR; q++)
        TRY(acx_param_gather(n->p[q], out + h_off[q]));
    return ACX_OK;
}

/* grad buffer (the model's device memory, or host) += h_grad(s, .) */
static acx_status_t h_add_grads(h_net_t *n, int q, int s) {
    float tmp[H_NP];
    size_t cnt = (size_t)(h_off[q + 1] - h_off[q]);
    float *g = acx_param_grad(n->p[q]);
    if (g == NULL) return ACX_ERR_INTERNAL;
    const acx_devops_t *d = n->m->ctx.dev;
    if (d != NULL)
        TRY(d->to_host(tmp, g, cnt * sizeof(float), n->m->ctx.stream));
    else
        memcpy(tmp, g, cnt * sizeof(float));
    for (size_t k = 0; k < cnt; k++)
        tmp[k] += (float)h_grad(s, h_off[q] + (int)k);
    if (d != NULL) return d->to_device(g, tmp, cnt * sizeof(float), n->m->ctx.stream);
    memcpy(g, tmp, cnt * sizeof(float));
    return ACX_OK;
}

static acx_status_t h_step(h_net_t *n, int s) {
    TRY(acx_accumulate_begin(n->acc));
    for (int u = 1; u >= 0; u--) {
        TRY(acx_unit_acquire(n->u[u]));
        for (int q = 0; q < H_NPAR; q++)
            if (h_unit[q] == u) TRY(h_add_grads(n, q, s));
        TRY(acx_unit_grads_ready(n->u[u]));
        TRY(acx_unit_release(n->u[u]));
    }
    TRY(acx_backward_end(n->acc));
    TRY(acx_optimizer_step(n->opt));
    TRY(acx_scheduler_step(n->sched));
    TRY(acx_optimizer_zero_grad(n->opt));
    return acx_accumulate_end(n->acc);
}

/* The reference: torch.optim.AdamW / SGD per element, in double, with the
 * element's group hyperparameters and lr = H_LR * (1 - s/4) * scale. */
static void h_ref_step(double *p, double *m, double *v, int s, int sgd) {
    int t = s + 1;
    double base = H_LR * (1.0 - s / 4.0);
    for (int q = 0; q < H_NPAR; q++)
        for (int e = h_off[q]; e < h_off[q + 1]; e++) {
            double lr = base * h_scale[q], g = h_grad(s, e);
            if (sgd) {
                double d = g + h_wd[q] * p[e];
                m[e] = t == 1 ? d : 0.9 * m[e] + d;
                p[e] -= lr * m[e];
            } else {
                p[e] *= 1.0 - lr * h_wd[q];
                m[e] = 0.9 * m[e] + 0.1 * g;
                v[e] = 0.999 * v[e] + 0.001 * g * g;
                double bc1 = 1.0 - pow(0.9, t), bc2 = 1.0 - pow(0.999, t);
                p[e] -= lr / bc1 * m[e] / (sqrt(v[e]) / sqrt(bc2) + 1e-8);
            }
        }
}

/* The elements of the local shard no parameter owns (the sharded
 * strategies' padding, between and after the owned rows) hold 0 in the
 * master weights and every optimizer state array: 0 whether a range
 * spans them or not. Returns 0 when they do. */
static int h_padding_zero(h_net_t *n) {
    const acx_model_t *m = n->m;
    size_t total = m->shard_numel;
    if (total == 0) return 0;
    char *owned = calloc(total, 1);
    float *buf = malloc(total * sizeof *buf);
    int bad = owned == NULL || buf == NULL;
    for (int q = 0; q < H_NPAR && !bad; q++) {
        const acx_param_t *p = n->p[q];
        size_t len = (size_t)(p->row_end - p->row_begin) * (size_t)p->row_numel;
        memset(owned + p->shard_offset, 1, len);
    }
    for (int a = -1; a < acx_optimizer_num_state(n->opt) && !bad; a++) {
        const float *src = a < 0 ? m->master : acx_optimizer_state(n->opt, a);
        if (m->shard_dev != NULL)
            bad = m->shard_dev->to_host(buf, src, total * sizeof *buf, m->ctx.stream) != ACX_OK;
        else
            memcpy(buf, src, total * sizeof *buf);
        for (size_t e = 0; e < total && !bad; e++)
            if (!owned[e] && buf[e] != 0.0f) {
                fprintf(stderr, "\n[r%d] padding element %zu of %s is %g, not 0\n", rank, e,
                        a < 0 ? "the master weights" : acx_optimizer_state_name(n->opt, a),
                        (double)buf[e]);
                bad = 1;
            }
    }
    free(owned);
    free(buf);
    return bad;
}

static int hand_case(const h_case_t *c) {
    h_net_t n = {0};
    float got[H_NP];
    double p[H_NP], m[H_NP] = {0}, v[H_NP] = {0};
    CHECK_OK(h_open(&n, c));
    CHECK_OK(h_gather(&n, got));
    for (int e = 0; e < H_NP; e++)
        p[e] = got[e];
    for (int s = 0; s < STEPS; s++) {
        CHECK(acx_optimizer_lr(n.opt) == H_LR * (1.0 - s / 4.0)); /* the base lr, unscaled */
        CHECK_OK(h_step(&n, s));
        h_ref_step(p, m, v, s, c->sgd);
        CHECK_OK(h_gather(&n, got));
        for (int q = 0; q < H_NPAR; q++) {
            double r = rel(got + h_off[q], p + h_off[q], h_off[q + 1] - h_off[q]);
            if (!(r <= TOL_1)) {
                fprintf(stderr, "\n[r%d] %s step %d: %s relative %.3g > %g (%.9g vs %.9g)\n", rank,
                        c->name, s + 1, h_name[q], r, TOL_1, (double)got[h_off[q]], p[h_off[q]]);
                TEST_ERROR;
            }
        }
    }
    CHECK(h_padding_zero(&n) == 0);
    acx_finalize(n.acc);
    return 0;
error:
    if (n.acc != NULL) acx_finalize(n.acc);
    return 1;
}

/* ================================================================ net */

/* the groups: 1-D parameters no decay; head.weight its own decay at half
 * the lr. head_scale / mid_bias_default vary them for the mismatch cases. */
static double head_scale = 0.5;
static int mid_bias_default = 0;

static acx_status_t sn_groups(acx_optimizer_t *opt, acx_param_t *const *p) {
    acx_param_t *nd[3] = {p[SN_GAIN], p[SN_C], p[SN_B]};
    if (mid_bias_default) {
        acx_param_t *nd2[2] = {p[SN_GAIN], p[SN_B]};
        TRY(acx_optimizer_add_param_group(opt, "no_decay", 0.0, 1.0, 2, nd2));
    } else {
        TRY(acx_optimizer_add_param_group(opt, "no_decay", 0.0, 1.0, 3, nd));
    }
    return acx_optimizer_add_param_group(opt, "head", 0.05, head_scale, 1, &p[SN_W3]);
}

/* the group hyperparameters of element e (the default: 0.01, scale 1) */
static void sn_group_of(int e, double hs, double *wd, double *scale) {
    int q = 0;
    while (e >= sn_off[q + 1])
        q++;
    *wd = 0.01;
    *scale = 1.0;
    if (q == SN_GAIN || q == SN_C || q == SN_B) *wd = 0.0;
    if (q == SN_W3) {
        *wd = 0.05;
        *scale = hs;
    }
}

/* torch.optim.AdamW / SGD(momentum 0.9) with the groups above. */
static void sn_ref_group_step(sn_ref_t *r, const double *grad, int sgd, double hs) {
    r->t++;
    for (int e = 0; e < SN_NP; e++) {
        double wd, sc;
        sn_group_of(e, hs, &wd, &sc);
        if (sgd) {
            double lr = SN_SGD_LR * sc, g = grad[e] + wd * r->p[e];
            r->m[e] = r->t == 1 ? g : 0.9 * r->m[e] + g;
            r->p[e] -= lr * r->m[e];
        } else {
            double lr = SN_ADAM_LR * sc;
            r->p[e] *= 1 - lr * wd;
            r->m[e] = 0.9 * r->m[e] + 0.1 * grad[e];
            r->v[e] = 0.999 * r->v[e] + 0.001 * grad[e] * grad[e];
            double bc1 = 1 - pow(0.9, (double)r->t), bc2 = 1 - pow(0.999, (double)r->t);
            r->p[e] -= lr / bc1 * r->m[e] / (sqrt(r->v[e]) / sqrt(bc2) + 1e-8);
        }
    }
}

/* The reference after `steps` steps (head lr scale hs from step `from` on,
 * 0.5 before). */
static void sn_reference(sn_ref_t *r, int sgd, int steps, int from, double hs) {
    float init[SN_NP];
    double g[SN_NP];
    memset(r, 0, sizeof *r);
    sn_expected_init(init);
    for (int e = 0; e < SN_NP; e++)
        r->p[e] = init[e];
    for (int s = 0; s < steps; s++) {
        sn_ref_grad(r->p, s, g);
        sn_ref_group_step(r, g, sgd, s >= from ? hs : 0.5);
    }
}

static const char *const strat_name[3] = {"no_shard", "shard_grad_op", "full_shard"};

static sn_run_cfg_t net_cfg(int strategy, int sgd) {
    return (sn_run_cfg_t){.strategy = strategy,
                          .sgd = sgd,
                          .accum = 1,
                          .fwd_prefetch = -1,
                          .bwd_prefetch = -1,
                          .limit_all_gathers = -1,
                          .groups = sn_groups};
}

static acx_status_t net_train(sn_net_t *net, int64_t from, int64_t to) {
    for (int64_t s = from; s < to; s++) {
        TRY(acx_accumulate_begin(net->acc));
        TRY(sn_micro_step(net, s, 0, 1));
        TRY(acx_backward_end(net->acc));
        TRY(acx_optimizer_step(net->opt));
        TRY(acx_optimizer_zero_grad(net->opt));
        TRY(acx_accumulate_end(net->acc));
    }
    return ACX_OK;
}

static void np1_path(char *buf, size_t n, int strategy, int sgd) {
    snprintf(buf, n, "%s/np1_%s_%s.bin", dir, strat_name[strategy], sgd ? "sgd" : "adamw");
}

/* this run's parameters against the 1-rank run's (written by np = 1) */
static int against_np1(const float *got, int strategy, int sgd, const char *what) {
    char path[1200];
    float want[SN_NP];
    np1_path(path, sizeof path, strategy, sgd);
    FILE *f = fopen(path, "rb");
    int ok = f != NULL && fread(want, sizeof want, 1, f) == 1;
    if (f != NULL) fclose(f);
    if (!ok) {
        fprintf(stderr, "\n[r%d] cannot read %s (did np = 1 run first?)\n", rank, path);
        return 1;
    }
    return sn_compare_ff(what, got, want, TOL_1, NULL);
}

static int net_case(int strategy, int sgd) {
    sn_net_t net = {0};
    sn_run_cfg_t rc = net_cfg(strategy, sgd);
    float got[SN_NP];
    sn_ref_t ref;
    head_scale = 0.5;
    mid_bias_default = 0;
    CHECK_OK(sn_open(&net, &rc));
    CHECK_OK(net_train(&net, 0, STEPS));
    CHECK_OK(sn_gather(&net, got));
    sn_reference(&ref, sgd, STEPS, STEPS, 0.5);
    CHECK(sn_compare_fd("against the double reference", got, ref.p, TOL_R, NULL) == 0);
    if (world == 1 && rank == 0) {
        char path[1200];
        np1_path(path, sizeof path, strategy, sgd);
        FILE *f = fopen(path, "wb");
        CHECK(f != NULL && fwrite(got, sizeof got, 1, f) == 1);
        CHECK(fclose(f) == 0);
    } else if (world > 1) {
        CHECK(against_np1(got, strategy, sgd, "against 1 rank") == 0);
    }
    sn_close(&net);
    return 0;
error:
    sn_close(&net);
    return 1;
}

/* ================================================================ ckpt */

#define SAVE_STEPS 2

/* np = 2: groups.h5 after SAVE_STEPS steps, and old.h5 without the
 * param_groups attributes (rank 0 removes them with HDF5). */
static int save_case(void) {
    sn_net_t net = {0};
    sn_run_cfg_t rc = net_cfg(ACX_FULL_SHARD, 0);
    char path[1200], old[1200];
    head_scale = 0.5;
    mid_bias_default = 0;
    snprintf(path, sizeof path, "%s/groups.h5", dir);
    snprintf(old, sizeof old, "%s/old.h5", dir);
    CHECK_OK(sn_open(&net, &rc));
    CHECK_OK(net_train(&net, 0, SAVE_STEPS));
    CHECK_OK(acx_save_state(net.acc, path));
    CHECK_OK(acx_save_state(net.acc, old));
    sn_close(&net);
    int failed = 0;
    if (rank == 0) {
        hid_t f = H5Fopen(old, H5F_ACC_RDWR, H5P_DEFAULT);
        hid_t g = f >= 0 ? H5Gopen2(f, "/optimizer", H5P_DEFAULT) : -1;
        failed = g < 0;
        /* the count and each group's attributes (this model: 2 groups of
         * at most 3 parameters; a generous range of names is tried) */
        static const char *const fields[] = {"name", "weight_decay", "lr_scale", "num_params"};
        int deleted = 0;
        if (!failed && H5Aexists(g, "param_groups") > 0) {
            failed |= H5Adelete(g, "param_groups") < 0;
            deleted++;
        }
        for (int k = 0; k < 8 && !failed; k++) {
            char name[64];
            for (int j = -4; j < 16 && !failed; j++) {
                if (j < 0)
                    snprintf(name, sizeof name, "param_group.%d.%s", k, fields[j + 4]);
                else
                    snprintf(name, sizeof name, "param_group.%d.param.%d", k, j);
                if (H5Aexists(g, name) > 0) {
                    failed |= H5Adelete(g, name) < 0;
                    deleted++;
                }
            }
        }
        /* the count, 2 x 4 fields, 3 + 1 members */
        if (deleted != 1 + 8 + 4) failed = 1;
        if (g >= 0) H5Gclose(g);
        if (f >= 0) H5Fclose(f);
        if (failed) fprintf(stderr, "\ncannot strip the groups from %s\n", old);
    }
    CHECK(acx_test_agree(failed) == 0);
    return 0;
error:
    sn_close(&net);
    return 1;
}

/* np = 3: load groups.h5 under `strategy` (same groups), one more step,
 * equal to the 1-rank run of STEPS steps. */
static int load_case(int strategy) {
    sn_net_t net = {0};
    sn_run_cfg_t rc = net_cfg(strategy, 0);
    char path[1200];
    float got[SN_NP];
    head_scale = 0.5;
    mid_bias_default = 0;
    snprintf(path, sizeof path, "%s/groups.h5", dir);
    CHECK_OK(sn_open(&net, &rc));
    CHECK_OK(acx_load_state(net.acc, path, 1));
    CHECK(acx_step(net.acc) == SAVE_STEPS);
    CHECK(acx_optimizer_num_steps(net.opt) == SAVE_STEPS);
    CHECK_OK(net_train(&net, SAVE_STEPS, STEPS));
    CHECK_OK(sn_gather(&net, got));
    CHECK(against_np1(got, ACX_FULL_SHARD, 0, "loaded at 3 ranks, one more step") == 0);
    sn_close(&net);
    return 0;
error:
    sn_close(&net);
    return 1;
}

/* `acx checkpoint info` shows the groups */
static int info_case(void) {
    char path[1200], *text = NULL;
    snprintf(path, sizeof path, "%s/groups.h5", dir);
    CHECK_OK(acx_checkpoint_info(path, &text));
    CHECK(strstr(text, "parameter groups: 2") != NULL);
    CHECK(strstr(text, "  no_decay: weight_decay=0 lr_scale=1, 3 parameter(s): enc.gain mid.bias "
                       "head.bias\n") != NULL);
    CHECK(strstr(text, "  head: weight_decay=0.050000000000000003 lr_scale=0.5, 1 parameter(s): "
                       "head.weight\n") != NULL);
    CHECK(strstr(text, "param_group.") == NULL); /* not on the /optimizer line */
    free(text);
    text = NULL;
    snprintf(path, sizeof path, "%s/old.h5", dir);
    CHECK_OK(acx_checkpoint_info(path, &text));
    CHECK(strstr(text, "parameter groups: (none recorded") != NULL);
    free(text);
    return 0;
error:
    if (text != NULL) fprintf(stderr, "\n[r%d] info:\n%s\n", rank, text);
    free(text);
    return 1;
}

/* An edited lr_scale (5000, above the 1e3 bound) and an edited duplicate
 * group name: `acx ckpt verify` refuses both, naming the attribute (rank 0,
 * on copies written here with HDF5). */
static int edited_case(void) {
    static const struct {
        const char *attr, *needle;
        int is_str;
        double v;
        const char *s;
    } ed[] = {{"param_group.1.lr_scale",
               "/optimizer/param_group.1.lr_scale = 5000 (group 'head') is out of range", 0, 5000.0,
               NULL},
              {"param_group.1.name", "parameter groups 0 and 1 are both named 'no_decay'", 1, 0.0,
               "no_decay"}};
    char src[1200], dst[1200], cmd[2600];
    snprintf(src, sizeof src, "%s/groups.h5", dir);
    for (size_t i = 0; i < sizeof ed / sizeof ed[0]; i++) {
        snprintf(dst, sizeof dst, "%s/edited%zu.h5", dir, i);
        snprintf(cmd, sizeof cmd, "cp '%s' '%s'", src, dst);
        CHECK(system(cmd) == 0);
        hid_t f = H5Fopen(dst, H5F_ACC_RDWR, H5P_DEFAULT);
        CHECK(f >= 0);
        hid_t g = H5Gopen2(f, "/optimizer", H5P_DEFAULT);
        CHECK(g >= 0);
        CHECK(H5Adelete(g, ed[i].attr) >= 0);
        hid_t space = H5Screate(H5S_SCALAR), type = H5Tcopy(H5T_NATIVE_DOUBLE);
        if (ed[i].is_str) {
            H5Tclose(type);
            type = H5Tcopy(H5T_C_S1);
            H5Tset_size(type, strlen(ed[i].s) + 1);
        }
        hid_t a = H5Acreate2(g, ed[i].attr, type, space, H5P_DEFAULT, H5P_DEFAULT);
        CHECK(a >= 0);
        CHECK(H5Awrite(a, type, ed[i].is_str ? (const void *)ed[i].s : (const void *)&ed[i].v) >=
              0);
        H5Aclose(a);
        H5Tclose(type);
        H5Sclose(space);
        H5Gclose(g);
        H5Fclose(f);
        CHECK_STATUS(acx_checkpoint_verify(dst), ACX_ERR_FORMAT, ed[i].needle);
    }
    return 0;
error:
    return 1;
}

/* A program whose groups differ (head lr scale hs, mid.bias in the default
 * group, or no groups at all) loading `file` strictly: refused, naming
 * `needle`. */
static int mismatch_case(const char *file, double hs, int mbd, int no_groups, const char *needle) {
    sn_net_t net = {0};
    sn_run_cfg_t rc = net_cfg(ACX_FULL_SHARD, 0);
    char path[1200];
    if (no_groups) rc.groups = NULL;
    head_scale = hs;
    mid_bias_default = mbd;
    snprintf(path, sizeof path, "%s/%s", dir, file);
    CHECK_OK(sn_open(&net, &rc));
    CHECK_STATUS(acx_load_state(net.acc, path, 1), ACX_ERR_FORMAT, needle);
    CHECK(acx_step(net.acc) == 0); /* nothing restored */
    sn_close(&net);
    head_scale = 0.5;
    mid_bias_default = 0;
    return 0;
error:
    sn_close(&net);
    head_scale = 0.5;
    mid_bias_default = 0;
    return 1;
}

/* Non-strict with head's lr scale 0.25 in the program: the state loads
 * and the next step uses the program's groups. */
static int nonstrict_case(void) {
    sn_net_t net = {0};
    sn_run_cfg_t rc = net_cfg(ACX_SHARD_GRAD_OP, 0);
    char path[1200];
    float got[SN_NP];
    sn_ref_t ref;
    head_scale = 0.25;
    snprintf(path, sizeof path, "%s/groups.h5", dir);
    CHECK_OK(sn_open(&net, &rc));
    CHECK_OK(acx_load_state(net.acc, path, 0));
    CHECK(acx_step(net.acc) == SAVE_STEPS);
    CHECK_OK(net_train(&net, SAVE_STEPS, STEPS));
    CHECK_OK(sn_gather(&net, got));
    sn_reference(&ref, 0, STEPS, SAVE_STEPS, 0.25);
    CHECK(sn_compare_fd("non-strict, the program's lr_scale", got, ref.p, TOL_R, NULL) == 0);
    sn_close(&net);
    head_scale = 0.5;
    return 0;
error:
    sn_close(&net);
    head_scale = 0.5;
    return 1;
}

/* old.h5 (no groups recorded) into a program without groups: strict OK */
static int old_case(void) {
    sn_net_t net = {0};
    sn_run_cfg_t rc = net_cfg(ACX_NO_SHARD, 0);
    char path[1200];
    rc.groups = NULL;
    snprintf(path, sizeof path, "%s/old.h5", dir);
    CHECK_OK(sn_open(&net, &rc));
    CHECK_OK(acx_load_state(net.acc, path, 1));
    CHECK(acx_step(net.acc) == SAVE_STEPS);
    sn_close(&net);
    return 0;
error:
    sn_close(&net);
    return 1;
}

/* ================================================================ main */

static void clean_dir(void) {
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[1400];
    while (d != NULL && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        remove(path);
    }
    if (d != NULL) closedir(d);
}

int main(int argc, char **argv) {
    acx_test_mpi_begin(&argc, &argv, 280, &rank, &world);
    acx_test_tmp_path(dir, sizeof dir, "param_groups");
    if (rank == 0) {
        mkdir(dir, 0755);
        if (world == 1) clean_dir();
    }
    MPI_Barrier(MPI_COMM_WORLD);
    int failed = 0;
    char what[300];
    static const h_case_t hc[] = {
        {"no_shard", ACX_NO_SHARD, ACX_DEVICE_STATE_HOST, 0, 0},
        {"shard_grad_op", ACX_SHARD_GRAD_OP, ACX_DEVICE_STATE_HOST, 0, 0},
        {"full_shard", ACX_FULL_SHARD, ACX_DEVICE_STATE_HOST, 0, 0},
        {"no_shard emulated device", ACX_NO_SHARD, ACX_DEVICE_STATE_EMULATED, 0, 0},
        {"full_shard emulated device", ACX_FULL_SHARD, ACX_DEVICE_STATE_EMULATED, 0, 0},
        {"no_shard offload", ACX_NO_SHARD, ACX_DEVICE_STATE_EMULATED, 1, 0},
    };
    for (size_t i = 0; i < sizeof hc / sizeof hc[0]; i++)
        for (int sgd = 0; sgd <= 1; sgd++) {
            h_case_t c = hc[i];
            c.sgd = sgd;
            snprintf(what, sizeof what, "hand %s, %s, %d rank(s)", sgd ? "SGD" : "AdamW", c.name,
                     world);
            TESTING(what);
            failed |= acx_test_report(hand_case(&c));
        }
    for (int s = ACX_NO_SHARD; s <= ACX_FULL_SHARD; s++)
        for (int sgd = 0; sgd <= 1; sgd++) {
            snprintf(what, sizeof what, "net %s, %s, %d rank(s)", sgd ? "SGD" : "AdamW",
                     strat_name[s], world);
            TESTING(what);
            failed |= acx_test_report(net_case(s, sgd));
        }
    if (world == 2) {
        TESTING("checkpoint with groups saved on 2 ranks");
        failed |= acx_test_report(save_case());
    }
    if (world == 3) {
        for (int s = ACX_NO_SHARD; s <= ACX_FULL_SHARD; s++) {
            snprintf(what, sizeof what, "2-rank checkpoint -> %s on 3 ranks, groups kept",
                     strat_name[s]);
            TESTING(what);
            failed |= acx_test_report(load_case(s));
        }
        TESTING("acx_checkpoint_info lists the groups");
        failed |= acx_test_report(acx_test_agree(rank == 0 ? info_case() : 0));
        TESTING("acx_checkpoint_verify refuses edited groups");
        failed |= acx_test_report(acx_test_agree(rank == 0 ? edited_case() : 0));
        TESTING("strict load refuses another lr_scale");
        failed |= acx_test_report(mismatch_case(
            "groups.h5", 0.25, 0, 0,
            "parameter group 'head': the checkpoint's lr_scale is 0.5, the program's 0.25"));
        TESTING("strict load refuses another membership");
        failed |= acx_test_report(
            mismatch_case("groups.h5", 0.5, 1, 0,
                          "parameter 'mid.bias' is in group 'no_decay' in the checkpoint, in group "
                          "'(default)' in the program"));
        TESTING("strict load refuses a program without the groups");
        failed |= acx_test_report(
            mismatch_case("groups.h5", 0.5, 0, 1,
                          "the checkpoint's parameter group 'no_decay' (weight_decay 0, "
                          "lr_scale 1, 3 parameter(s)) is not in the program"));
        TESTING("non-strict load trains on with the program's groups");
        failed |= acx_test_report(nonstrict_case());
        TESTING("a checkpoint without groups loads into a program without them");
        failed |= acx_test_report(old_case());
        TESTING("a checkpoint without groups is refused by a program with them");
        failed |= acx_test_report(mismatch_case(
            "old.h5", 0.5, 0, 0,
            "the program's parameter group 'no_decay' (weight_decay 0, lr_scale 1) is not in the "
            "checkpoint (the checkpoint predates parameter groups"));
    }
    MPI_Finalize();
    return failed ? 1 : 0;
}

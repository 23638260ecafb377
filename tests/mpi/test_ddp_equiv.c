/*
 * tests/mpi/test_ddp_equiv.c — data parallelism changes nothing but speed.
 *
 * A small nonlinear model (y = W2 tanh(W1 x + b1) + b2, MSE loss) trains for
 * 5 steps on a synthetic HDF5 dataset with a fixed global batch of 24
 * (split_batches), through the whole acx path: loader and sampler, bucketed
 * gradient all-reduce (buckets forced tiny so there are several), optimizer.
 *
 *   np = 1: the result is checked against an independent double-precision
 *           implementation of the same training written here (forward,
 *           backward, torch.optim formulas), relative difference <= 1e-4,
 *           and written to DIR/ddp_ref_<case>.bin.
 *   np > 1: the parameters must equal the 1-rank ones, relative difference
 *           (||a-b|| / ||b|| per parameter) <= 1e-5.
 *
 * Cases: SGD (momentum, Nesterov, weight decay), AdamW, and each with 2
 * accumulation micro-steps of 12 (which must equal one batch of 24).
 * tests/run-mpi.sh runs np = 1 first, so the reference exists for 2, 3, 4.
 */
#include <stdint.h>

#include "tests/acx_test_mpi.h"

#define NS           120 /* samples: exactly one epoch of STEPS global batches */
#define DIN          7
#define DH           5
#define DOUT         3
#define GLOBAL_BATCH 24
#define STEPS        5

typedef enum { CASE_SGD, CASE_ADAMW, CASE_SGD_ACCUM, CASE_ADAMW_ACCUM, NUM_CASES } case_t;
static const char *const case_name[NUM_CASES] = {"sgd", "adamw", "sgd_accum2", "adamw_accum2"};
/* SGD is in the accumulation cases because Adam is nearly invariant to a
 * gradient scale: a missing 1/micro-steps factor would go unnoticed with it. */
static int is_accum(case_t c) { return c == CASE_SGD_ACCUM || c == CASE_ADAMW_ACCUM; }
static int is_sgd(case_t c) { return c == CASE_SGD || c == CASE_SGD_ACCUM; }

static int rank, world;
static char dir[1024];

/* ---- data: x[i][j] and y[i][k] are fixed functions of the indices ---- */
static double data_x(int i, int j) { return sin(0.37 * i + 1.3 * j) + 0.1 * j; }
static double data_y(int i, int k) { return cos(0.21 * i - 0.7 * k); }

static int write_dataset(const char *path) {
    float x[NS][DIN], y[NS][DOUT];
    for (int i = 0; i < NS; i++) {
        for (int j = 0; j < DIN; j++)
            x[i][j] = (float)data_x(i, j);
        for (int k = 0; k < DOUT; k++)
            y[i][k] = (float)data_y(i, k);
    }
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (f < 0) return -1;
    hsize_t dx[2] = {NS, DIN}, dy[2] = {NS, DOUT};
    hid_t sx = H5Screate_simple(2, dx, NULL), sy = H5Screate_simple(2, dy, NULL);
    hid_t ax = H5Dcreate2(f, "x", H5T_NATIVE_FLOAT, sx, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hid_t ay = H5Dcreate2(f, "y", H5T_NATIVE_FLOAT, sy, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    herr_t e1 = H5Dwrite(ax, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x);
    herr_t e2 = H5Dwrite(ay, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, y);
    H5Dclose(ax);
    H5Dclose(ay);
    H5Sclose(sx);
    H5Sclose(sy);
    H5Fclose(f);
    return e1 < 0 || e2 < 0 ? -1 : 0;
}

/* ---- the model in float, as a user would write it against acx ---- */
typedef struct net {
    acx_unit_t *u1, *u2;
    acx_param_t *w1, *b1, *w2, *b2;
} net_t;

/* Forward+backward over n samples; adds mean-loss gradients (mean over the
 * n local samples) into the acx gradient buffers, reporting each unit as
 * soon as its gradients are complete. */
static acx_status_t micro_step(net_t *net, const float *x, const float *y, int n) {
    const float *W1 = acx_param_data(net->w1), *B1 = acx_param_data(net->b1);
    const float *W2 = acx_param_data(net->w2), *B2 = acx_param_data(net->b2);
    float *gW1 = acx_param_grad(net->w1), *gB1 = acx_param_grad(net->b1);
    float *gW2 = acx_param_grad(net->w2), *gB2 = acx_param_grad(net->b2);
    float h[GLOBAL_BATCH][DH], dout[GLOBAL_BATCH][DOUT], dh[GLOBAL_BATCH][DH];
    for (int s = 0; s < n; s++) {
        for (int a = 0; a < DH; a++) {
            float z = B1[a];
            for (int j = 0; j < DIN; j++)
                z += W1[a * DIN + j] * x[s * DIN + j];
            h[s][a] = tanhf(z);
        }
        for (int k = 0; k < DOUT; k++) {
            float o = B2[k];
            for (int a = 0; a < DH; a++)
                o += W2[k * DH + a] * h[s][a];
            dout[s][k] = (o - y[s * DOUT + k]) / (float)n; /* d/do of mean 0.5*||o-y||^2 */
        }
    }
    for (int s = 0; s < n; s++)
        for (int k = 0; k < DOUT; k++) {
            gB2[k] += dout[s][k];
            for (int a = 0; a < DH; a++)
                gW2[k * DH + a] += dout[s][k] * h[s][a];
        }
    acx_status_t st = acx_unit_grads_ready(net->u2);
    if (st != ACX_OK) return st;
    for (int s = 0; s < n; s++)
        for (int a = 0; a < DH; a++) {
            float d = 0;
            for (int k = 0; k < DOUT; k++)
                d += dout[s][k] * W2[k * DH + a];
            dh[s][a] = d * (1.0f - h[s][a] * h[s][a]);
        }
    for (int s = 0; s < n; s++)
        for (int a = 0; a < DH; a++) {
            gB1[a] += dh[s][a];
            for (int j = 0; j < DIN; j++)
                gW1[a * DIN + j] += dh[s][a] * x[s * DIN + j];
        }
    return acx_unit_grads_ready(net->u1);
}

/* ---- the independent reference, in double ---- */
#define NP (DH * DIN + DH + DOUT * DH + DOUT)
typedef struct ref {
    double p[NP], m[NP], v[NP];
    int t;
} ref_t;
/* views into p: W1 | b1 | W2 | b2 */
#define RW1(r) ((r)->p)
#define RB1(r) ((r)->p + DH * DIN)
#define RW2(r) ((r)->p + DH * DIN + DH)
#define RB2(r) ((r)->p + DH * DIN + DH + DOUT * DH)

static void ref_grad(const ref_t *r, const int64_t *idx, int n, double *g) {
    memset(g, 0, NP * sizeof *g);
    for (int s = 0; s < n; s++) {
        int i = (int)idx[s];
        double h[DH], dout[DOUT];
        for (int a = 0; a < DH; a++) {
            double z = RB1(r)[a];
            for (int j = 0; j < DIN; j++)
                z += RW1(r)[a * DIN + j] * (double)(float)data_x(i, j);
            h[a] = tanh(z);
        }
        for (int k = 0; k < DOUT; k++) {
            double o = RB2(r)[k];
            for (int a = 0; a < DH; a++)
                o += RW2(r)[k * DH + a] * h[a];
            dout[k] = (o - (double)(float)data_y(i, k)) / n;
        }
        for (int k = 0; k < DOUT; k++) {
            g[DH * DIN + DH + DOUT * DH + k] += dout[k];
            for (int a = 0; a < DH; a++)
                g[DH * DIN + DH + k * DH + a] += dout[k] * h[a];
        }
        for (int a = 0; a < DH; a++) {
            double d = 0;
            for (int k = 0; k < DOUT; k++)
                d += dout[k] * RW2(r)[k * DH + a];
            d *= 1 - h[a] * h[a];
            g[DH * DIN + a] += d;
            for (int j = 0; j < DIN; j++)
                g[a * DIN + j] += d * (double)(float)data_x(i, j);
        }
    }
}

/* torch.optim.SGD(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01) and
 * torch.optim.AdamW(lr=0.01, betas=(0.9,0.999), eps=1e-8, weight_decay=0.01). */
static void ref_step(ref_t *r, const double *grad, case_t c) {
    r->t++;
    for (int e = 0; e < NP; e++) {
        if (is_sgd(c)) {
            double g = grad[e] + 0.01 * r->p[e];
            r->m[e] = r->t == 1 ? g : 0.9 * r->m[e] + g;
            r->p[e] -= 0.1 * (g + 0.9 * r->m[e]);
        } else {
            r->p[e] *= 1 - 0.01 * 0.01;
            r->m[e] = 0.9 * r->m[e] + 0.1 * grad[e];
            r->v[e] = 0.999 * r->v[e] + 0.001 * grad[e] * grad[e];
            double bc1 = 1 - pow(0.9, r->t), bc2 = 1 - pow(0.999, r->t);
            r->p[e] -= 0.01 / bc1 * r->m[e] / (sqrt(r->v[e]) / sqrt(bc2) + 1e-8);
        }
    }
}

/* ---- one training run ---- */
static int run_case(case_t c, const char *data) {
    acx_config_t cfg = ACX_CONFIG_DEFAULT;
    cfg.seed = 1234;
    cfg.bucket_size_mb = 64.0 / (1024 * 1024); /* 64-byte buckets: several per step */
    cfg.gradient_accumulation_steps = is_accum(c) ? 2 : 1;
    acx_accelerator_t *acc = NULL;
    acx_model_t *m;
    net_t net;
    acx_optimizer_t *opt;
    acx_dataloader_t *dl;
    ref_t ref = {0};
    float got[NP];
    int64_t all_idx[STEPS][GLOBAL_BATCH];
    int micro_per_step = is_accum(c) ? 2 : 1;
    char path[1200];
    snprintf(path, sizeof path, "%s/ddp_ref_%s.bin", dir, case_name[c]);

    CHECK_OK(acx_init(NULL, NULL, &cfg, &acc));
    CHECK_OK(acx_model_create(acc, &m));
    CHECK_OK(acx_model_add_unit(m, "enc", &net.u1));
    CHECK_OK(acx_unit_add_param(net.u1, "enc.weight", 2, (int64_t[]){DH, DIN},
                                ACX_INIT_SPEC_LINEAR_WEIGHT, &net.w1));
    CHECK_OK(acx_unit_add_param(net.u1, "enc.bias", 1, (int64_t[]){DH},
                                ACX_INIT_SPEC_LINEAR_BIAS(DIN), &net.b1));
    CHECK_OK(acx_model_add_unit(m, "head", &net.u2));
    CHECK_OK(acx_unit_add_param(net.u2, "head.weight", 2, (int64_t[]){DOUT, DH},
                                ACX_INIT_SPEC_LINEAR_WEIGHT, &net.w2));
    CHECK_OK(acx_unit_add_param(net.u2, "head.bias", 1, (int64_t[]){DOUT},
                                ACX_INIT_SPEC_LINEAR_BIAS(DH), &net.b2));
    if (is_sgd(c)) {
        acx_sgd_hparams_t hp = {.lr = 0.1, .momentum = 0.9, .nesterov = 1, .weight_decay = 0.01};
        CHECK_OK(acx_sgd_create(m, &hp, &opt));
    } else {
        acx_adam_hparams_t hp = ACX_ADAMW_DEFAULT;
        hp.lr = 0.01;
        CHECK_OK(acx_adamw_create(m, &hp, &opt));
    }
    acx_dataloader_options_t lo = ACX_DATALOADER_OPTIONS_DEFAULT;
    lo.batch_size = GLOBAL_BATCH / micro_per_step; /* global: split across ranks */
    lo.split_batches = 1;
    lo.prefetch = 1;
    CHECK_OK(acx_dataloader_open(acc, data, 2, (const char *const[]){"/x", "/y"}, &lo, &dl));
    CHECK_OK(acx_prepare(acc, m, opt, dl));

    /* initial parameters for the reference (all ranks hold the same) */
    {
        const acx_param_t *ps[4] = {net.w1, net.b1, net.w2, net.b2};
        int off = 0;
        for (int q = 0; q < 4; q++) {
            const float *d = acx_param_data((acx_param_t *)ps[q]);
            for (int64_t e = 0; e < acx_param_numel(ps[q]); e++)
                ref.p[off++] = d[e];
        }
    }

    const acx_batch_t *b;
    for (int s = 0; s < STEPS; s++) {
        for (int mi = 0; mi < micro_per_step; mi++) {
            CHECK_OK(acx_dataloader_next(dl, &b));
            CHECK(b->size == GLOBAL_BATCH / micro_per_step / world && b->num_padding == 0);
            /* every rank's indices, in rank order = the global micro-batch */
            int64_t gathered[GLOBAL_BATCH];
            CHECK_OK(acx_all_gather(acc, b->indices, gathered, (size_t)b->size, ACX_DTYPE_INT64));
            memcpy(&all_idx[s][mi * GLOBAL_BATCH / micro_per_step], gathered,
                   (size_t)(GLOBAL_BATCH / micro_per_step) * sizeof(int64_t));
            CHECK_OK(acx_accumulate_begin(acc));
            CHECK(acx_sync_gradients(acc) == (mi == micro_per_step - 1));
            CHECK_OK(micro_step(&net, b->tensors[0], b->tensors[1], (int)b->size));
            CHECK_OK(acx_backward_end(acc));
            if (acx_sync_gradients(acc)) {
                CHECK_OK(acx_optimizer_step(opt));
                CHECK_OK(acx_optimizer_zero_grad(opt));
            }
            CHECK_OK(acx_accumulate_end(acc));
        }
    }
    CHECK(acx_step(acc) == STEPS);
    {
        const acx_param_t *ps[4] = {net.w1, net.b1, net.w2, net.b2};
        int off = 0;
        for (int q = 0; q < 4; q++) {
            const float *d = acx_param_data((acx_param_t *)ps[q]);
            for (int64_t e = 0; e < acx_param_numel(ps[q]); e++)
                got[off++] = d[e];
        }
    }

    if (world == 1) {
        /* independent reference over the same sample order */
        for (int s = 0; s < STEPS; s++) {
            double g[NP];
            ref_grad(&ref, all_idx[s], GLOBAL_BATCH, g);
            ref_step(&ref, g, c);
        }
        double num = 0, den = 0;
        for (int e = 0; e < NP; e++) {
            num += (got[e] - ref.p[e]) * (got[e] - ref.p[e]);
            den += ref.p[e] * ref.p[e];
        }
        double rel = sqrt(num / den);
        if (!(rel <= 1e-4)) {
            fprintf(stderr, "\n%s: 1 rank vs double reference: relative difference %.3g > 1e-4\n",
                    case_name[c], rel);
            TEST_ERROR;
        }
        FILE *f = fopen(path, "wb");
        CHECK(f != NULL);
        CHECK(fwrite(got, sizeof got, 1, f) == 1);
        fclose(f);
    } else {
        float want[NP];
        FILE *f = fopen(path, "rb");
        if (f == NULL) {
            fprintf(stderr, "\nno 1-rank reference at %s (run np=1 first)\n", path);
            TEST_ERROR;
        }
        CHECK(fread(want, sizeof want, 1, f) == 1);
        fclose(f);
        const int sizes[4] = {DH * DIN, DH, DOUT * DH, DOUT};
        int off = 0;
        for (int q = 0; q < 4; q++) {
            double num = 0, den = 0;
            for (int e = off; e < off + sizes[q]; e++) {
                num += ((double)got[e] - want[e]) * ((double)got[e] - want[e]);
                den += (double)want[e] * want[e];
            }
            double rel = sqrt(num / den);
            if (!(rel <= 1e-5)) {
                fprintf(stderr,
                        "\n%s: np=%d parameter %d differs from 1 rank: relative %.3g > 1e-5\n",
                        case_name[c], world, q, rel);
                TEST_ERROR;
            }
            off += sizes[q];
        }
    }
    CHECK_OK(acx_finalize(acc));
    return 0;
error:
    if (acc) acx_finalize(acc);
    return 1;
}

int main(int argc, char **argv) {
    acx_test_mpi_begin(&argc, &argv, 240, &rank, &world); /* the program owns MPI; acx adopts it */
    acx_test_tmp_path(dir, sizeof dir, "");
    char data[1100];
    snprintf(data, sizeof data, "%s/ddp_equiv.h5", dir);
    int failed = 0;
    if (rank == 0 && write_dataset(data) != 0) {
        fprintf(stderr, "cannot write %s\n", data);
        failed = 1;
    }
    if (acx_test_agree(failed)) {
        MPI_Finalize();
        return 99;
    }
    for (int c = 0; c < NUM_CASES; c++) {
        char what[128];
        snprintf(what, sizeof what, "DDP %s on %d rank(s) == 1 rank", case_name[c], world);
        TESTING(what);
        int f = run_case((case_t)c, data);
        MPI_Allreduce(MPI_IN_PLACE, &f, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
        if (f)
            FAILED();
        else
            PASSED();
        failed |= f;
    }
    MPI_Finalize();
    return failed ? 1 : 0;
}

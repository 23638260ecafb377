/*
 * benchmarks/sgemm_rate.c — acx-bench-sgemm: the CBLAS sgemm rate (GFLOP/s)
 * of this machine on the calling thread, for the matrix shapes acx-gpt's
 * model multiplies (examples/gpt/gpt_model.c) and one large square product.
 * benchmarks/run-gpt.sh divides acx-gpt's achieved model GFLOP/s by these
 * rates (MFU). Links the BLAS only: no MPI, no acx. The thread count is the
 * BLAS's own (OPENBLAS_NUM_THREADS=1 for one core).
 *
 *   acx-bench-sgemm [--batch B] [--seq-len T] [--d-model C] [--vocab V]
 *                   [--layers L] [--square S] [--min-time SEC]
 *
 * Shapes, with N = B*T rows (defaults: acx-gpt's B 16, T 64, C 128, V 256,
 * L 4; square 1024): per linear layer of OC outputs and IC inputs (qkv C->3C,
 * attn proj C->C, fc C->4C, fc proj 4C->C, head C->V) the three products
 * of gpt_matmul_fwd/_bwd, each 2 N IC OC FLOPs:
 *   fwd   out[N x OC]  = inp[N x IC] W^T          (NoTrans, Trans)
 *   dinp  dinp[N x IC] += dout[N x OC] W          (NoTrans, NoTrans)
 *   dW    dW[OC x IC]  += dout^T inp              (Trans,   NoTrans)
 * then square S x S x S (NoTrans, NoTrans).
 *
 * Each shape runs repeatedly (after one untimed call) until --min-time
 * seconds (default 0.5) have passed, three times; the best of the three is
 * reported (the machine is shared: the best is the closest to its rate).
 * stdout: one line per shape
 *   sgemm NAME M N K GFLOPS
 * then
 *   sgemm gpt_mix GFLOPS        the FLOP-weighted harmonic mean over the GPT
 *                               shapes (block layers x L, the head once):
 *                               the rate of a step's products in the
 *                               model's proportions
 *   sgemm square GFLOPS         (also in the per-shape lines)
 * Exit status 0, 2 on bad usage, 1 when out of memory.
 */
#include <cblas.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct shape {
    char name[32];
    CBLAS_TRANSPOSE ta, tb;
    int m, n, k;
    int repeat; /* how many times a training step runs it (L per block layer) */
} shape_t;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int parse_int(const char *flag, const char *s, int lo, int hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) {
        fprintf(stderr, "acx-bench-sgemm: %s '%s': expected an integer in %d..%d\n", flag, s, lo,
                hi);
        return -1;
    }
    *out = (int)v;
    return 0;
}

/* GFLOP/s of one shape: best of three windows of at least min_time seconds. */
static double rate(const shape_t *s, float *A, float *B, float *C, double min_time) {
    /* Row-major leading dimensions: op(A) is m x k, op(B) is k x n. */
    int lda = s->ta == CblasNoTrans ? s->k : s->m;
    int ldb = s->tb == CblasNoTrans ? s->n : s->k;
    double flops = 2.0 * s->m * s->n * s->k, best = 0.0;
    cblas_sgemm(CblasRowMajor, s->ta, s->tb, s->m, s->n, s->k, 1.0f, A, lda, B, ldb, 1.0f, C, s->n);
    for (int w = 0; w < 3; w++) {
        long reps = 0;
        double t0 = now_s(), t;
        do {
            cblas_sgemm(CblasRowMajor, s->ta, s->tb, s->m, s->n, s->k, 1.0f, A, lda, B, ldb, 1.0f,
                        C, s->n);
            reps++;
            t = now_s() - t0;
        } while (t < min_time);
        double g = flops * (double)reps / t / 1e9;
        if (g > best) best = g;
    }
    return best;
}

int main(int argc, char **argv) {
    int B = 16, T = 64, Cm = 128, V = 256, L = 4, S = 1024;
    double min_time = 0.5;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (strcmp(f, "-h") == 0 || strcmp(f, "--help") == 0) {
            printf("usage: acx-bench-sgemm [--batch B] [--seq-len T] [--d-model C] [--vocab V] "
                   "[--layers L] [--square S] [--min-time SEC]\n");
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "acx-bench-sgemm: '%s' needs a value (see --help)\n", f);
            return 2;
        }
        const char *v = argv[++i];
        int r;
        if (strcmp(f, "--batch") == 0)
            r = parse_int(f, v, 1, 1 << 16, &B);
        else if (strcmp(f, "--seq-len") == 0)
            r = parse_int(f, v, 1, 1 << 16, &T);
        else if (strcmp(f, "--d-model") == 0)
            r = parse_int(f, v, 1, 1 << 16, &Cm);
        else if (strcmp(f, "--vocab") == 0)
            r = parse_int(f, v, 1, 1 << 20, &V);
        else if (strcmp(f, "--layers") == 0)
            r = parse_int(f, v, 1, 1 << 16, &L);
        else if (strcmp(f, "--square") == 0)
            r = parse_int(f, v, 0, 1 << 14, &S);
        else if (strcmp(f, "--min-time") == 0) {
            char *end;
            min_time = strtod(v, &end);
            r = (end == v || *end != '\0' || !(min_time > 0.0 && min_time <= 60.0)) ? -1 : 0;
            if (r != 0) fprintf(stderr, "acx-bench-sgemm: --min-time '%s': expected 0..60 s\n", v);
        } else {
            fprintf(stderr, "acx-bench-sgemm: unknown option '%s' (see --help)\n", f);
            return 2;
        }
        if (r != 0) return 2;
    }
    long N = (long)B * T;
    if (N > (1L << 24)) {
        fprintf(stderr, "acx-bench-sgemm: --batch x --seq-len = %ld rows, at most %ld\n", N,
                1L << 24);
        return 2;
    }

    /* The GPT's linear layers: name, inputs IC, outputs OC. */
    const struct {
        const char *name;
        int ic, oc, per_layer; /* per_layer: repeated in each block (the head is not) */
    } lin[] = {{"qkv", Cm, 3 * Cm, 1},
               {"attn_proj", Cm, Cm, 1},
               {"fc", Cm, 4 * Cm, 1},
               {"fc_proj", 4 * Cm, Cm, 1},
               {"head", Cm, V, 0}};
    enum { NLIN = sizeof lin / sizeof lin[0] };
    shape_t sh[3 * NLIN + 1];
    int ns = 0;
    for (int l = 0; l < NLIN; l++) {
        int n = (int)N, rep = lin[l].per_layer ? L : 1;
        sh[ns] = (shape_t){.ta = CblasNoTrans,
                           .tb = CblasTrans,
                           .m = n,
                           .n = lin[l].oc,
                           .k = lin[l].ic,
                           .repeat = rep};
        snprintf(sh[ns++].name, sizeof sh[0].name, "%s_fwd", lin[l].name);
        sh[ns] = (shape_t){.ta = CblasNoTrans,
                           .tb = CblasNoTrans,
                           .m = n,
                           .n = lin[l].ic,
                           .k = lin[l].oc,
                           .repeat = rep};
        snprintf(sh[ns++].name, sizeof sh[0].name, "%s_dinp", lin[l].name);
        sh[ns] = (shape_t){.ta = CblasTrans,
                           .tb = CblasNoTrans,
                           .m = lin[l].oc,
                           .n = lin[l].ic,
                           .k = n,
                           .repeat = rep};
        snprintf(sh[ns++].name, sizeof sh[0].name, "%s_dW", lin[l].name);
    }
    int ngpt = ns;
    if (S > 0) {
        sh[ns] =
            (shape_t){.ta = CblasNoTrans, .tb = CblasNoTrans, .m = S, .n = S, .k = S, .repeat = 1};
        snprintf(sh[ns++].name, sizeof sh[0].name, "square");
    }

    /* One set of buffers big enough for every shape. */
    size_t na = 0, nb = 0, nc = 0;
    for (int i = 0; i < ns; i++) {
        size_t a = (size_t)sh[i].m * sh[i].k, b = (size_t)sh[i].k * sh[i].n,
               c = (size_t)sh[i].m * sh[i].n;
        if (a > na) na = a;
        if (b > nb) nb = b;
        if (c > nc) nc = c;
    }
    float *A = malloc(na * sizeof *A), *Bm = malloc(nb * sizeof *Bm), *Cb = malloc(nc * sizeof *Cb);
    if (A == NULL || Bm == NULL || Cb == NULL) {
        fprintf(stderr, "acx-bench-sgemm: out of memory\n");
        return 1;
    }
    /* Small values: the accumulating C (beta 1) stays finite over many calls. */
    for (size_t i = 0; i < na; i++)
        A[i] = (float)((i * 7 + 3) % 17) * 1e-3f;
    for (size_t i = 0; i < nb; i++)
        Bm[i] = (float)((i * 5 + 1) % 13) * 1e-3f;
    memset(Cb, 0, nc * sizeof *Cb);

    printf("# acx-bench-sgemm: B %d T %d C %d V %d (N = %ld rows), square %d, min-time %g s\n", B,
           T, Cm, V, N, S, min_time);
    printf("# sgemm NAME M N K GFLOPS\n");
    double flops_sum = 0.0, time_sum = 0.0;
    for (int i = 0; i < ns; i++) {
        double g = rate(&sh[i], A, Bm, Cb, min_time);
        printf("sgemm %s %d %d %d %.2f\n", sh[i].name, sh[i].m, sh[i].n, sh[i].k, g);
        fflush(stdout);
        if (i < ngpt) {
            /* weighted by the FLOPs a training step spends in the shape */
            double f = 2.0 * sh[i].m * sh[i].n * sh[i].k * sh[i].repeat;
            flops_sum += f;
            time_sum += f / g;
        } else {
            printf("sgemm square %.2f\n", g);
        }
    }
    printf("sgemm gpt_mix %.2f\n", flops_sum / time_sum);
    free(A);
    free(Bm);
    free(Cb);
    return 0;
}

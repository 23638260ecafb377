/*
 * tests/mpi/test_weights.c — acx_model_load_weights, the safetensors export
 * of acx_model_save_weights, acx_param_gather_to and the debug mode's
 * write check, on 1, 2 and 3 ranks (tests/mpi/weights.test).
 *
 * The safetensors inputs are written here, byte by byte (the JSON header
 * with snprintf, the 16-bit encodings by hand), not by acx's writer, and
 * the expected values are the functions below, not anything acx computes.
 *
 *   model  unit emb: emb.weight [5, 3]          <- "emb.weight" F32 [5, 3]
 *          unit blk: blk.w [4, 6]               <- "h.stack" F32 [2, 4, 6], slice 1
 *                    blk.t [3, 5]               <- "h.t" F32 [5, 3], transposed
 *                    blk.bias [7]               <- "blk.bias" BF16
 *                    blk.g [2]                  <- "blk.g" F16
 *                    blk.d [3]                  <- "blk.d" F64
 *   (row counts leave ranks empty at 3 ranks: blk.g has 2 rows)
 *
 *   load       under no_shard, shard_grad_op, full_shard, hybrid_shard (one
 *              rank per simulated node), in fp32 and bf16: acx_param_gather
 *              equals the values bitwise; acx_param_data (acquired) equals
 *              them rounded to bf16 (nearest even) under bf16; one SGD step
 *              with lr 0 and zero gradients changes nothing; gather_to(root =
 *              last rank) equals acx_param_gather on root and leaves the
 *              others' buffers alone; save_weights(.safetensors) and (.h5)
 *              load back equal after a scramble load in between.
 *   strict     missing tensor, extra tensor (strict: error; non-strict:
 *              loaded), mis-shaped tensor (error even non-strict), and the
 *              parameters unchanged after each failure.
 *   hostile    header length past EOF, overlapping offsets, offsets past
 *              the data, a key given twice, trailing bytes, a bad dtype,
 *              bad JSON, a size that does not match
 *              the shape, a negative dim: ACX_ERR_FORMAT naming it, on
 *              every rank.
 *   ckpt       2 ranks save a checkpoint (acx_save_state); 2 and 3 ranks
 *              load its model with acx_model_load_weights.
 *   device     device-resident state on the emulated device (no_shard,
 *              shard_grad_op, full_shard; bf16): load, step, gather_to,
 *              the safetensors round trip.
 *   pending    a load with gradients pending — after a backward before the
 *              optimizer step, and between the micro-steps of an
 *              accumulation window (gradient_accumulation_steps 2) — is
 *              refused on every rank (ACX_ERR_STATE, "gradients pending"),
 *              the parameters unchanged; after the step, and after
 *              zero_grad, it loads. Under every strategy.
 *   debug      ACX_DEBUG_MODE=1: a write into acx_param_data on rank 0
 *              under full_shard is found at release and fails the next
 *              optimizer step on every rank, naming the parameter; under
 *              no_shard, found by the step itself.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "acx/acx.h"
#include "tests/acx_test_mpi.h"

static int rank, world;
static char dir[1024];

/* ---- the model and the expected values ---- */

enum { P_EMB, P_W, P_T, P_BIAS, P_G, P_D, NP };
static const struct {
    const char *name;
    int unit, ndim;
    int64_t shape[2];
    int64_t numel;
} par[NP] = {
    {"emb.weight", 0, 2, {5, 3}, 15}, {"blk.w", 1, 2, {4, 6}, 24}, {"blk.t", 1, 2, {3, 5}, 15},
    {"blk.bias", 1, 1, {7, 0}, 7},    {"blk.g", 1, 1, {2, 0}, 2},  {"blk.d", 1, 1, {3, 0}, 3},
};
#define MAXN 24

static double stack_val(int s, int r, int c) { return cos(0.31 * (s * 24 + r * 6 + c)); }
static double t_val(int i, int j) { return 0.25 * i - 0.125 * j + 0.01 * sin(i + 2.0 * j); }
static const double d_vals[3] = {0.1, -2.7, 1e-3};
static const float g_vals[2] = {1.5f, -0.328125f}; /* exact in float16 */

/* expected[q][k]: the float32 each parameter must hold */
static void expected(float e[NP][MAXN]) {
    for (int k = 0; k < 15; k++)
        e[P_EMB][k] = (float)(1.5 * sin(0.9 * k + 0.3));
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 6; c++)
            e[P_W][r * 6 + c] = (float)stack_val(1, r, c);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 5; j++)
            e[P_T][i * 5 + j] = (float)t_val(i, j);
    for (int k = 0; k < 7; k++)
        e[P_BIAS][k] = (float)(0.375 * k - 1.0); /* exact in bfloat16 */
    for (int k = 0; k < 2; k++)
        e[P_G][k] = g_vals[k];
    for (int k = 0; k < 3; k++)
        e[P_D][k] = (float)d_vals[k];
}

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
/* round to bfloat16, nearest even (finite inputs), back to float32 */
static float bf16_round(float f) {
    uint32_t u = f32_bits(f);
    u += 0x7fffu + ((u >> 16) & 1u);
    return bits_f32(u & 0xffff0000u);
}
/* float16 bits of a value exactly representable as a normal float16 */
static uint16_t f16_exact(float f) {
    uint32_t u = f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    int exp = (int)((u >> 23) & 0xff) - 127 + 15;
    uint32_t mant = (u >> 13) & 0x3ffu;
    return (uint16_t)(sign | (uint32_t)exp << 10 | mant);
}

/* ---- an independent safetensors writer ---- */

typedef struct tent {
    const char *name, *dtype;
    int ndim;
    int64_t shape[3];
    const void *data;
    size_t bytes;
} tent_t;

/* 8-byte length (0: the header's own), the header text, the data; rank 0
 * only. */
static int write_raw(const char *path, uint64_t len_field, const char *header, const void *data,
                     size_t data_bytes) {
    if (len_field == 0) len_field = strlen(header);
    FILE *f = fopen(path, "wb");
    if (f == NULL) return -1;
    unsigned char b[8];
    for (int k = 0; k < 8; k++)
        b[k] = (unsigned char)(len_field >> (8 * k));
    int ok = fwrite(b, 1, 8, f) == 8 && fwrite(header, 1, strlen(header), f) == strlen(header) &&
             (data_bytes == 0 || fwrite(data, 1, data_bytes, f) == data_bytes);
    return fclose(f) == 0 && ok ? 0 : -1;
}

static int write_st(const char *path, const tent_t *t, int n) {
    char header[8192];
    static unsigned char data[16384];
    size_t hl = (size_t)snprintf(header, sizeof header, "{\"__metadata__\":{\"by\":\"test\"}");
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        hl += (size_t)snprintf(header + hl, sizeof header - hl,
                               ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", t[i].name, t[i].dtype);
        for (int d = 0; d < t[i].ndim; d++)
            hl += (size_t)snprintf(header + hl, sizeof header - hl, "%s%lld", d ? "," : "",
                                   (long long)t[i].shape[d]);
        hl += (size_t)snprintf(header + hl, sizeof header - hl, "],\"data_offsets\":[%zu,%zu]}",
                               off, off + t[i].bytes);
        memcpy(data + off, t[i].data, t[i].bytes);
        off += t[i].bytes;
    }
    snprintf(header + hl, sizeof header - hl, "}");
    return write_raw(path, strlen(header), header, data, off);
}

/* The file tensors of the model above (their data in static storage). */
static int model_tensors(tent_t *t, int64_t stack_rows, int bad_t_shape) {
    static float emb[15], stack[2 * 4 * 6], tt[15];
    static uint16_t bias[7], g[2];
    static double d[3];
    float e[NP][MAXN];
    expected(e);
    memcpy(emb, e[P_EMB], sizeof emb);
    for (int s = 0; s < 2; s++)
        for (int k = 0; k < 24; k++)
            stack[s * 24 + k] = (float)stack_val(s, k / 6, k % 6);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 5; j++)
            tt[j * 3 + i] = (float)t_val(i, j); /* the file holds [5, 3] */
    for (int k = 0; k < 7; k++) {
        if ((f32_bits(e[P_BIAS][k]) & 0xffffu) != 0) return -1; /* not exact in bf16 */
        bias[k] = (uint16_t)(f32_bits(e[P_BIAS][k]) >> 16);
    }
    for (int k = 0; k < 2; k++)
        g[k] = f16_exact(g_vals[k]);
    memcpy(d, d_vals, sizeof d);
    int n = 0;
    t[n++] = (tent_t){"emb.weight", "F32", 2, {5, 3}, emb, sizeof emb};
    t[n++] = (tent_t){"h.stack",          "F32", 3,
                      {stack_rows, 4, 6}, stack, (size_t)stack_rows * 24 * sizeof(float)};
    t[n++] = (tent_t){"h.t", "F32", 2, {5, 3}, tt, sizeof tt};
    if (bad_t_shape) t[n - 1] = (tent_t){"h.t", "F32", 2, {3, 5}, tt, sizeof tt};
    t[n++] = (tent_t){"blk.bias", "BF16", 1, {7}, bias, sizeof bias};
    t[n++] = (tent_t){"blk.g", "F16", 1, {2}, g, sizeof g};
    t[n++] = (tent_t){"blk.d", "F64", 1, {3}, d, sizeof d};
    return n;
}

static const acx_weight_source_t the_map[] = {
    {.param = "blk.w", .tensor = "h.stack", .index = 1},
    {.param = "blk.t", .tensor = "h.t", .index = -1, .transpose = 1},
};

static void path_of(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", dir, name); }

/* Rank 0 writes every input file; all agree. */
static int write_inputs(void) {
    int failed = 0;
    if (rank == 0) {
        char p[1300];
        tent_t t[8];
        int n = model_tensors(t, 2, 0);
        path_of(p, sizeof p, "model.safetensors");
        failed |= n < 0 || write_st(p, t, n) != 0;
        /* missing: without blk.d */
        path_of(p, sizeof p, "missing.safetensors");
        failed |= write_st(p, t, n - 1) != 0;
        /* extra: one more tensor */
        static const float junk[2] = {7, 8};
        t[n] = (tent_t){"junk", "F32", 1, {2}, junk, sizeof junk};
        path_of(p, sizeof p, "extra.safetensors");
        failed |= write_st(p, t, n + 1) != 0;
        /* mis-shaped: h.t stored [3, 5] where the transpose needs [5, 3] */
        n = model_tensors(t, 2, 1);
        path_of(p, sizeof p, "misshaped.safetensors");
        failed |= write_st(p, t, n) != 0;
        /* a stack too short for slice 1 */
        n = model_tensors(t, 1, 0);
        path_of(p, sizeof p, "short_stack.safetensors");
        failed |= write_st(p, t, n) != 0;
        /* scramble: every parameter by its own name, other values */
        static float s[NP][MAXN];
        for (int q = 0; q < NP; q++) {
            for (int k = 0; k < par[q].numel; k++)
                s[q][k] = 100.0f + (float)(q * 10 + k);
            t[q] = (tent_t){par[q].name, "F32",
                            par[q].ndim, {par[q].shape[0], par[q].shape[1]},
                            s[q],        (size_t)par[q].numel * sizeof(float)};
        }
        path_of(p, sizeof p, "scramble.safetensors");
        failed |= write_st(p, t, NP) != 0;
        /* hostile headers */
        static const float eight[3] = {1, 2, 3};
        path_of(p, sizeof p, "h_len.safetensors");
        failed |= write_raw(p, 10000, "{}", NULL, 0) != 0;
        path_of(p, sizeof p, "h_overlap.safetensors");
        failed |= write_raw(p, 99,
                            "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                            "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                            eight, 12) != 0;
        path_of(p, sizeof p, "h_past.safetensors");
        failed |=
            write_raw(p, 0, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
                      eight, 4) != 0;
        path_of(p, sizeof p, "h_dtype.safetensors");
        failed |= write_raw(p, 0, "{\"a\":{\"dtype\":\"Q7\",\"shape\":[2],\"data_offsets\":[0,8]}}",
                            eight, 8) != 0;
        path_of(p, sizeof p, "h_json.safetensors");
        failed |= write_raw(p, 0, "{\"a\":{\"dtype\":\"F32\",  ", eight, 8) != 0;
        path_of(p, sizeof p, "h_size.safetensors");
        failed |=
            write_raw(p, 0, "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}",
                      eight, 8) != 0;
        path_of(p, sizeof p, "h_neg.safetensors");
        failed |=
            write_raw(p, 0, "{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}",
                      eight, 8) != 0;
        /* a key given twice (JSON parsers keep one of them) and bytes
         * that belong to no tensor */
        path_of(p, sizeof p, "h_dup.safetensors");
        failed |= write_raw(p, 0,
                            "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                            "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                            eight, 8) != 0;
        path_of(p, sizeof p, "h_trail.safetensors");
        failed |=
            write_raw(p, 0, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
                      eight, 8) != 0;
        if (failed) fprintf(stderr, "\ncannot write the test inputs in %s\n", dir);
    }
    return acx_test_agree(failed);
}

/* ---- the model under acx ---- */

typedef struct net {
    acx_accelerator_t *acc;
    acx_model_t *m;
    acx_unit_t *u[2];
    acx_param_t *p[NP];
    acx_optimizer_t *opt;
} net_t;

static int device_state = ACX_DEVICE_STATE_AUTO; /* the emulated device: device_case */
static int accum_steps = 1;                      /* pending_case */

static acx_status_t net_open(net_t *n, int strategy, int bf16) {
    acx_config_t cfg = ACX_CONFIG_DEFAULT;
    cfg.device_state = device_state;
    cfg.seed = 7;
    cfg.sharding_strategy = strategy;
    cfg.mixed_precision = bf16 ? ACX_MP_BF16 : ACX_MP_NO;
    cfg.gradient_accumulation_steps = accum_steps;
    if (strategy == ACX_HYBRID_SHARD) cfg.ranks_per_node = 1; /* simulated nodes of one rank */
    memset(n, 0, sizeof *n);
    acx_status_t st;
#define TRY(call)                                                                                  \
    do {                                                                                           \
        if ((st = (call)) != ACX_OK) return st;                                                    \
    } while (0)
    TRY(acx_init(NULL, NULL, &cfg, &n->acc));
    TRY(acx_model_create(n->acc, &n->m));
    TRY(acx_model_add_unit(n->m, "emb", &n->u[0]));
    TRY(acx_model_add_unit(n->m, "blk", &n->u[1]));
    for (int q = 0; q < NP; q++)
        TRY(acx_unit_add_param(n->u[par[q].unit], par[q].name, par[q].ndim, par[q].shape,
                               ACX_INIT_SPEC_NORMAL(0, 1), &n->p[q]));
    acx_sgd_hparams_t hp = {.lr = 0.0};
    TRY(acx_sgd_create(n->m, &hp, &n->opt));
    TRY(acx_prepare(n->acc, n->m, n->opt, NULL));
#undef TRY
    return ACX_OK;
}

static void net_close(net_t *n) {
    if (n->acc != NULL) acx_finalize(n->acc);
    n->acc = NULL;
}

/* Every parameter gathered equals e bitwise? Prints the first difference. */
static int gathered_equal(net_t *n, float e[NP][MAXN], const char *when) {
    float got[MAXN];
    for (int q = 0; q < NP; q++) {
        if (acx_param_gather(n->p[q], got) != ACX_OK) {
            fprintf(stderr, "\n[r%d] acx_param_gather(%s): %s\n", rank, par[q].name,
                    acx_last_error());
            return 0;
        }
        for (int k = 0; k < par[q].numel; k++)
            if (f32_bits(got[k]) != f32_bits(e[q][k])) {
                fprintf(stderr, "\n[r%d] %s: %s[%d] = %.9g, expected %.9g\n", rank, when,
                        par[q].name, k, got[k], e[q][k]);
                return 0;
            }
    }
    return 1;
}

/* acquired acx_param_data equals e (rounded to bf16 under bf16)? */
static int data_equal(net_t *n, float e[NP][MAXN], int bf16, const char *when) {
    int ok = 1;
    for (int u = 0; u < 2; u++) {
        if (acx_unit_acquire(n->u[u]) != ACX_OK) return 0;
        for (int q = 0; q < NP && ok; q++) {
            if (par[q].unit != u) continue;
            const float *d = acx_param_data(n->p[q]);
            for (int k = 0; d != NULL && k < par[q].numel && ok; k++) {
                float want = bf16 ? bf16_round(e[q][k]) : e[q][k];
                if (f32_bits(d[k]) != f32_bits(want)) {
                    fprintf(stderr, "\n[r%d] %s: acx_param_data(%s)[%d] = %.9g, expected %.9g\n",
                            rank, when, par[q].name, k, d[k], want);
                    ok = 0;
                }
            }
            if (d == NULL) ok = 0;
        }
        if (acx_unit_release(n->u[u]) != ACX_OK) ok = 0;
    }
    return ok;
}

/* One step of zero gradients (each unit acquired, reported, released). */
static acx_status_t zero_step(net_t *n) {
    acx_status_t st;
    if ((st = acx_accumulate_begin(n->acc)) != ACX_OK) return st;
    for (int u = 0; u < 2; u++) {
        if ((st = acx_unit_acquire(n->u[u])) != ACX_OK) return st;
        if ((st = acx_unit_release(n->u[u])) != ACX_OK) return st;
    }
    for (int u = 1; u >= 0; u--) {
        if ((st = acx_unit_acquire(n->u[u])) != ACX_OK) return st;
        if ((st = acx_unit_grads_ready(n->u[u])) != ACX_OK) return st;
        if ((st = acx_unit_release(n->u[u])) != ACX_OK) return st;
    }
    if ((st = acx_backward_end(n->acc)) != ACX_OK) return st;
    if ((st = acx_optimizer_step(n->opt)) != ACX_OK) return st;
    if ((st = acx_optimizer_zero_grad(n->opt)) != ACX_OK) return st;
    return acx_accumulate_end(n->acc);
}

static const char *const strat_name[4] = {"no_shard", "shard_grad_op", "full_shard",
                                          "hybrid_shard"};

/* ---- cases ---- */

static int load_case(int strategy, int bf16) {
    net_t n;
    float e[NP][MAXN], s[NP][MAXN];
    char p[1300], rt[1300], h5[1300];
    expected(e);
    const acx_load_options_t opts = {.map = the_map, .map_len = 2, .strict = 1};
    CHECK_OK(net_open(&n, strategy, bf16));
    path_of(p, sizeof p, "model.safetensors");
    CHECK_OK(acx_model_load_weights(n.m, p, &opts));
    CHECK(gathered_equal(&n, e, "after load"));
    CHECK(data_equal(&n, e, bf16, "after load"));
    CHECK_OK(zero_step(&n));
    CHECK(gathered_equal(&n, e, "after a step of lr 0"));
    CHECK(data_equal(&n, e, bf16, "after a step of lr 0"));
    /* gather_to the last rank: its values, nothing elsewhere */
    for (int q = 0; q < NP; q++) {
        float all[MAXN], one[MAXN];
        for (int k = 0; k < MAXN; k++)
            one[k] = -12345.0f;
        CHECK_OK(acx_param_gather(n.p[q], all));
        CHECK_OK(acx_param_gather_to(n.p[q], world - 1, rank == world - 1 ? one : NULL));
        for (int k = 0; k < par[q].numel; k++)
            CHECK(rank == world - 1 ? f32_bits(one[k]) == f32_bits(all[k]) : one[k] == -12345.0f);
        float other[MAXN];
        for (int k = 0; k < MAXN; k++)
            other[k] = -12345.0f;
        CHECK_OK(acx_param_gather_to(n.p[q], 0, other));
        for (int k = 0; k < par[q].numel; k++)
            CHECK(rank == 0 ? f32_bits(other[k]) == f32_bits(all[k]) : other[k] == -12345.0f);
    }
    /* round trips: safetensors and HDF5, a scramble load in between */
    snprintf(rt, sizeof rt, "%s/rt_%s_%d_np%d.safetensors", dir, strat_name[strategy], bf16, world);
    snprintf(h5, sizeof h5, "%s/rt_%s_%d_np%d.h5", dir, strat_name[strategy], bf16, world);
    CHECK_OK(acx_model_save_weights(n.m, rt));
    CHECK_OK(acx_model_save_weights(n.m, h5));
    for (int q = 0; q < NP; q++)
        for (int k = 0; k < par[q].numel; k++)
            s[q][k] = 100.0f + (float)(q * 10 + k);
    path_of(p, sizeof p, "scramble.safetensors");
    CHECK_OK(acx_model_load_weights(n.m, p, NULL));
    CHECK(gathered_equal(&n, s, "after the scramble load"));
    CHECK(data_equal(&n, s, bf16, "after the scramble load"));
    CHECK_OK(acx_model_load_weights(n.m, rt, NULL));
    CHECK(gathered_equal(&n, e, "loaded back from safetensors"));
    CHECK(data_equal(&n, e, bf16, "loaded back from safetensors"));
    CHECK_OK(acx_model_load_weights(n.m, p, NULL));
    CHECK_OK(acx_model_load_weights(n.m, h5, NULL));
    CHECK(gathered_equal(&n, e, "loaded back from an acx weights file"));
    CHECK(data_equal(&n, e, bf16, "loaded back from an acx weights file"));
    net_close(&n);
    return 0;
error:
    net_close(&n);
    return 1;
}

/* The rank 0 reads the export's header bytes independently: keys sorted,
 * the metadata, F32. */
static int export_case(void) {
    net_t n;
    char p[1300], rt[1300];
    int ok = 1;
    CHECK_OK(net_open(&n, ACX_FULL_SHARD, 0));
    const acx_load_options_t opts = {.map = the_map, .map_len = 2, .strict = 1};
    path_of(p, sizeof p, "model.safetensors");
    CHECK_OK(acx_model_load_weights(n.m, p, &opts));
    snprintf(rt, sizeof rt, "%s/export_np%d.safetensors", dir, world);
    CHECK_OK(acx_model_save_weights(n.m, rt));
    if (rank == 0) {
        FILE *f = fopen(rt, "rb");
        unsigned char b[8];
        static char h[4096];
        ok = f != NULL && fread(b, 1, 8, f) == 8;
        uint64_t len = 0;
        for (int k = 7; k >= 0; k--)
            len = len << 8 | b[k];
        ok = ok && len % 8 == 0 && len < sizeof h && fread(h, 1, len, f) == len;
        if (f != NULL) fclose(f);
        h[ok ? len : 0] = '\0';
        /* sorted by strcmp ('_' < 'b' < 'e') */
        const char *order[] = {"\"__metadata__\"", "\"blk.bias\"", "\"blk.d\"",     "\"blk.g\"",
                               "\"blk.t\"",        "\"blk.w\"",    "\"emb.weight\""};
        const char *at[7];
        for (int k = 0; k < 7; k++)
            at[k] = strstr(h, order[k]);
        for (int k = 0; k < 7; k++)
            ok = ok && at[k] != NULL && (k == 0 || at[k] > at[k - 1]);
        ok = ok && strstr(h, "\"format\":\"acx-weights\"") != NULL &&
             strstr(h, "\"step\":\"0\"") != NULL && strstr(h, "\"F16\"") == NULL;
        if (!ok) fprintf(stderr, "\nthe export's header is not as expected: %s\n", h);
    }
    CHECK(acx_test_agree(!ok) == 0);
    net_close(&n);
    return 0;
error:
    net_close(&n);
    return 1;
}

static int strict_case(void) {
    net_t n;
    float e[NP][MAXN], got[MAXN];
    char p[1300];
    expected(e);
    acx_load_options_t opts = {.map = the_map, .map_len = 2, .strict = 1};
    CHECK_OK(net_open(&n, ACX_FULL_SHARD, 0));
    path_of(p, sizeof p, "model.safetensors");
    CHECK_OK(acx_model_load_weights(n.m, p, &opts));
    path_of(p, sizeof p, "missing.safetensors");
    CHECK_STATUS(acx_model_load_weights(n.m, p, &opts), ACX_ERR_FORMAT, "'blk.d'");
    CHECK(gathered_equal(&n, e, "after a failed strict load (missing)"));
    path_of(p, sizeof p, "extra.safetensors");
    CHECK_STATUS(acx_model_load_weights(n.m, p, &opts), ACX_ERR_FORMAT, "'junk'");
    CHECK(gathered_equal(&n, e, "after a failed strict load (extra)"));
    path_of(p, sizeof p, "misshaped.safetensors");
    CHECK_STATUS(acx_model_load_weights(n.m, p, &opts), ACX_ERR_FORMAT,
                 "shape [3, 5], expected [5, 3]");
    opts.strict = 0;
    CHECK_STATUS(acx_model_load_weights(n.m, p, &opts), ACX_ERR_FORMAT, "'blk.t'");
    path_of(p, sizeof p, "short_stack.safetensors");
    CHECK_STATUS(acx_model_load_weights(n.m, p, &opts), ACX_ERR_FORMAT, "'h.stack'");
    CHECK(gathered_equal(&n, e, "after failed mis-shaped loads"));
    /* non-strict: the extra tensor skipped; the missing one keeps its values */
    path_of(p, sizeof p, "extra.safetensors");
    CHECK_OK(acx_model_load_weights(n.m, p, &opts));
    CHECK(gathered_equal(&n, e, "after a non-strict load with an extra tensor"));
    path_of(p, sizeof p, "scramble.safetensors");
    CHECK_OK(acx_model_load_weights(n.m, p, NULL));
    path_of(p, sizeof p, "missing.safetensors");
    CHECK_OK(acx_model_load_weights(n.m, p, &opts));
    CHECK_OK(acx_param_gather(n.p[P_D], got));
    for (int k = 0; k < 3; k++)
        CHECK(got[k] == 100.0f + (float)(P_D * 10 + k)); /* kept */
    CHECK_OK(acx_param_gather(n.p[P_T], got));
    for (int k = 0; k < 15; k++)
        CHECK(got[k] == e[P_T][k]); /* loaded */
    /* a map entry naming no parameter */
    const acx_weight_source_t bad[] = {{.param = "nope", .tensor = "h.t", .index = -1}};
    acx_load_options_t bo = {.map = bad, .map_len = 1, .strict = 0};
    CHECK_STATUS(acx_model_load_weights(n.m, p, &bo), ACX_ERR_INVALID_ARG, "'nope'");
    net_close(&n);
    return 0;
error:
    net_close(&n);
    return 1;
}

/* One micro-step's forward and backward, gradients of 1 in every parameter
 * (acquired: the full buffers). */
static acx_status_t micro_backward(net_t *n) {
    acx_status_t st;
    for (int u = 1; u >= 0; u--) {
        if ((st = acx_unit_acquire(n->u[u])) != ACX_OK) return st;
        for (int q = 0; q < NP; q++) {
            if (par[q].unit != u) continue;
            float *g = acx_param_grad(n->p[q]);
            for (int k = 0; k < par[q].numel; k++)
                g[k] += 1.0f;
        }
        if ((st = acx_unit_grads_ready(n->u[u])) != ACX_OK) return st;
        if ((st = acx_unit_release(n->u[u])) != ACX_OK) return st;
    }
    return acx_backward_end(n->acc);
}

/* acx_model_load_weights with gradients pending (computed with the weights
 * it would replace) is refused on every rank and changes nothing; between
 * optimizer steps it loads. */
static int pending_case(int strategy) {
    net_t n;
    float e[NP][MAXN], s[NP][MAXN];
    char p[1300], q[1300];
    expected(e);
    for (int i = 0; i < NP; i++)
        for (int k = 0; k < par[i].numel; k++)
            s[i][k] = 100.0f + (float)(i * 10 + k);
    const acx_load_options_t opts = {.map = the_map, .map_len = 2, .strict = 1};
    path_of(p, sizeof p, "model.safetensors");
    path_of(q, sizeof q, "scramble.safetensors");
    accum_steps = 2;
    acx_status_t st = net_open(&n, strategy, 0);
    accum_steps = 1;
    CHECK_OK(st);
    CHECK_OK(acx_model_load_weights(n.m, p, &opts));
    /* micro-step 1 of 2: gradients accumulate, no step */
    CHECK_OK(acx_accumulate_begin(n.acc));
    CHECK(!acx_sync_gradients(n.acc));
    CHECK_OK(micro_backward(&n));
    CHECK_STATUS(acx_model_load_weights(n.m, q, NULL), ACX_ERR_STATE, "gradients pending");
    CHECK_OK(acx_accumulate_end(n.acc));
    CHECK_STATUS(acx_model_load_weights(n.m, q, NULL), ACX_ERR_STATE, "gradients pending");
    CHECK(gathered_equal(&n, e, "after a refused load between micro-steps"));
    /* micro-step 2: the boundary; refused after backward, loads after the
     * step (lr 0: the weights stay e until the load) */
    CHECK_OK(acx_accumulate_begin(n.acc));
    CHECK(acx_sync_gradients(n.acc));
    CHECK_OK(micro_backward(&n));
    CHECK_STATUS(acx_model_load_weights(n.m, q, NULL), ACX_ERR_STATE, "gradients pending");
    CHECK(gathered_equal(&n, e, "after a refused load before the step"));
    CHECK_OK(acx_optimizer_step(n.opt));
    CHECK_OK(acx_model_load_weights(n.m, q, NULL));
    CHECK(gathered_equal(&n, s, "loaded after the step"));
    CHECK_OK(acx_optimizer_zero_grad(n.opt));
    CHECK_OK(acx_accumulate_end(n.acc));
    CHECK_OK(acx_model_load_weights(n.m, p, &opts));
    CHECK(gathered_equal(&n, e, "loaded after zero_grad"));
    /* gradients dropped by zero_grad without a step: nothing pending */
    CHECK_OK(acx_accumulate_begin(n.acc));
    CHECK_OK(micro_backward(&n));
    CHECK_OK(acx_optimizer_zero_grad(n.opt));
    CHECK_OK(acx_model_load_weights(n.m, q, NULL));
    CHECK(gathered_equal(&n, s, "loaded after zero_grad without a step"));
    CHECK_OK(acx_accumulate_end(n.acc));
    net_close(&n);
    return 0;
error:
    net_close(&n);
    return 1;
}

/* Device-resident state (the emulated device: host code cannot touch its
 * memory, so only the host copies are compared): the load copies through
 * the device table, gather_to copies the rows back first. */
static int device_case(int strategy) {
    net_t n;
    float e[NP][MAXN], s[NP][MAXN];
    char p[1300], rt[1300];
    expected(e);
    device_state = ACX_DEVICE_STATE_EMULATED;
    const acx_load_options_t opts = {.map = the_map, .map_len = 2, .strict = 1};
    CHECK_OK(net_open(&n, strategy, 1));
    path_of(p, sizeof p, "model.safetensors");
    CHECK_OK(acx_model_load_weights(n.m, p, &opts));
    CHECK(gathered_equal(&n, e, "after load (emulated device)"));
    CHECK_OK(zero_step(&n));
    CHECK(gathered_equal(&n, e, "after a step of lr 0 (emulated device)"));
    for (int q = 0; q < NP; q++) {
        float one[MAXN];
        CHECK_OK(acx_param_gather_to(n.p[q], 0, rank == 0 ? one : NULL));
        for (int k = 0; rank == 0 && k < par[q].numel; k++)
            CHECK(f32_bits(one[k]) == f32_bits(e[q][k]));
    }
    snprintf(rt, sizeof rt, "%s/dev_%s_np%d.safetensors", dir, strat_name[strategy], world);
    CHECK_OK(acx_model_save_weights(n.m, rt));
    for (int q = 0; q < NP; q++)
        for (int k = 0; k < par[q].numel; k++)
            s[q][k] = 100.0f + (float)(q * 10 + k);
    path_of(p, sizeof p, "scramble.safetensors");
    CHECK_OK(acx_model_load_weights(n.m, p, NULL));
    CHECK(gathered_equal(&n, s, "after the scramble load (emulated device)"));
    CHECK_OK(acx_model_load_weights(n.m, rt, NULL));
    CHECK(gathered_equal(&n, e, "loaded back (emulated device)"));
    net_close(&n);
    device_state = ACX_DEVICE_STATE_AUTO;
    return 0;
error:
    net_close(&n);
    device_state = ACX_DEVICE_STATE_AUTO;
    return 1;
}

static int hostile_case(void) {
    net_t n;
    char p[1300];
    static const struct {
        const char *file, *needle;
    } cases[] = {
        {"h_len.safetensors", "header length 10000"},
        {"h_overlap.safetensors", "overlap"},
        {"h_past.safetensors", "data_offsets"},
        {"h_dtype.safetensors", "'Q7'"},
        {"h_json.safetensors", "not valid JSON"},
        {"h_size.safetensors", "need 12"},
        {"h_neg.safetensors", "shape[0]"},
        {"h_dup.safetensors", "bytes [0, 4) of the data area belong to no tensor"},
        {"h_trail.safetensors", "bytes [4, 8) at the end of the data area"},
    };
    CHECK_OK(net_open(&n, ACX_SHARD_GRAD_OP, 0));
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        path_of(p, sizeof p, cases[c].file);
        CHECK_STATUS(acx_model_load_weights(n.m, p, NULL), ACX_ERR_FORMAT, cases[c].needle);
        CHECK(strstr(acx_last_error(), cases[c].file) != NULL); /* names the file */
    }
    path_of(p, sizeof p, "no_such_file.safetensors");
    CHECK_STATUS(acx_model_load_weights(n.m, p, NULL), ACX_ERR_IO, "no_such_file");
    net_close(&n);
    return 0;
error:
    net_close(&n);
    return 1;
}

/* 2 ranks save a checkpoint of the loaded model; 2 and 3 ranks load it. */
static int ckpt_case(void) {
    net_t n;
    float e[NP][MAXN];
    char p[1300], ck[1300];
    expected(e);
    path_of(ck, sizeof ck, "ckpt_np2.h5");
    if (world == 2) {
        const acx_load_options_t opts = {.map = the_map, .map_len = 2, .strict = 1};
        CHECK_OK(net_open(&n, ACX_FULL_SHARD, 0));
        path_of(p, sizeof p, "model.safetensors");
        CHECK_OK(acx_model_load_weights(n.m, p, &opts));
        CHECK_OK(zero_step(&n));
        CHECK_OK(acx_save_state(n.acc, ck));
        net_close(&n);
    }
    if (access(ck, F_OK) != 0) return 0; /* 1 rank: the 2-rank run has not made it yet */
    CHECK_OK(net_open(&n, world == 3 ? ACX_SHARD_GRAD_OP : ACX_NO_SHARD, 1));
    CHECK_OK(acx_model_load_weights(n.m, ck, NULL));
    CHECK(gathered_equal(&n, e, "loaded from the 2-rank checkpoint"));
    CHECK(data_equal(&n, e, 1, "loaded from the 2-rank checkpoint"));
    net_close(&n);
    return 0;
error:
    net_close(&n);
    return 1;
}

static int debug_case(void) {
    net_t n = {0};
    setenv("ACX_DEBUG_MODE", "1", 1);
    CHECK_OK(net_open(&n, ACX_FULL_SHARD, 0));
    CHECK_OK(acx_unit_acquire(n.u[1]));
    /* what the API forbids, on rank 0 only (rank-0-only code): the release
     * is not collective, so it only records it ... */
    if (rank == 0) ((float *)acx_param_data(n.p[P_T]))[2] += 1.0f;
    CHECK_OK(acx_unit_release(n.u[1]));
    CHECK_OK(acx_unit_acquire(n.u[0]));
    CHECK_OK(acx_unit_release(n.u[0]));
    /* ... and every rank's next step stops, naming it */
    CHECK_STATUS(zero_step(&n), ACX_ERR_STATE, "'blk.t'");
    CHECK(strstr(acx_last_error(), "at acx_unit_release") != NULL);
    net_close(&n);
    /* no_shard: the copy stays; the next step finds it */
    CHECK_OK(net_open(&n, ACX_NO_SHARD, 1));
    CHECK_OK(zero_step(&n));
    ((float *)acx_param_data(n.p[P_EMB]))[0] = 3.0f;
    acx_status_t st = acx_accumulate_begin(n.acc);
    for (int u = 0; u < 2 && st == ACX_OK; u++)
        st = acx_unit_grads_ready(n.u[u]);
    if (st == ACX_OK) st = acx_backward_end(n.acc);
    CHECK_OK(st);
    CHECK_STATUS(acx_optimizer_step(n.opt), ACX_ERR_STATE, "'emb.weight'");
    net_close(&n);
    unsetenv("ACX_DEBUG_MODE");
    return 0;
error:
    net_close(&n);
    unsetenv("ACX_DEBUG_MODE");
    return 1;
}

int main(int argc, char **argv) {
    acx_test_mpi_begin(&argc, &argv, 280, &rank, &world);
    acx_test_tmp_path(dir, sizeof dir, "weights");
    if (rank == 0) mkdir(dir, 0755);
    if (rank == 0 && world == 1) { /* a fresh start: no checkpoint from an earlier run */
        char ck[1300];
        path_of(ck, sizeof ck, "ckpt_np2.h5");
        unlink(ck);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    int failed = 0;
    char what[300];
    TESTING("writing the inputs");
    failed |= acx_test_report(write_inputs());
    for (int s = ACX_NO_SHARD; s <= ACX_HYBRID_SHARD && !failed; s++)
        for (int bf16 = 0; bf16 <= 1; bf16++) {
            snprintf(what, sizeof what, "load, step, gather_to, round trip: %s %s, %d rank(s)",
                     strat_name[s], bf16 ? "bf16" : "fp32", world);
            TESTING(what);
            failed |= acx_test_report(load_case(s, bf16));
        }
    if (!failed) {
        TESTING("the safetensors export's header");
        failed |= acx_test_report(export_case());
        TESTING("strict and non-strict: missing, extra, mis-shaped");
        failed |= acx_test_report(strict_case());
        for (int st = ACX_NO_SHARD; st <= ACX_FULL_SHARD; st++) {
            snprintf(what, sizeof what, "device-resident state (emulated), %s, bf16",
                     strat_name[st]);
            TESTING(what);
            failed |= acx_test_report(device_case(st));
        }
        for (int st = ACX_NO_SHARD; st <= ACX_HYBRID_SHARD; st++) {
            snprintf(what, sizeof what, "a load with gradients pending is refused: %s",
                     strat_name[st]);
            TESTING(what);
            failed |= acx_test_report(pending_case(st));
        }
        TESTING("hostile safetensors headers");
        failed |= acx_test_report(hostile_case());
        TESTING("the model of a checkpoint saved on 2 ranks");
        failed |= acx_test_report(ckpt_case());
        TESTING("debug mode: a write into acx_param_data is caught");
        failed |= acx_test_report(debug_case());
    }
    MPI_Finalize();
    return failed ? 1 : 0;
}

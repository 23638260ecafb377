/*
 * tests/mpi/test_tokens.c — the token-stream loader and step mode through
 * the public API, on 1..3 ranks. Rank 0 writes its own token file with
 * plain HDF5: /u16 (uint16) and /i32 (int32), 1001 tokens each with known
 * values tok(i) (formulas below) and a vocab_size attribute, plus hostile
 * datasets (negative ids, ids >= vocab_size). With T = 10 there are
 * (1001 - 1) / 10 = 100 windows. Checked against values computed here:
 *   - gathered over ranks (plain MPI), every window appears exactly once per
 *     epoch (padding aside), and epochs 0 and 1 have different orders;
 *   - inputs[i][k] = tok(w*T + k), targets[i][k] = tok(w*T + k + 1);
 *   - shuffle 0: rank r's batch b holds windows b*G + r*B + j;
 *   - hostile ids: the open fails on EVERY rank with the same ACX_ERR_FORMAT
 *     naming file, dataset, the lowest bad position and its value, also
 *     when that position lies in another rank's slice of the open's scan;
 *   - acx_dataloader_vocab_size: the attribute (50000, 256), else the
 *     largest id + 1 of the whole dataset (/top: 70001, the id sits in the
 *     last token, outside rank 0's slice), -1 for a sample loader;
 *   - seq_len >= the token count (10 of 10, INT64_MAX): refused at open;
 *   - mode "save" (2 ranks): 3 batches of 2 per rank (12 windows), the seen
 *     windows to DIR/seen.txt, then a checkpoint; mode "resume" (3 ranks):
 *     the rest of the epoch is exactly the 88 windows not seen, under a
 *     global batch of 6 (divides 12) and of 15 (does not: the rest starts
 *     inside a global batch), which saves again at 42 windows; mode
 *     "resume2" (2 ranks, global batch 4): exactly the other 58;
 *   - step mode: 5 batches per epoch, accumulation 2, max_steps 6: 12
 *     micro-steps make exactly 6 optimizer steps and the loader stands in
 *     epoch 2 (epoch mode: 7 steps, as before); a save at step 3 resumed
 *     in a new accelerator continues the window stream exactly.
 * Ranks agree on pass/fail (MPI_LOR) so every rank exits with the same code.
 */
#include <hdf5.h>
#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/acx_test.h"

#define NTOK   1001
#define T      10
#define NWIN   100
#define VOCAB  50000
#define BADAT  517   /* the first hostile token's position: only in window 51 */
#define BADAT2 950   /* a second one, later (another rank's slice on 3 ranks) */
#define TOPID  70000 /* /top's last token, its largest id */

static int rank, world;
static char dir[256], data_path[300];

static int64_t tok_u16(int64_t i) { return (i * 7919 + 3) % VOCAB; }
static int64_t tok_i32(int64_t i) { return (i * 104729 + 5) % 1000003; }

/* ---- the token file (rank 0) ---- */

static int write_tokens(hid_t f, const char *name, hid_t ftype, hid_t mtype, hsize_t n,
                        const void *buf, int64_t vocab) {
    hid_t sp = H5Screate_simple(1, &n, NULL);
    hid_t d = H5Dcreate2(f, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    int rc = d < 0 || H5Dwrite(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0;
    if (!rc && vocab > 0) {
        hid_t as = H5Screate(H5S_SCALAR);
        hid_t a = H5Acreate2(d, "vocab_size", H5T_STD_I64LE, as, H5P_DEFAULT, H5P_DEFAULT);
        rc = a < 0 || H5Awrite(a, H5T_NATIVE_INT64, &vocab) < 0;
        if (a >= 0) H5Aclose(a);
        H5Sclose(as);
    }
    if (d >= 0) H5Dclose(d);
    H5Sclose(sp);
    return rc;
}

static int make_file(void) {
    static uint16_t u[NTOK], bu[NTOK];
    static int32_t s[NTOK], bs[NTOK], st[5 * 3 * T + 1], top[NTOK];
    for (int i = 0; i < NTOK; i++) {
        u[i] = bu[i] = (uint16_t)tok_u16(i);
        s[i] = bs[i] = (int32_t)tok_i32(i);
    }
    bs[BADAT] = -5;
    bs[BADAT2] = -7;
    bu[33] = 60000;
    bu[800] = 65535;
    for (int i = 0; i < NTOK; i++)
        top[i] = i % 256;
    top[NTOK - 1] = TOPID;
    int nst = 5 * world * T + 1; /* 5 windows per rank: 5 batches of 1 */
    for (int i = 0; i < nst; i++)
        st[i] = i % 256;
    hid_t f = H5Fcreate(data_path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (f < 0) return 1;
    int rc = 0;
    rc |= write_tokens(f, "/u16", H5T_STD_U16LE, H5T_NATIVE_UINT16, NTOK, u, VOCAB);
    rc |= write_tokens(f, "/i32", H5T_STD_I32BE, H5T_NATIVE_INT32, NTOK, s, 0);
    rc |= write_tokens(f, "/neg", H5T_STD_I32LE, H5T_NATIVE_INT32, NTOK, bs, 0);
    rc |= write_tokens(f, "/big", H5T_STD_U16LE, H5T_NATIVE_UINT16, NTOK, bu, VOCAB);
    rc |= write_tokens(f, "/steps", H5T_STD_I32LE, H5T_NATIVE_INT32, (hsize_t)nst, st, 256);
    rc |= write_tokens(f, "/tiny", H5T_STD_U16LE, H5T_NATIVE_UINT16, T, u, 0);
    rc |= write_tokens(f, "/f32", H5T_IEEE_F32LE, H5T_NATIVE_INT32, NTOK, s, 0);
    rc |= write_tokens(f, "/top", H5T_STD_I32LE, H5T_NATIVE_INT32, NTOK, top, 0);
    H5Fclose(f);
    return rc;
}

/* ---- one accelerator with a one-parameter model ---- */

typedef struct run {
    acx_accelerator_t *acc;
    acx_model_t *m;
    acx_unit_t *u;
    acx_param_t *w;
    acx_dataloader_t *dl;
} run_t;

static acx_status_t setup(run_t *r, int64_t max_steps, int accum, const char *dataset,
                          int64_t batch, int shuffle) {
    acx_config_t cfg = ACX_CONFIG_DEFAULT;
    cfg.seed = 7;
    cfg.project_dir = dir;
    cfg.checkpoint_existing = ACX_CHECKPOINT_EXISTING_ARCHIVE;
    cfg.gradient_accumulation_steps = accum;
    cfg.max_steps = max_steps;
    memset(r, 0, sizeof *r);
    acx_status_t st;
    if ((st = acx_init(NULL, NULL, &cfg, &r->acc)) != ACX_OK) return st;
    if ((st = acx_model_create(r->acc, &r->m)) != ACX_OK) return st;
    if ((st = acx_model_add_unit(r->m, "u", &r->u)) != ACX_OK) return st;
    if ((st = acx_unit_add_param(r->u, "w", 1, (int64_t[]){4}, ACX_INIT_SPEC_CONSTANT(0.5),
                                 &r->w)) != ACX_OK)
        return st;
    acx_dataloader_options_t lo = ACX_DATALOADER_OPTIONS_DEFAULT;
    lo.batch_size = batch;
    lo.shuffle = shuffle;
    lo.prefetch = 2;
    if ((st = acx_token_loader_open(r->acc, data_path, dataset, T, &lo, &r->dl)) != ACX_OK)
        return st;
    return acx_prepare(r->acc, r->m, NULL, r->dl);
}

/* One micro-step with a dummy gradient. */
static acx_status_t micro_step(run_t *r) {
    acx_status_t st;
    if ((st = acx_accumulate_begin(r->acc)) != ACX_OK) return st;
    float *g = acx_param_grad(r->w);
    for (int i = 0; i < 4; i++)
        g[i] += 1.0f;
    if ((st = acx_unit_grads_ready(r->u)) != ACX_OK) return st;
    if ((st = acx_backward_end(r->acc)) != ACX_OK) return st;
    return acx_accumulate_end(r->acc);
}

/* ---- helpers ---- */

/* Check batch b's tensors against the file's values. */
static int batch_values_ok(const acx_batch_t *b, int64_t (*tok)(int64_t)) {
    if (b->num_tensors != 2 || b->dtypes[0] != ACX_DTYPE_INT32 || b->dtypes[1] != ACX_DTYPE_INT32 ||
        b->sample_numel[0] != T || b->sample_numel[1] != T)
        return 0;
    const int32_t *in = b->tensors[0], *tg = b->tensors[1];
    for (int64_t i = 0; i < b->size; i++) {
        int64_t w = b->indices[i];
        if (w < 0 || w >= NWIN) return 0;
        for (int k = 0; k < T; k++)
            if (in[i * T + k] != tok(w * T + k) || tg[i * T + k] != tok(w * T + k + 1)) return 0;
    }
    return 1;
}

/* Every rank's batch indices of the rest of the epoch, gathered (padding
 * marked -1); *nb_p = batches read. Batch b of rank r: out[(b*world + r)*B + j]. */
static int gather_epoch(acx_dataloader_t *dl, int64_t B, int64_t (*tok)(int64_t), int64_t *out,
                        int64_t *nb_p) {
    /* from the loader's position to the end of the epoch */
    int64_t nb = acx_dataloader_num_batches(dl) - acx_dataloader_position(dl);
    int64_t mine[NWIN];
    for (int64_t bi = 0; bi < nb; bi++) {
        const acx_batch_t *b;
        if (acx_dataloader_next(dl, &b) != ACX_OK || b == NULL) return 1;
        if (!batch_values_ok(b, tok)) return 1;
        for (int64_t j = 0; j < B; j++)
            mine[j] = j < b->size - b->num_padding ? b->indices[j] : -1;
        MPI_Allgather(mine, (int)B, MPI_INT64_T, out + bi * world * B, (int)B, MPI_INT64_T,
                      MPI_COMM_WORLD);
    }
    const acx_batch_t *b;
    if (acx_dataloader_next(dl, &b) != ACX_OK || b != NULL) return 1; /* end of the epoch */
    *nb_p = nb;
    return 0;
}

/* Every window 0..NWIN-1 exactly once among out[0..n) (-1 ignored). */
static int once_each(const int64_t *out, int64_t n) {
    int seen[NWIN] = {0};
    for (int64_t i = 0; i < n; i++) {
        if (out[i] < 0) continue;
        if (out[i] >= NWIN || seen[out[i]]++) return 0;
    }
    for (int w = 0; w < NWIN; w++)
        if (!seen[w]) return 0;
    return 1;
}

/* ---- cases ---- */

static int case_epochs(const char *dataset, int64_t (*tok)(int64_t)) {
    run_t r = {0};
    static int64_t e0[4 * NWIN], e1[4 * NWIN];
    int64_t nb0, nb1;
    char what[80];
    snprintf(what, sizeof what, "token windows %s: once per epoch, values", dataset);
    TESTING(what);
    CHECK_OK(setup(&r, 0, 1, dataset, 3, 1));
    int64_t dims[2];
    CHECK(acx_dataloader_num_samples(r.dl) == NWIN);
    CHECK(acx_dataloader_dataset_shape(r.dl, 1, 2, dims) == 2 && dims[0] == NWIN && dims[1] == T);
    CHECK(acx_dataloader_dataset_dtype(r.dl, 0) == ACX_DTYPE_INT32);
    CHECK(gather_epoch(r.dl, 3, tok, e0, &nb0) == 0);
    CHECK(once_each(e0, nb0 * world * 3));
    CHECK(gather_epoch(r.dl, 3, tok, e1, &nb1) == 0);
    CHECK(nb1 == nb0 && once_each(e1, nb1 * world * 3));
    CHECK(memcmp(e0, e1, (size_t)(nb0 * world * 3) * sizeof *e0) != 0); /* reshuffled */
    CHECK_OK(acx_finalize(r.acc));
    PASSED();
    return 0;
error:
    FAILED();
    if (r.acc) acx_finalize(r.acc);
    return 1;
}

static int case_sequential(void) {
    run_t r = {0};
    static int64_t e[4 * NWIN];
    int64_t nb;
    TESTING("token windows in sequential order, sharded");
    CHECK_OK(setup(&r, 0, 1, "/u16", 4, 0));
    CHECK(gather_epoch(r.dl, 4, tok_u16, e, &nb) == 0);
    /* global stream position q reads window q; padding (-1) only past NWIN */
    for (int64_t q = 0; q < nb * world * 4; q++)
        CHECK(e[q] == (q < NWIN ? q : -1));
    CHECK_OK(acx_finalize(r.acc));
    PASSED();
    return 0;
error:
    FAILED();
    if (r.acc) acx_finalize(r.acc);
    return 1;
}

/* Did the open fail on every rank with ACX_ERR_FORMAT, one message (the
 * same text everywhere, compared with rank 0's), holding every needle? */
static int failed_alike(acx_status_t st, const char *const *needles, int n) {
    char msg[1024] = "", root[1024];
    if (st != ACX_OK) snprintf(msg, sizeof msg, "%s", acx_last_error());
    memcpy(root, msg, sizeof root);
    MPI_Bcast(root, (int)sizeof root, MPI_CHAR, 0, MPI_COMM_WORLD);
    int bad = st != ACX_ERR_FORMAT || strcmp(msg, root) != 0;
    for (int k = 0; k < n; k++)
        bad |= strstr(msg, needles[k]) == NULL;
    if (bad) fprintf(stderr, "\n[r%d] status %d, message: %s\n", rank, (int)st, msg);
    MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
    return !bad;
}

static int case_hostile(void) {
    run_t r = {0};
    TESTING("hostile token ids and datasets");
    /* negative ids at 517 (window 51) and 950: the open fails on every rank,
     * naming the lowest, 517, which on 2 and 3 ranks lies in rank 1's slice
     * of the scan (rank 0 finds nothing) */
    acx_status_t st = setup(&r, 0, 1, "/neg", 2, 0);
    CHECK(failed_alike(
        st, (const char *const[]){data_path, "'/neg'", "token 517 has value -5", ">= 0"}, 4));
    CHECK_OK(acx_finalize(r.acc));
    r.acc = NULL;
    /* ids >= vocab_size at 33 and 800 */
    st = setup(&r, 0, 1, "/big", 2, 0);
    CHECK(failed_alike(st,
                       (const char *const[]){data_path, "'/big'", "token 33 has value 60000",
                                             "[0, 50000) (its vocab_size attribute)"},
                       4));
    CHECK_OK(acx_finalize(r.acc));
    r.acc = NULL;
    /* seq_len >= the token count (no window); not a token type; seq_len 0 */
    acx_config_t cfg = ACX_CONFIG_DEFAULT;
    cfg.project_dir = dir;
    CHECK_OK(acx_init(NULL, NULL, &cfg, &r.acc));
    acx_dataloader_options_t lo = ACX_DATALOADER_OPTIONS_DEFAULT;
    acx_dataloader_t *dl;
    /* seq_len + 1 would overflow: refused by the same check, not wrapped */
    CHECK_STATUS(acx_token_loader_open(r.acc, data_path, "/u16", INT64_MAX, &lo, &dl),
                 ACX_ERR_FORMAT, "has 1001 tokens: seq_len 9223372036854775807 leaves no window");
    CHECK_STATUS(acx_token_loader_open(r.acc, data_path, "/tiny", T, &lo, &dl), ACX_ERR_FORMAT,
                 "has 10 tokens: seq_len 10 leaves no window");
    CHECK_STATUS(acx_token_loader_open(r.acc, data_path, "/f32", T, &lo, &dl), ACX_ERR_FORMAT,
                 "expected a 1-D uint16 or int32");
    CHECK_STATUS(acx_token_loader_open(r.acc, data_path, "/u16", 0, &lo, &dl), ACX_ERR_INVALID_ARG,
                 "seq_len 0");
    CHECK_STATUS(acx_token_loader_open(r.acc, data_path, "/nope", T, &lo, &dl), ACX_ERR_IO,
                 "'/nope' not found");
    CHECK_OK(acx_finalize(r.acc));
    PASSED();
    return 0;
error:
    FAILED();
    if (r.acc) acx_finalize(r.acc);
    return 1;
}

/* acx_dataloader_vocab_size on every rank: the attribute, else the largest
 * id + 1 of the whole dataset, -1 for a sample loader. */
static int case_vocab(void) {
    run_t r = {0};
    TESTING("acx_dataloader_vocab_size: attribute, largest id + 1, sample loader");
    CHECK_OK(setup(&r, 0, 1, "/u16", 2, 0));
    CHECK(acx_dataloader_vocab_size(r.dl) == VOCAB);
    acx_dataloader_options_t lo = ACX_DATALOADER_OPTIONS_DEFAULT;
    acx_dataloader_t *dl;
    /* no attribute: /top's ids are i % 256 but its last token is TOPID,
     * which only the last rank's slice of the scan reads */
    CHECK_OK(acx_token_loader_open(r.acc, data_path, "/top", T, &lo, &dl));
    CHECK(acx_dataloader_vocab_size(dl) == TOPID + 1);
    /* no attribute, the ids of tok_i32: the largest + 1, computed here */
    int64_t max = -1;
    for (int64_t i = 0; i < NTOK; i++)
        if (tok_i32(i) > max) max = tok_i32(i);
    CHECK_OK(acx_token_loader_open(r.acc, data_path, "/i32", T, &lo, &dl));
    CHECK(acx_dataloader_vocab_size(dl) == max + 1);
    CHECK_OK(acx_token_loader_open(r.acc, data_path, "/steps", T, &lo, &dl));
    CHECK(acx_dataloader_vocab_size(dl) == 256);
    /* a sample loader over the same 1-D dataset: no vocabulary */
    CHECK_OK(acx_dataloader_open(r.acc, data_path, 1, (const char *const[]){"/u16"}, &lo, &dl));
    CHECK(acx_dataloader_vocab_size(dl) == -1);
    CHECK(acx_dataloader_vocab_size(NULL) == -1);
    CHECK_OK(acx_finalize(r.acc));
    PASSED();
    return 0;
error:
    FAILED();
    if (r.acc) acx_finalize(r.acc);
    return 1;
}

/* Step mode: 5 batches of 1 per rank per epoch, accumulation 2. */
static int case_steps(void) {
    run_t r = {0};
    int64_t straight[12], resumed[12];
    char path[400];
    snprintf(path, sizeof path, "%s/steps%d.h5", dir, world);
    TESTING("step mode: 12 micro-steps = 6 optimizer steps, resume");
    CHECK_OK(setup(&r, 6, 2, "/steps", 1, 1));
    CHECK(acx_dataloader_num_batches(r.dl) == 5);
    int n = 0;
    while (acx_step(r.acc) < 6) {
        const acx_batch_t *b;
        CHECK_OK(acx_dataloader_next(r.dl, &b));
        CHECK(b != NULL && b->size == 1 && n < 12);
        straight[n++] = b->epoch * 1000 + b->indices[0];
        CHECK_OK(micro_step(&r));
    }
    CHECK(n == 12 && acx_step(r.acc) == 6);
    CHECK(acx_dataloader_epoch(r.dl) == 2 && acx_dataloader_position(r.dl) == 2);
    CHECK_OK(acx_finalize(r.acc));
    r.acc = NULL;

    /* epoch mode, the same 12 micro-steps: each epoch's end is a boundary */
    CHECK_OK(setup(&r, 0, 2, "/steps", 1, 1));
    for (int i = 0; i < 12;) {
        const acx_batch_t *b;
        CHECK_OK(acx_dataloader_next(r.dl, &b));
        if (b == NULL) continue;
        CHECK_OK(micro_step(&r));
        i++;
    }
    CHECK(acx_step(r.acc) == 7);
    CHECK_OK(acx_finalize(r.acc));
    r.acc = NULL;

    /* save at step 3 (epoch 1, position 1), resume in a new accelerator */
    CHECK_OK(setup(&r, 6, 2, "/steps", 1, 1));
    n = 0;
    while (acx_step(r.acc) < 3) {
        const acx_batch_t *b;
        CHECK_OK(acx_dataloader_next(r.dl, &b));
        resumed[n++] = b->epoch * 1000 + b->indices[0];
        CHECK_OK(micro_step(&r));
    }
    CHECK_OK(acx_save_state(r.acc, path));
    CHECK_OK(acx_finalize(r.acc));
    r.acc = NULL;
    CHECK_OK(setup(&r, 6, 2, "/steps", 1, 1));
    CHECK_OK(acx_load_state(r.acc, path, 1));
    CHECK(acx_step(r.acc) == 3 && acx_dataloader_epoch(r.dl) == 1 &&
          acx_dataloader_position(r.dl) == 1);
    while (acx_step(r.acc) < 6) {
        const acx_batch_t *b;
        CHECK_OK(acx_dataloader_next(r.dl, &b));
        CHECK(b != NULL && n < 12);
        resumed[n++] = b->epoch * 1000 + b->indices[0];
        CHECK_OK(micro_step(&r));
    }
    CHECK(n == 12 && memcmp(straight, resumed, sizeof straight) == 0);
    CHECK_OK(acx_finalize(r.acc));
    PASSED();
    return 0;
error:
    FAILED();
    if (r.acc) acx_finalize(r.acc);
    return 1;
}

/* Save after 3 batches of 2 per rank at 2 ranks (12 windows of epoch 0). */
static int mode_save(void) {
    run_t r = {0};
    char path[400], seen[400];
    snprintf(path, sizeof path, "%s/mid.h5", dir);
    snprintf(seen, sizeof seen, "%s/seen.txt", dir);
    TESTING("token loader: save mid-epoch");
    CHECK_OK(setup(&r, 0, 1, "/u16", 2, 1));
    int64_t all[3 * 2 * 8];
    for (int bi = 0; bi < 3; bi++) {
        const acx_batch_t *b;
        CHECK_OK(acx_dataloader_next(r.dl, &b));
        CHECK(b != NULL && b->size == 2 && batch_values_ok(b, tok_u16));
        MPI_Allgather(b->indices, 2, MPI_INT64_T, all + bi * 2 * world, 2, MPI_INT64_T,
                      MPI_COMM_WORLD);
    }
    CHECK_OK(acx_save_state(r.acc, path));
    if (rank == 0) {
        FILE *f = fopen(seen, "w");
        CHECK(f != NULL);
        for (int i = 0; i < 3 * 2 * world; i++)
            fprintf(f, "%lld\n", (long long)all[i]);
        fclose(f);
    }
    CHECK_OK(acx_finalize(r.acc));
    PASSED();
    return 0;
error:
    FAILED();
    if (r.acc) acx_finalize(r.acc);
    return 1;
}

/* Read the window indices saved in `file` into out; returns the count. */
static int64_t read_seen(const char *file, int64_t *out) {
    int64_t got = 0;
    long long v;
    FILE *f = fopen(file, "r");
    if (f == NULL) return -1;
    while (fscanf(f, "%lld", &v) == 1)
        out[got++] = v;
    fclose(f);
    return got;
}

/* Gather `count` batches (non-padding windows) of every rank into out. */
static int gather_batches(acx_dataloader_t *dl, int64_t B, int count, int64_t *out, int64_t *n_p) {
    int64_t mine[16], all[16 * 3];
    int64_t n = 0;
    for (int bi = 0; bi < count; bi++) {
        const acx_batch_t *b;
        if (acx_dataloader_next(dl, &b) != ACX_OK || b == NULL || !batch_values_ok(b, tok_u16))
            return 1;
        for (int64_t j = 0; j < B; j++)
            mine[j] = j < b->size - b->num_padding ? b->indices[j] : -1;
        MPI_Allgather(mine, (int)B, MPI_INT64_T, all, (int)B, MPI_INT64_T, MPI_COMM_WORLD);
        for (int64_t q = 0; q < B * world; q++)
            if (all[q] >= 0) out[n++] = all[q];
    }
    *n_p = n;
    return 0;
}

/* Resume it at this world size (3): the rest of epoch 0 is the unseen
 * windows, under a global batch that divides the 12 consumed (2 x 3) and
 * one that does not (5 x 3: the epoch's rest starts inside a global batch).
 * The latter saves again after 2 more batches (42 windows) for resume2. */
static int mode_resume(void) {
    run_t r = {0};
    char path[400], seen[400], path2[400], seen2[400];
    static int64_t rest[4 * NWIN + 64];
    snprintf(path, sizeof path, "%s/mid.h5", dir);
    snprintf(seen, sizeof seen, "%s/seen.txt", dir);
    snprintf(path2, sizeof path2, "%s/mid2.h5", dir);
    snprintf(seen2, sizeof seen2, "%s/seen2.txt", dir);
    TESTING("token loader: resume on another world size");
    int64_t got = read_seen(seen, rest);
    CHECK(got == 12);
    CHECK_OK(setup(&r, 0, 1, "/u16", 2, 1));
    CHECK_OK(acx_load_state(r.acc, path, 1));
    CHECK(acx_dataloader_epoch(r.dl) == 0 && acx_dataloader_position(r.dl) == 12 / (2 * world));
    int64_t nb = acx_dataloader_num_batches(r.dl) - acx_dataloader_position(r.dl), tail;
    CHECK(gather_epoch(r.dl, 2, tok_u16, rest + got, &tail) == 0 && tail == nb);
    /* gather_epoch walked only the remaining batches: the union is once each */
    CHECK(once_each(rest, got + nb * world * 2));
    CHECK_OK(acx_finalize(r.acc));
    r.acc = NULL;

    /* 12 is not a whole number of global batches of 15 */
    CHECK_OK(setup(&r, 0, 1, "/u16", 5, 1));
    CHECK_OK(acx_load_state(r.acc, path, 1));
    CHECK(acx_dataloader_epoch(r.dl) == 0 && acx_dataloader_position(r.dl) == 0);
    CHECK(acx_dataloader_num_batches(r.dl) == (NWIN - 12 + 14) / 15); /* ceil(88 / 15) = 6 */
    int64_t n;
    CHECK(gather_batches(r.dl, 5, 2, rest + got, &n) == 0 && n == 30);
    got += n;
    CHECK_OK(acx_save_state(r.acc, path2));
    if (rank == 0) {
        FILE *f = fopen(seen2, "w");
        CHECK(f != NULL);
        for (int64_t i = 0; i < got; i++)
            fprintf(f, "%lld\n", (long long)rest[i]);
        fclose(f);
    }
    CHECK(gather_batches(r.dl, 5, 4, rest + got, &n) == 0 && n == NWIN - 42);
    CHECK(once_each(rest, got + n));
    const acx_batch_t *b;
    CHECK_OK(acx_dataloader_next(r.dl, &b));
    CHECK(b == NULL && acx_dataloader_epoch(r.dl) == 1);
    CHECK(acx_dataloader_num_batches(r.dl) == (NWIN + 14) / 15); /* the next epoch is whole */
    CHECK_OK(acx_finalize(r.acc));
    PASSED();
    return 0;
error:
    FAILED();
    if (r.acc) acx_finalize(r.acc);
    return 1;
}

/* On 2 ranks again: 42 windows consumed, global batch 4 -> the epoch's
 * rest starts inside a global batch once more, and is exactly the unseen. */
static int mode_resume2(void) {
    run_t r = {0};
    char path2[400], seen2[400];
    static int64_t rest[4 * NWIN + 64];
    snprintf(path2, sizeof path2, "%s/mid2.h5", dir);
    snprintf(seen2, sizeof seen2, "%s/seen2.txt", dir);
    TESTING("token loader: resume inside a global batch, again");
    int64_t got = read_seen(seen2, rest), n;
    CHECK(got == 42);
    CHECK_OK(setup(&r, 0, 1, "/u16", 2, 1));
    CHECK_OK(acx_load_state(r.acc, path2, 1));
    CHECK(acx_dataloader_epoch(r.dl) == 0 && acx_dataloader_position(r.dl) == 0);
    int64_t nb = acx_dataloader_num_batches(r.dl);
    CHECK(nb == (NWIN - 42 + 3) / 4);
    CHECK(gather_batches(r.dl, 2, (int)nb, rest + got, &n) == 0 && n == NWIN - 42);
    CHECK(once_each(rest, got + n));
    CHECK_OK(acx_finalize(r.acc));
    PASSED();
    return 0;
error:
    FAILED();
    if (r.acc) acx_finalize(r.acc);
    return 1;
}

int main(int argc, char **argv) {
    acx_test_watchdog(120);
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    acx_test_rank_ = rank;
    if (argc < 3 || world > 3) {
        fprintf(stderr, "usage: test_tokens units|save|resume|resume2 DIR (1..3 ranks)\n");
        MPI_Finalize();
        return 99;
    }
    const char *mode = argv[1];
    snprintf(dir, sizeof dir, "%s", argv[2]);
    snprintf(data_path, sizeof data_path, "%s/tokens%d.h5", dir, world);
    int failed = 0;
    if (rank == 0) {
        mkdir(dir, 0755);
        failed = make_file();
    }
    MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
    if (failed) {
        fprintf(stderr, "cannot write the token file %s\n", data_path);
        MPI_Finalize();
        return 99;
    }
    int (*cases[8])(void);
    int nc = 0;
    if (strcmp(mode, "units") == 0) {
        cases[nc++] = case_sequential;
        cases[nc++] = case_hostile;
        cases[nc++] = case_vocab;
        cases[nc++] = case_steps;
    } else if (strcmp(mode, "save") == 0) {
        cases[nc++] = mode_save;
    } else if (strcmp(mode, "resume") == 0) {
        cases[nc++] = mode_resume;
    } else if (strcmp(mode, "resume2") == 0) {
        cases[nc++] = mode_resume2;
    }
    if (strcmp(mode, "units") == 0) {
        int f = case_epochs("/u16", tok_u16);
        MPI_Allreduce(MPI_IN_PLACE, &f, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
        failed |= f;
        f = case_epochs("/i32", tok_i32);
        MPI_Allreduce(MPI_IN_PLACE, &f, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
        failed |= f;
    }
    for (int c = 0; c < nc; c++) {
        int f = cases[c]();
        MPI_Allreduce(MPI_IN_PLACE, &f, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
        failed |= f;
    }
    MPI_Finalize();
    return failed ? 1 : 0;
}

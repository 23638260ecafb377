/*
 * tests/mpi/test_ckpt_io.c — io/ckpt_write.c, io/ckpt_read.c (the parallel HDF5 checkpoint
 * file) under MPI. Modes, chosen by argv:
 *
 *   save DIR TAG        write DIR/TAG.h5 on this world size: tensors of
 *                       several shapes and dtypes (rows fewer than ranks,
 *                       1-D, 3-D, empty, one spanning several chunks, a
 *                       [world x 4] int64 per-rank table, float64, int32,
 *                       uint8, float16) whose element g of tensor t holds a
 *                       formula of (t, g); each rank writes its dim-0 slice
 *                       under the ceil(R/N) rule (one from a buffer holding
 *                       all rows), plus attributes and a 200 KB string.
 *   load DIR TAG...     open each DIR/TAG.h5 on this world size and read
 *                       every tensor as slices (ceil(R/M) rule), in full on
 *                       every rank, and into a buffer holding all rows;
 *                       compare every element with the formula; check the
 *                       attributes, the listing, shapes and mismatch errors.
 *   faults DIR          (np 1..3) corrupted copies of a fresh checkpoint: a
 *                       flipped byte in a dataset (in a CRC block only the
 *                       last rank reads; in one straddling two ranks' rows
 *                       when the blocks are small) — every rank fails naming
 *                       the dataset and the block's byte range, rows away
 *                       from the block still load; checksum attributes
 *                       deleted or disagreeing; a flipped byte in an object
 *                       header, a truncated file, a deleted dataset,
 *                       format_version 99, no format attribute, a text file,
 *                       a missing file; saves into a missing directory, under
 *                       a file, with a bad tensor on one rank and with a
 *                       duplicate path — each the documented status and
 *                       message, no temporary file left and the previous
 *                       checkpoint untouched. Then a format-version-1 file
 *                       (chunked, Fletcher-32; written here with serial
 *                       HDF5) loads, and a flipped byte in it is a checksum
 *                       mismatch.
 *   (none)              save, load and faults in a temporary directory.
 *
 * ACX_TEST_CKPT_CRC_BLOCK=N (io/ckpt_crc.h) makes the writer's CRC blocks N
 * bytes, so that blocks straddle ranks' rows at save and load
 * (tests/ckpt_reshard.test runs save, load and faults with 36).
 *
 * Ranks agree on pass/fail (MPI_LOR) so every rank exits with the same code.
 */
#include <hdf5.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "collectives/coll.h"
#include "io/checkpoint.h"
#include "io/h5.h"
#include "tests/acx_test.h"

static acx_comm_t *world;
static int rank, nranks;

/* ---- the tensors and their values ---- */

typedef struct {
    const char *path;
    acx_dtype_t dtype;
    int ndim;
    int64_t shape[3];
} spec_t;

/* shape[0] of "/rng/state" is the world size at save (-1 here). */
static const spec_t specs[] = {
    {"/model/tiny", ACX_DTYPE_FLOAT32, 2, {3, 5, 0}},
    {"/model/vec", ACX_DTYPE_FLOAT32, 1, {37, 0, 0}},
    {"/model/block.w", ACX_DTYPE_FLOAT32, 3, {9, 4, 3}},
    {"/model/empty", ACX_DTYPE_FLOAT32, 2, {0, 4, 0}},
    /* 2.4 MB: several 1 MiB chunks */
    {"/model/big", ACX_DTYPE_FLOAT32, 2, {600, 1000, 0}},
    {"/optimizer/exp_avg/vec", ACX_DTYPE_FLOAT32, 1, {37, 0, 0}},
    {"/rng/state", ACX_DTYPE_INT64, 2, {-1, 4, 0}},
    {"/user/f64", ACX_DTYPE_FLOAT64, 2, {11, 2, 0}},
    {"/user/i32", ACX_DTYPE_INT32, 1, {13, 0, 0}},
    {"/user/u8", ACX_DTYPE_UINT8, 2, {6, 5, 0}},
    {"/user/half", ACX_DTYPE_FLOAT16, 2, {5, 3, 0}},
    /* rows of 1.2 MB, more than a chunk: chunked along dim 1 too */
    {"/model/wide", ACX_DTYPE_FLOAT32, 2, {2, 300000, 0}},
};
#define NSPEC      ((int)(sizeof specs / sizeof specs[0]))
#define REPLICATED 5 /* saved from a buffer that holds every row */
#define RNG        6
#define LONG_LEN   200000

/* Element g of tensor t: exact in its dtype. */
static void value(int t, acx_dtype_t dtype, int64_t g, void *dst) {
    switch (dtype) {
    case ACX_DTYPE_FLOAT32: *(float *)dst = (float)(t * 100000 + g) + 0.5f; break;
    case ACX_DTYPE_FLOAT64: *(double *)dst = (double)t * 1e6 + (double)g + 0.25; break;
    case ACX_DTYPE_INT32: *(int32_t *)dst = (int32_t)(t * 1000 + 7 * g - 50); break;
    case ACX_DTYPE_INT64: /* a uint64 random-stream pattern, high bit set in some */
        *(int64_t *)dst = (int64_t)(0x9E3779B97F4A7C15ull * (uint64_t)(g + 1) ^ (uint64_t)t);
        break;
    case ACX_DTYPE_UINT8: *(uint8_t *)dst = (uint8_t)(t * 31 + g * 3); break;
    case ACX_DTYPE_FLOAT16: *(uint16_t *)dst = (uint16_t)(0x3C00 + g * 5); break; /* finite */
    default: break;
    }
}

static int64_t rownumel(const spec_t *s) {
    int64_t n = 1;
    for (int k = 1; k < s->ndim; k++)
        n *= s->shape[k];
    return n;
}

/* Rows [*b, *e) of R a rank owns among n: the ceil(R/n) rule. */
static void slice(int64_t R, int r, int n, int64_t *b, int64_t *e) {
    int64_t c = (R + n - 1) / n;
    *b = r * c < R ? r * c : R;
    *e = (r + 1) * c < R ? (r + 1) * c : R;
}

/* A buffer holding rows [row0, row0 + rows) of tensor t, filled. */
static void *make_rows(int t, const spec_t *s, int64_t row0, int64_t rows) {
    size_t es = acx_dtype_size(s->dtype);
    int64_t rn = rownumel(s);
    char *buf = malloc((size_t)(rows * rn) * es + 1);
    for (int64_t i = 0; i < rows * rn; i++)
        value(t, s->dtype, row0 * rn + i, buf + (size_t)i * es);
    return buf;
}

static spec_t spec_at(int t, int64_t world_at_save) {
    spec_t s = specs[t];
    if (t == RNG) s.shape[0] = world_at_save;
    return s;
}

static acx_ckpt_tensor_t tensor_of(const spec_t *s, void *buf, int64_t row0, int64_t rows,
                                   int64_t b, int64_t e) {
    acx_ckpt_tensor_t t = {.path = s->path,
                           .dtype = s->dtype,
                           .ndim = s->ndim,
                           .buf = buf,
                           .buf_row0 = row0,
                           .buf_rows = rows,
                           .io_begin = b,
                           .io_end = e};
    for (int k = 0; k < s->ndim; k++)
        t.shape[k] = s->shape[k];
    return t;
}

static char *long_string(void) {
    char *s = malloc(LONG_LEN + 1);
    for (int i = 0; i < LONG_LEN; i++)
        s[i] = i % 61 == 60 ? '\n' : (char)('a' + i % 26);
    s[LONG_LEN] = '\0';
    return s;
}

static int agree_fail(int failed) {
    int any = 0;
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
    return any;
}

/* ---- save ---- */

/* Write every tensor (each rank its slice) and the attributes to `path`. */
static acx_status_t save_all(const char *path) {
    acx_ckpt_tensor_t t[NSPEC];
    void *bufs[NSPEC];
    for (int i = 0; i < NSPEC; i++) {
        spec_t s = spec_at(i, nranks);
        int64_t b, e;
        slice(s.shape[0], rank, nranks, &b, &e);
        if (i == RNG) b = rank, e = rank + 1; /* one row per rank */
        if (i == REPLICATED) {
            bufs[i] = make_rows(i, &s, 0, s.shape[0]);
            t[i] = tensor_of(&specs[i], bufs[i], 0, s.shape[0], b, e);
        } else {
            bufs[i] = make_rows(i, &s, b, e - b);
            t[i] = tensor_of(&s, bufs[i], b, e - b, b, e);
        }
    }
    char *text = long_string();
    acx_ckpt_attr_t a[] = {
        {.object = "/", .name = "format", .type = ACX_CKPT_STR, .str = ACX_CKPT_FORMAT},
        {.object = "/",
         .name = "format_version",
         .type = ACX_CKPT_I64,
         .i64 = ACX_CKPT_FORMAT_VERSION},
        {.object = "/", .name = "world_size", .type = ACX_CKPT_I64, .i64 = nranks},
        {.object = "/", .name = "note", .type = ACX_CKPT_STR, .str = "saved by test_ckpt_io"},
        {.object = "/optimizer", .name = "lr", .type = ACX_CKPT_F64, .f64 = 1.25e-3},
        {.object = "/scheduler", .name = "step", .type = ACX_CKPT_I64, .i64 = -42},
        {.object = "/model/vec", .name = "dtype_note", .type = ACX_CKPT_STR, .str = "on a dataset"},
        {.object = "/", .name = "config", .type = ACX_CKPT_STR, .str = text},
    };
    acx_status_t st = acx_ckpt_save(world, path, t, NSPEC, a, (int)(sizeof a / sizeof a[0]));
    for (int i = 0; i < NSPEC; i++)
        free(bufs[i]);
    free(text);
    return st;
}

static int test_save(const char *path) {
    struct stat stt;
    char tmp[1100];
    TESTING("save: every rank writes its slice");
    CHECK_OK(save_all(path));
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    CHECK(stat(path, &stt) == 0);
    CHECK(stat(tmp, &stt) != 0); /* renamed away */
    if (agree_fail(0)) goto error;
    PASSED();
    return 0;
error:
    agree_fail(1);
    FAILED();
    return 1;
}

/* ---- load ---- */

static int compare(int t, const spec_t *s, const char *buf, int64_t row0, int64_t rows) {
    size_t es = acx_dtype_size(s->dtype);
    int64_t rn = rownumel(s);
    char want[8];
    for (int64_t i = 0; i < rows * rn; i++) {
        value(t, s->dtype, row0 * rn + i, want);
        if (memcmp(want, buf + (size_t)i * es, es) != 0) {
            fprintf(stderr, "\n[r%d] %s: element %lld differs from the formula\n", rank, s->path,
                    (long long)(row0 * rn + i));
            return 1;
        }
    }
    return 0;
}

static int test_load(const char *path) {
    acx_ckpt_file_t *f = NULL;
    int64_t saved_world = 0;
    acx_ckpt_tensor_t t[NSPEC];
    void *bufs[NSPEC] = {0};
    char label[1200];

    snprintf(label, sizeof label, "load %s on %d rank(s)", strrchr(path, '/') + 1, nranks);
    TESTING(label);
    CHECK_OK(acx_ckpt_open(world, path, &f));
    CHECK_OK(acx_ckpt_get_i64(f, "/", "world_size", &saved_world));
    CHECK(saved_world >= 1 && saved_world <= 64);

    /* 1. slices under the ceil(R/M) rule, each into a buffer of its rows */
    for (int i = 0; i < NSPEC; i++) {
        spec_t s = spec_at(i, saved_world);
        int64_t b, e;
        slice(s.shape[0], rank, nranks, &b, &e);
        bufs[i] = calloc((size_t)((e - b) * rownumel(&s)) * acx_dtype_size(s.dtype) + 1, 1);
        t[i] = tensor_of(&s, bufs[i], b, e - b, b, e);
    }
    CHECK_OK(acx_ckpt_read(f, t, NSPEC));
    for (int i = 0; i < NSPEC; i++) {
        spec_t s = spec_at(i, saved_world);
        CHECK(compare(i, &s, bufs[i], t[i].io_begin, t[i].io_end - t[i].io_begin) == 0);
        free(bufs[i]);
        bufs[i] = NULL;
    }

    /* 2. every row on every rank */
    for (int i = 0; i < NSPEC; i++) {
        spec_t s = spec_at(i, saved_world);
        bufs[i] = calloc((size_t)(s.shape[0] * rownumel(&s)) * acx_dtype_size(s.dtype) + 1, 1);
        t[i] = tensor_of(&s, bufs[i], 0, s.shape[0], 0, s.shape[0]);
    }
    CHECK_OK(acx_ckpt_read(f, t, NSPEC));
    for (int i = 0; i < NSPEC; i++) {
        spec_t s = spec_at(i, saved_world);
        CHECK(compare(i, &s, bufs[i], 0, s.shape[0]) == 0);
        free(bufs[i]);
        bufs[i] = NULL;
    }

    /* 2b. every row on every rank, read once in all: each rank reads its
     * slice, the world all-gathers the slices (share, as NO_SHARD loads) */
    for (int i = 0; i < NSPEC; i++) {
        spec_t s = spec_at(i, saved_world);
        int64_t b, e;
        slice(s.shape[0], rank, nranks, &b, &e);
        bufs[i] = calloc((size_t)(s.shape[0] * rownumel(&s)) * acx_dtype_size(s.dtype) + 1, 1);
        t[i] = tensor_of(&s, bufs[i], 0, s.shape[0], b, e);
        t[i].share = world;
    }
    CHECK_OK(acx_ckpt_read(f, t, NSPEC));
    for (int i = 0; i < NSPEC; i++) {
        spec_t s = spec_at(i, saved_world);
        CHECK(compare(i, &s, bufs[i], 0, s.shape[0]) == 0);
        free(bufs[i]);
        bufs[i] = NULL;
    }
    /* ... and among a part of the world: ranks split in two groups (even
     * and odd), each group sharing the rows [5, 600) of /model/big */
    {
        spec_t s = specs[4];
        int64_t rn = rownumel(&s), b, e;
        acx_comm_t *half = NULL;
        CHECK_OK(acx_comm_split(world, rank % 2, rank, &half));
        slice(595, half->rank, half->size, &b, &e);
        float *buf = malloc((size_t)(595 * rn) * sizeof *buf);
        bufs[0] = buf;
        acx_ckpt_tensor_t one = tensor_of(&s, buf, 5, 595, 5 + b, 5 + e);
        one.share = half;
        acx_status_t st = acx_ckpt_read(f, &one, 1);
        acx_comm_destroy(half);
        CHECK_OK(st);
        CHECK(compare(4, &s, (char *)buf, 5, 595) == 0);
        free(bufs[0]);
        bufs[0] = NULL;
    }

    /* 3. a buffer of all rows, reading only this rank's slice: the other
     * rows keep their sentinel */
    {
        spec_t s = specs[4];
        int64_t R = s.shape[0], rn = rownumel(&s), b, e;
        slice(R, rank, nranks, &b, &e);
        float *buf = malloc((size_t)(R * rn) * sizeof *buf);
        for (int64_t i = 0; i < R * rn; i++)
            buf[i] = -7.0f;
        bufs[0] = buf;
        acx_ckpt_tensor_t one = tensor_of(&s, buf, 0, R, b, e);
        CHECK_OK(acx_ckpt_read(f, &one, 1));
        CHECK(compare(4, &s, (char *)(buf + b * rn), b, e - b) == 0);
        for (int64_t i = 0; i < R * rn; i++)
            if (i < b * rn || i >= e * rn) CHECK(buf[i] == -7.0f);
        free(bufs[0]);
        bufs[0] = NULL;
    }

    /* attributes, strings, listing, shapes */
    {
        double lr = 0;
        int64_t step = 0;
        char note[64], *cfg = malloc(LONG_LEN + 16), *want = long_string();
        CHECK_OK(acx_ckpt_get_f64(f, "/optimizer", "lr", &lr));
        CHECK(lr == 1.25e-3);
        CHECK_OK(acx_ckpt_get_i64(f, "/scheduler", "step", &step));
        CHECK(step == -42);
        CHECK_OK(acx_ckpt_get_str(f, "/", "note", note, sizeof note));
        CHECK(strcmp(note, "saved by test_ckpt_io") == 0);
        CHECK_OK(acx_ckpt_get_str(f, "/model/vec", "dtype_note", note, sizeof note));
        CHECK(strcmp(note, "on a dataset") == 0);
        CHECK_OK(acx_ckpt_get_str(f, "/", "config", cfg, LONG_LEN + 16));
        CHECK(strcmp(cfg, want) == 0);
        CHECK_STATUS(acx_ckpt_get_str(f, "/", "config", cfg, 1000), ACX_ERR_INVALID_ARG,
                     "200001 bytes");
        free(cfg);
        free(want);
        CHECK_STATUS(acx_ckpt_get_str(f, "/", "note", note, 5), ACX_ERR_INVALID_ARG, "note");
        CHECK_STATUS(acx_ckpt_get_i64(f, "/", "note", &step), ACX_ERR_FORMAT, "not an integer");
        CHECK_STATUS(acx_ckpt_get_f64(f, "/", "world_size", &lr), ACX_ERR_FORMAT,
                     "not a floating-point");
        CHECK_STATUS(acx_ckpt_get_i64(f, "/", "epoch", &step), ACX_ERR_FORMAT,
                     "no attribute 'epoch' on '/'");
        CHECK_STATUS(acx_ckpt_get_i64(f, "/dataloader", "epoch", &step), ACX_ERR_FORMAT,
                     "no object '/dataloader'");
        CHECK(step == -42); /* untouched on failure */

        int n = 0;
        char **names = NULL;
        CHECK_OK(acx_ckpt_list(f, "/model", &n, &names));
        CHECK(n == 6);
        static const char *order[] = {"tiny", "vec", "block.w", "empty", "big", "wide"};
        for (int i = 0; i < 6; i++)
            CHECK(strcmp(names[i], order[i]) == 0);
        free(names);
        CHECK_OK(acx_ckpt_list(f, "/optimizer", &n, &names)); /* groups only: no datasets */
        CHECK(n == 0);
        free(names);
        CHECK_STATUS(acx_ckpt_list(f, "/nope", &n, &names), ACX_ERR_FORMAT, "no group '/nope'");

        CHECK(acx_ckpt_exists(f, "/model/block.w") == 1);
        CHECK(acx_ckpt_exists(f, "/optimizer/exp_avg") == 1);
        CHECK(acx_ckpt_exists(f, "/optimizer/exp_avg/nope") == 0);
        CHECK(acx_ckpt_exists(f, "/nope/deeper/still") == 0);
        int ndim = 0;
        int64_t shape[ACX_MAX_DIMS];
        acx_dtype_t dtype = ACX_DTYPE_INT8;
        CHECK_OK(acx_ckpt_shape(f, "/model/block.w", &ndim, shape, &dtype));
        CHECK(ndim == 3 && shape[0] == 9 && shape[1] == 4 && shape[2] == 3);
        CHECK(dtype == ACX_DTYPE_FLOAT32);
        CHECK_OK(acx_ckpt_shape(f, "/rng/state", &ndim, shape, &dtype));
        CHECK(ndim == 2 && shape[0] == saved_world && shape[1] == 4 && dtype == ACX_DTYPE_INT64);
        CHECK_OK(acx_ckpt_shape(f, "/user/half", &ndim, shape, &dtype));
        CHECK(dtype == ACX_DTYPE_FLOAT16);
        CHECK_STATUS(acx_ckpt_shape(f, "/model/nope", &ndim, shape, &dtype), ACX_ERR_FORMAT,
                     "no dataset '/model/nope'");
    }

    /* mismatches: shape, dtype, a missing dataset — named, on every rank */
    {
        float buf[3 * 6];
        acx_ckpt_tensor_t bad = {.path = "/model/tiny",
                                 .dtype = ACX_DTYPE_FLOAT32,
                                 .ndim = 2,
                                 .shape = {3, 6},
                                 .buf = buf,
                                 .buf_row0 = 0,
                                 .buf_rows = 3,
                                 .io_begin = 0,
                                 .io_end = rank == 0 ? 3 : 0};
        CHECK_STATUS(acx_ckpt_read(f, &bad, 1), ACX_ERR_FORMAT, "'/model/tiny' in '");
        CHECK(strstr(acx_last_error(), "has shape [3, 5] (float32), expected [3, 6] (float32)"));
        bad.shape[1] = 5;
        bad.dtype = ACX_DTYPE_INT32;
        CHECK_STATUS(acx_ckpt_read(f, &bad, 1), ACX_ERR_FORMAT,
                     "has shape [3, 5] (float32), expected [3, 5] (int32)");
        bad.dtype = ACX_DTYPE_FLOAT32;
        bad.path = "/model/gone";
        CHECK_STATUS(acx_ckpt_read(f, &bad, 1), ACX_ERR_FORMAT, "no dataset '/model/gone'");
        /* io rows outside the buffer on the last rank only: all ranks fail */
        bad.path = "/model/tiny";
        bad.buf_rows = rank == nranks - 1 ? 1 : 3;
        bad.io_end = 3;
        CHECK_STATUS(acx_ckpt_read(f, &bad, 1), ACX_ERR_INVALID_ARG, "not inside the buffer");
        /* a share group whose members' rows are not in rank order: every
         * rank refuses, nothing is exchanged */
        if (nranks > 1) {
            int64_t b, e;
            slice(3, nranks - 1 - rank, nranks, &b, &e);
            bad.buf_rows = 3;
            bad.shape[1] = 5;
            bad.io_begin = b;
            bad.io_end = e;
            bad.share = world;
            CHECK_STATUS(acx_ckpt_read(f, &bad, 1), ACX_ERR_INVALID_ARG,
                         "must follow each other in rank order");
        }
    }
    acx_ckpt_close(f);
    f = NULL;

    /* one process alone (world NULL: no MPI, sec2 driver), as tools do */
    if (rank == nranks - 1) {
        spec_t s = specs[2];
        float buf[9 * 4 * 3];
        acx_ckpt_tensor_t one = tensor_of(&s, buf, 0, 9, 0, 9);
        CHECK_OK(acx_ckpt_open(NULL, path, &f));
        CHECK_OK(acx_ckpt_read(f, &one, 1));
        CHECK(compare(2, &s, (char *)buf, 0, 9) == 0);
        acx_ckpt_close(f);
        f = NULL;
    }
    if (agree_fail(0)) goto error;
    PASSED();
    return 0;
error:
    for (int i = 0; i < NSPEC; i++)
        free(bufs[i]);
    if (f != NULL) acx_ckpt_close(f);
    agree_fail(1);
    FAILED();
    return 1;
}

/* ---- faults ---- */

static int copy_file(const char *from, const char *to) {
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    char buf[65536];
    size_t n;
    int rc = in == NULL || out == NULL;
    while (!rc && (n = fread(buf, 1, sizeof buf, in)) > 0)
        rc = fwrite(buf, 1, n, out) != n;
    if (in) fclose(in);
    if (out) rc |= fclose(out) != 0;
    return rc;
}

static int flip_byte(const char *path, haddr_t at) {
    FILE *fp = fopen(path, "r+b");
    int rc = fp == NULL || fseek(fp, (long)at, SEEK_SET) != 0;
    int c = rc ? EOF : fgetc(fp);
    rc |= c == EOF || fseek(fp, (long)at, SEEK_SET) != 0 || fputc(c ^ 0x5A, fp) == EOF;
    if (fp) rc |= fclose(fp) != 0;
    return rc;
}

/* File offset of byte `byte` of contiguous dataset `dset`'s data (rank 0,
 * serial HDF5); HADDR_UNDEF if it is not contiguous or too small. */
static haddr_t data_addr(const char *path, const char *dset, hsize_t byte) {
    haddr_t addr = HADDR_UNDEF;
    hid_t fid = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = fid >= 0 ? H5Dopen2(fid, dset, H5P_DEFAULT) : -1;
    if (d >= 0 && byte < H5Dget_storage_size(d)) {
        haddr_t base = H5Dget_offset(d);
        if (base != HADDR_UNDEF) addr = base + byte;
    }
    if (d >= 0) H5Dclose(d);
    if (fid >= 0) H5Fclose(fid);
    return addr;
}

/* File offset and size of the chunk of 2-D `dset` holding row `row` (a
 * version-1 file; rank 0, serial HDF5). */
static haddr_t chunk_addr(const char *path, const char *dset, hsize_t row, hsize_t *size_p) {
    haddr_t addr = HADDR_UNDEF;
    unsigned mask = 0;
    hsize_t cdims[2] = {0, 0};
    hid_t fid = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = fid >= 0 ? H5Dopen2(fid, dset, H5P_DEFAULT) : -1;
    hid_t dcpl = d >= 0 ? H5Dget_create_plist(d) : -1;
    if (dcpl >= 0 && H5Pget_chunk(dcpl, 2, cdims) == 2 && cdims[0] > 0) {
        hsize_t origin[2] = {row / cdims[0] * cdims[0], 0};
        if (H5Dget_chunk_info_by_coord(d, origin, &mask, &addr, size_p) < 0) addr = HADDR_UNDEF;
    }
    if (dcpl >= 0) H5Pclose(dcpl);
    if (d >= 0) H5Dclose(d);
    if (fid >= 0) H5Fclose(fid);
    return addr;
}

static haddr_t header_addr(const char *path, const char *obj) {
    H5O_info_t info;
    haddr_t addr = HADDR_UNDEF;
    hid_t fid = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (fid >= 0 && H5Oget_info_by_name2(fid, obj, &info, H5O_INFO_BASIC, H5P_DEFAULT) >= 0)
        addr = info.addr;
    if (fid >= 0) H5Fclose(fid);
    return addr;
}

/* Read rows [b, e) of tensor `i` from `path` on this rank and compare them
 * with the formula (a difference is ACX_ERR_INTERNAL: the test fails). */
static acx_status_t read_rows(const char *path, int i, int64_t b, int64_t e) {
    acx_ckpt_file_t *f;
    spec_t s = specs[i];
    acx_status_t st = acx_ckpt_open(world, path, &f);
    if (st != ACX_OK) return st;
    void *buf = malloc((size_t)((e - b) * rownumel(&s)) * acx_dtype_size(s.dtype) + 1);
    acx_ckpt_tensor_t t = tensor_of(&s, buf, b, e - b, b, e);
    st = acx_ckpt_read(f, &t, 1);
    if (st == ACX_OK && compare(i, &s, buf, b, e - b) != 0) st = ACX_ERR_INTERNAL;
    free(buf);
    acx_ckpt_close(f);
    return st;
}

/* Every row of tensor i on every rank, each reading its slice and the
 * world all-gathering them (share); compared with the formula. */
static acx_status_t read_shared(const char *path, int i) {
    acx_ckpt_file_t *f;
    spec_t s = specs[i];
    int64_t R = s.shape[0], b, e;
    acx_status_t st = acx_ckpt_open(world, path, &f);
    if (st != ACX_OK) return st;
    slice(R, rank, nranks, &b, &e);
    void *buf = malloc((size_t)(R * rownumel(&s)) * acx_dtype_size(s.dtype) + 1);
    acx_ckpt_tensor_t t = tensor_of(&s, buf, 0, R, b, e);
    t.share = world;
    st = acx_ckpt_read(f, &t, 1);
    if (st == ACX_OK && compare(i, &s, buf, 0, R) != 0) st = ACX_ERR_INTERNAL;
    free(buf);
    acx_ckpt_close(f);
    return st;
}

/* Read every rank's slice of /model/big from `path`. */
static acx_status_t read_big(const char *path) {
    int64_t b, e;
    slice(specs[4].shape[0], rank, nranks, &b, &e);
    return read_rows(path, 4, b, e);
}

/* The CRC block size of dataset `dset` in `path` (the writer's choice; rank
 * 0 reads it with serial HDF5, every rank gets it), or -1. */
static int64_t crc_block_of(const char *path, const char *dset) {
    int64_t block = -1;
    if (rank == 0) {
        hid_t fid = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
        hid_t d = fid >= 0 ? H5Dopen2(fid, dset, H5P_DEFAULT) : -1;
        hid_t a = d >= 0 ? H5Aopen(d, "acx_crc32_block_bytes", H5P_DEFAULT) : -1;
        if (a < 0 || H5Aread(a, H5T_NATIVE_INT64, &block) < 0) block = -1;
        if (a >= 0) H5Aclose(a);
        if (d >= 0) H5Dclose(d);
        if (fid >= 0) H5Fclose(fid);
    }
    MPI_Bcast(&block, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
    return block;
}

/* The byte range "in bytes [lo, hi)" the last error names holds `byte`,
 * and is one block (at most `block` bytes). */
static int names_range(uint64_t byte, int64_t block) {
    const char *at = strstr(acx_last_error(), "in bytes [");
    unsigned long long lo = 0, hi = 0;
    if (at == NULL || sscanf(at, "in bytes [%llu, %llu)", &lo, &hi) != 2) return 0;
    return lo <= byte && byte < hi && hi - lo <= (unsigned long long)block &&
           lo % (unsigned long long)block == 0;
}

/* Flip byte `byte` of dataset `dset`'s data in a copy of `from` named `to`
 * (rank 0); every rank returns whether it worked. */
static int copy_flip(const char *from, const char *to, const char *dset, hsize_t byte) {
    int rc = 0;
    if (rank == 0) {
        haddr_t at = data_addr(from, dset, byte);
        rc = at == HADDR_UNDEF || copy_file(from, to) || flip_byte(to, at);
    }
    return !agree_fail(rc);
}

/* A chunked, Fletcher-32 dataset of tensor i's values (rows of `chunk_rows`)
 * as format version 1 stored every non-empty dataset. */
static int write_v1_dataset(hid_t fid, int i, hsize_t chunk_rows) {
    const spec_t *s = &specs[i];
    hsize_t dims[3], chunk[3];
    for (int k = 0; k < s->ndim; k++)
        dims[k] = chunk[k] = (hsize_t)s->shape[k];
    chunk[0] = chunk_rows;
    void *buf = make_rows(i, s, 0, s->shape[0]);
    hid_t space = H5Screate_simple(s->ndim, dims, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    int rc = space < 0 || dcpl < 0 || H5Pset_chunk(dcpl, s->ndim, chunk) < 0 ||
             H5Pset_fletcher32(dcpl) < 0;
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    rc |= lcpl < 0 || H5Pset_create_intermediate_group(lcpl, 1) < 0;
    hid_t d = rc ? -1 : H5Dcreate2(fid, s->path, H5T_IEEE_F32LE, space, lcpl, dcpl, H5P_DEFAULT);
    rc |= d < 0 || H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0;
    if (d >= 0) H5Dclose(d);
    if (lcpl >= 0) H5Pclose(lcpl);
    if (dcpl >= 0) H5Pclose(dcpl);
    if (space >= 0) H5Sclose(space);
    free(buf);
    return rc;
}

/* A version-1 checkpoint as acx wrote it before the CRC-32 attributes
 * (rank 0, serial HDF5): /model/big and /model/vec chunked with Fletcher-32,
 * the long string as a chunked, Fletcher-32 string dataset /config. */
static int write_v1(const char *path) {
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    int rc = fapl < 0 || H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_V110) < 0;
    hid_t fid = rc ? -1 : H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    hid_t root = fid >= 0 ? H5Gopen2(fid, "/", H5P_DEFAULT) : -1;
    rc |= root < 0 || acx_h5_write_attr_str(root, "format", ACX_CKPT_FORMAT) < 0 ||
          acx_h5_write_attr_i64(root, "format_version", 1) < 0 ||
          acx_h5_write_attr_i64(root, "world_size", 1) < 0;
    rc |= rc || write_v1_dataset(fid, 4, 100) || write_v1_dataset(fid, 1, 37);
    char *text = long_string();
    hsize_t one = 1;
    hid_t type = H5Tcopy(H5T_C_S1), space = H5Screate_simple(1, &one, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    rc |= type < 0 || H5Tset_size(type, LONG_LEN + 1) < 0 || space < 0 || dcpl < 0 ||
          H5Pset_chunk(dcpl, 1, &one) < 0 || H5Pset_fletcher32(dcpl) < 0;
    hid_t d = rc ? -1 : H5Dcreate2(fid, "/config", type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    rc |= d < 0 || H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, text) < 0;
    if (d >= 0) H5Dclose(d);
    H5Pclose(dcpl);
    H5Sclose(space);
    H5Tclose(type);
    free(text);
    if (root >= 0) H5Gclose(root);
    if (fid >= 0) rc |= H5Fclose(fid) < 0;
    if (fapl >= 0) H5Pclose(fapl);
    return rc;
}

/* The reader keeps loading version 1 (the compatibility rule): data and the
 * long string read back; a flipped byte in a chunk is HDF5's Fletcher-32
 * failure, named by the reader as a checksum mismatch. */
static int test_v1(const char *dir) {
    char p[1100], q[1100];
    int rc = 0;
    acx_ckpt_file_t *f = NULL;
    char *cfg = malloc(LONG_LEN + 16), *want = long_string();
    TESTING("format version 1 files (Fletcher-32 chunks) still load");
    snprintf(p, sizeof p, "%s/v1.h5", dir);
    if (rank == 0) rc = write_v1(p);
    CHECK(!agree_fail(rc));
    CHECK_OK(read_big(p));
    CHECK_OK(read_rows(p, 1, 0, 37));
    CHECK_OK(acx_ckpt_open(world, p, &f));
    CHECK_OK(acx_ckpt_get_str(f, "/", "config", cfg, LONG_LEN + 16));
    CHECK(strcmp(cfg, want) == 0);
    acx_ckpt_close(f);
    f = NULL;
    snprintf(q, sizeof q, "%s/v1_flip.h5", dir);
    if (rank == 0) {
        hsize_t size = 0;
        haddr_t at = chunk_addr(p, "/model/big", 599, &size);
        rc = at == HADDR_UNDEF || size == 0 || copy_file(p, q) || flip_byte(q, at + size / 2);
    }
    CHECK(!agree_fail(rc));
    CHECK_STATUS(read_big(q), ACX_ERR_FORMAT, "dataset '/model/big' in '");
    CHECK(strstr(acx_last_error(), "checksum mismatch (corrupted file?)") != NULL);
    free(cfg);
    free(want);
    if (agree_fail(0)) goto error;
    PASSED();
    return 0;
error:
    free(cfg);
    free(want);
    if (f != NULL) acx_ckpt_close(f);
    agree_fail(1);
    FAILED();
    return 1;
}

static int file_exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

static int test_faults(const char *dir) {
    char base[1100], p[1100], tmp[1200];
    int rc = 0;
    acx_ckpt_file_t *f = NULL;
    TESTING("faults: corrupted files and failed saves");
    snprintf(base, sizeof base, "%s/base.h5", dir);
    CHECK_OK(save_all(base));

    /* a flipped byte in /model/big's last row (600 rows of 4000 bytes):
     * with 2+ ranks only the last rank reads its block, and the others must
     * not wait for it — every rank fails naming the dataset and the block's
     * byte range. Rows whose blocks do not reach it still load. */
    {
        const uint64_t byte = 599 * 4000 + 1234;
        int64_t block = crc_block_of(base, "/model/big");
        CHECK(block >= 1);
        snprintf(p, sizeof p, "%s/flip_data.h5", dir);
        CHECK(copy_flip(base, p, "/model/big", byte));
        CHECK_STATUS(read_big(p), ACX_ERR_FORMAT, "dataset '/model/big' in '");
        CHECK(strstr(acx_last_error(), "checksum mismatch (corrupted file?)") != NULL);
        CHECK(names_range(byte, block));
        int64_t clean_rows = (int64_t)(byte / (uint64_t)block * (uint64_t)block / 4000);
        CHECK(clean_rows >= 1);
        int64_t b, e;
        slice(clean_rows, rank, nranks, &b, &e);
        CHECK_OK(read_rows(p, 4, b, e));
        /* the whole tensor on rank 0 only: the others read nothing */
        CHECK_STATUS(read_rows(p, 4, 0, rank == 0 ? 600 : 0), ACX_ERR_FORMAT, "'/model/big'");
        CHECK(names_range(byte, block));
        /* every row on every rank, read once in all (share): the last
         * rank's failure is every rank's, before anything is exchanged */
        CHECK_STATUS(read_shared(p, 4), ACX_ERR_FORMAT, "dataset '/model/big' in '");
        CHECK(strstr(acx_last_error(), "checksum mismatch (corrupted file?)") != NULL);
        CHECK(names_range(byte, block));
    }

    /* a flipped byte in /model/vec (37 floats) in the middle of a block;
     * with a block smaller than a rank's rows (ACX_TEST_CKPT_CRC_BLOCK) the
     * block may straddle two ranks' rows: both check it */
    {
        int64_t block = crc_block_of(base, "/model/vec");
        uint64_t byte = (uint64_t)(37 * 4 / 2);
        CHECK(block >= 1);
        snprintf(p, sizeof p, "%s/flip_vec.h5", dir);
        CHECK(copy_flip(base, p, "/model/vec", byte));
        int64_t b, e;
        slice(37, rank, nranks, &b, &e);
        CHECK_STATUS(read_rows(p, 1, b, e), ACX_ERR_FORMAT, "'/model/vec'");
        CHECK(names_range(byte, block));
        /* the same bytes, unflipped, in the optimizer's copy still load */
        CHECK_OK(read_rows(p, 5, b, e));
    }

    /* checksum attributes removed, or not matching each other */
    snprintf(p, sizeof p, "%s/nocrc.h5", dir);
    if (rank == 0) {
        rc = copy_file(base, p);
        hid_t fid = rc ? -1 : H5Fopen(p, H5F_ACC_RDWR, H5P_DEFAULT);
        hid_t d = fid >= 0 ? H5Dopen2(fid, "/model/vec", H5P_DEFAULT) : -1;
        rc = d < 0 || H5Adelete(d, "acx_crc32") < 0 || H5Adelete(d, "acx_crc32_blocks") < 0 ||
             H5Adelete(d, "acx_crc32_block_bytes") < 0;
        if (d >= 0) H5Dclose(d);
        if (fid >= 0) rc |= H5Fclose(fid) < 0;
    }
    CHECK(!agree_fail(rc));
    CHECK_STATUS(read_rows(p, 1, 0, 37), ACX_ERR_FORMAT, "'/model/vec' in '");
    CHECK(strstr(acx_last_error(), "has no checksum (no CRC-32 attributes 'acx_crc32_blocks'") !=
          NULL);
    snprintf(p, sizeof p, "%s/badcrc.h5", dir);
    if (rank == 0) {
        uint32_t v = 0;
        rc = copy_file(base, p);
        hid_t fid = rc ? -1 : H5Fopen(p, H5F_ACC_RDWR, H5P_DEFAULT);
        hid_t d = fid >= 0 ? H5Dopen2(fid, "/model/vec", H5P_DEFAULT) : -1;
        hid_t a = d >= 0 ? H5Aopen(d, "acx_crc32", H5P_DEFAULT) : -1;
        rc = a < 0 || H5Aread(a, H5T_NATIVE_UINT32, &v) < 0;
        v ^= 1u;
        rc |= a < 0 || H5Awrite(a, H5T_NATIVE_UINT32, &v) < 0;
        if (a >= 0) H5Aclose(a);
        if (d >= 0) H5Dclose(d);
        if (fid >= 0) rc |= H5Fclose(fid) < 0;
    }
    CHECK(!agree_fail(rc));
    CHECK_STATUS(read_rows(p, 1, 0, rank == 0 ? 37 : 0), ACX_ERR_FORMAT, "'/model/vec' in '");
    CHECK(strstr(acx_last_error(), "checksum attributes disagree") != NULL);

    /* a flipped byte in the object header of /model/vec (checksummed
     * 1.8+ metadata) */
    snprintf(p, sizeof p, "%s/flip_meta.h5", dir);
    if (rank == 0) {
        haddr_t at = header_addr(base, "/model/vec");
        rc = at == HADDR_UNDEF || copy_file(base, p) || flip_byte(p, at + 20);
    }
    CHECK(!agree_fail(rc));
    CHECK_OK(acx_ckpt_open(world, p, &f));
    {
        float buf[37];
        acx_ckpt_tensor_t t = tensor_of(&specs[1], buf, 0, 37, 0, 37);
        CHECK_STATUS(acx_ckpt_read(f, &t, 1), ACX_ERR_FORMAT, "'/model/vec'");
        CHECK(strstr(acx_last_error(), "checksum mismatch (corrupted file?)") != NULL);
    }
    acx_ckpt_close(f);
    f = NULL;

    /* truncated to half */
    snprintf(p, sizeof p, "%s/half.h5", dir);
    if (rank == 0) {
        struct stat st;
        rc = stat(base, &st) != 0 || copy_file(base, p) || truncate(p, st.st_size / 2) != 0;
    }
    CHECK(!agree_fail(rc));
    CHECK_STATUS(acx_ckpt_open(world, p, &f), ACX_ERR_IO, "half.h5' is truncated");

    /* a deleted dataset */
    snprintf(p, sizeof p, "%s/deleted.h5", dir);
    if (rank == 0) {
        rc = copy_file(base, p);
        hid_t fid = rc ? -1 : H5Fopen(p, H5F_ACC_RDWR, H5P_DEFAULT);
        rc = fid < 0 || H5Ldelete(fid, "/model/vec", H5P_DEFAULT) < 0;
        if (fid >= 0) rc |= H5Fclose(fid) < 0;
    }
    CHECK(!agree_fail(rc));
    CHECK_OK(read_big(p)); /* the rest still loads */
    CHECK_OK(acx_ckpt_open(world, p, &f));
    {
        float buf[37];
        acx_ckpt_tensor_t t = tensor_of(&specs[1], buf, 0, 37, 0, 37);
        CHECK_STATUS(acx_ckpt_read(f, &t, 1), ACX_ERR_FORMAT, "has no dataset '/model/vec'");
    }
    acx_ckpt_close(f);
    f = NULL;

    /* format_version 99, then no format attribute */
    snprintf(p, sizeof p, "%s/v99.h5", dir);
    if (rank == 0) {
        int64_t v = 99;
        rc = copy_file(base, p);
        hid_t fid = rc ? -1 : H5Fopen(p, H5F_ACC_RDWR, H5P_DEFAULT);
        hid_t a = fid >= 0 ? H5Aopen(fid, "format_version", H5P_DEFAULT) : -1;
        rc = a < 0 || H5Awrite(a, H5T_NATIVE_INT64, &v) < 0;
        if (a >= 0) H5Aclose(a);
        if (fid >= 0) H5Fclose(fid);
    }
    CHECK(!agree_fail(rc));
    CHECK_STATUS(acx_ckpt_open(world, p, &f), ACX_ERR_FORMAT,
                 "v99.h5': format version 99 is newer than this acx supports (2)");
    snprintf(p, sizeof p, "%s/noformat.h5", dir);
    if (rank == 0) {
        rc = copy_file(base, p);
        hid_t fid = rc ? -1 : H5Fopen(p, H5F_ACC_RDWR, H5P_DEFAULT);
        rc = fid < 0 || H5Adelete(fid, "format") < 0;
        if (fid >= 0) H5Fclose(fid);
    }
    CHECK(!agree_fail(rc));
    CHECK_STATUS(acx_ckpt_open(world, p, &f), ACX_ERR_FORMAT,
                 "noformat.h5' is not an acx checkpoint (no 'format' attribute)");

    /* not HDF5; missing */
    snprintf(p, sizeof p, "%s/text.h5", dir);
    if (rank == 0) {
        FILE *fp = fopen(p, "w");
        rc = fp == NULL || fputs("step: 3\nnot hdf5 at all\n", fp) < 0;
        if (fp) rc |= fclose(fp) != 0;
    }
    CHECK(!agree_fail(rc));
    CHECK_STATUS(acx_ckpt_open(world, p, &f), ACX_ERR_FORMAT, "text.h5' is not an HDF5 file");
    snprintf(p, sizeof p, "%s/missing.h5", dir);
    CHECK_STATUS(acx_ckpt_open(world, p, &f), ACX_ERR_IO, "No such file or directory");
    CHECK_STATUS(acx_ckpt_open(world, dir, &f), ACX_ERR_IO, "is a directory");

    /* saves that fail: nothing left behind, the previous checkpoint intact */
    snprintf(p, sizeof p, "%s/no/such/dir/x.h5", dir);
    CHECK_STATUS(save_all(p), ACX_ERR_IO, "No such file or directory");
    snprintf(p, sizeof p, "%s/no", dir);
    CHECK(!file_exists(p));
    CHECK_STATUS(save_all("/etc/passwd/x.h5"), ACX_ERR_IO, "Not a directory");
    {
        struct stat before, after;
        float buf[4] = {1, 2, 3, 4};
        acx_ckpt_tensor_t t = {.path = "/model/x",
                               .dtype = ACX_DTYPE_FLOAT32,
                               .ndim = 1,
                               .shape = {4},
                               .buf = buf,
                               .buf_row0 = 0,
                               .buf_rows = 4,
                               .io_begin = 0,
                               .io_end = rank == nranks - 1 ? 5 : 0};
        acx_ckpt_attr_t a = {
            .object = "/", .name = "format", .type = ACX_CKPT_STR, .str = ACX_CKPT_FORMAT};
        snprintf(tmp, sizeof tmp, "%s.tmp", base);
        CHECK(stat(base, &before) == 0);
        /* io rows beyond the tensor on the last rank only */
        CHECK_STATUS(acx_ckpt_save(world, base, &t, 1, &a, 1), ACX_ERR_INVALID_ARG,
                     "io rows [0, 5) outside [0, 4)");
        CHECK(!file_exists(tmp));
        MPI_Barrier(MPI_COMM_WORLD); /* all have looked before rank 0 saves again */
        /* a duplicate path fails inside HDF5, after the file exists */
        acx_ckpt_tensor_t two[2] = {t, t};
        two[0].io_end = two[1].io_end = rank == 0 ? 4 : 0;
        CHECK_STATUS(acx_ckpt_save(world, base, two, 2, &a, 1), ACX_ERR_HDF5,
                     "dataset '/model/x' in '");
        CHECK(!file_exists(tmp));
        CHECK(stat(base, &after) == 0);
        CHECK(before.st_ino == after.st_ino && before.st_size == after.st_size &&
              before.st_mtime == after.st_mtime);
        CHECK_OK(read_big(base));
    }
    if (agree_fail(0)) goto error;
    PASSED();
    return 0;
error:
    if (f != NULL) acx_ckpt_close(f);
    agree_fail(1);
    FAILED();
    return 1;
}

int main(int argc, char **argv) {
    int failed = 0;
    char auto_dir[] = "/tmp/acx_ckpt_io.XXXXXX", path[1100];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    acx_test_rank_ = rank;
    acx_test_watchdog(240);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    if (acx_comm_create(MPI_COMM_WORLD, &acx_coll_mpi_ops, &world) != ACX_OK) {
        fprintf(stderr, "[r%d] acx_comm_create: %s\n", rank, acx_last_error());
        MPI_Abort(MPI_COMM_WORLD, 99);
    }
    const char *mode = argc > 1 ? argv[1] : "all";
    if (strcmp(mode, "save") == 0 && argc == 4) {
        snprintf(path, sizeof path, "%s/%s.h5", argv[2], argv[3]);
        failed |= test_save(path);
    } else if (strcmp(mode, "load") == 0 && argc >= 4) {
        for (int i = 3; i < argc; i++) {
            snprintf(path, sizeof path, "%s/%s.h5", argv[2], argv[i]);
            failed |= test_load(path);
        }
    } else if (strcmp(mode, "faults") == 0 && argc == 3) {
        failed |= test_faults(argv[2]);
        failed |= test_v1(argv[2]);
    } else if (strcmp(mode, "all") == 0) {
        int bad = rank == 0 && mkdtemp(auto_dir) == NULL;
        MPI_Bcast(auto_dir, (int)sizeof auto_dir, MPI_CHAR, 0, MPI_COMM_WORLD);
        if (agree_fail(bad)) {
            acx_comm_destroy(world);
            MPI_Finalize();
            return 99;
        }
        snprintf(path, sizeof path, "%s/all.h5", auto_dir);
        failed |= test_save(path);
        failed |= test_load(path);
        failed |= test_faults(auto_dir);
        failed |= test_v1(auto_dir);
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 0 && !failed) {
            char cmd[200];
            snprintf(cmd, sizeof cmd, "rm -rf '%s'", auto_dir);
            if (system(cmd) != 0) { /* a leftover temp dir is harmless */
            }
        }
    } else {
        if (rank == 0)
            fprintf(stderr, "usage: %s [save DIR TAG | load DIR TAG... | faults DIR]\n", argv[0]);
        acx_comm_destroy(world);
        MPI_Finalize();
        return 99;
    }
    acx_comm_destroy(world);
    MPI_Finalize();
    return failed ? 1 : 0;
}

/*
 * benchmarks/osu_common.c — the driver shared by the OSU-style collective
 * benchmarks: options, start-up, buffers, validation rounds, the timing loop,
 * statistics across ranks and the output (an OSU Micro-Benchmarks 7.x table
 * on stdout, optionally a JSON file).
 *
 * Timing follows OSU's collective tests: per size, a barrier, W warm-up and
 * I timed calls, each bracketed by MPI_Wtime; a rank's latency is the mean of
 * its I calls; the row gives the mean over ranks of those means (and with -f
 * their minimum and maximum, and I); a barrier ends the size. With
 * --compare-raw the raw MPI call runs in the same loop: every iteration one
 * acx call and one raw call, the order swapped every other iteration so that
 * neither side always follows the other; each side is bracketed and summed on
 * its own. --fused adds a third side (one raw call over all K tensors) and
 * rotates the three the same way. --fused's acx side is a training step's
 * gradient synchronization through the public model API (osu_allreduce.c):
 * a model needs its own accelerator (acx_prepare binds one model), so each
 * size gets a fresh acx_init (NO_SHARD, --bucket-mb, the dtype as
 * reduce_dtype) over the MPI the driver initialized, outside the timing.
 *
 * Only the public API (include/acx, libacx): -d and -b become the
 * accelerator's configuration (device_state host or cuda; backend mpi or
 * nccl) given to acx_init, which binds the rank's device (local rank modulo
 * the visible devices) and creates the NCCL communicator; acx's buffers come
 * from acx_buffer_alloc, the accelerator's memory that its collectives move
 * (device memory with -d cuda), allocated once per table, so this file
 * needs no CUDA header. -d cuda -b mpi hands the device buffers to the MPI
 * backend, which stages them through pinned host memory. A blocking
 * NCCL call returns once the collective has completed on the device, so
 * each timed call is launch plus completion (OSU's per-call timing;
 * nccl-tests instead times a batch and synchronizes once, which gives the
 * same figure for large messages and a lower one for small ones).
 *
 * Validation (-c) runs before the timed loop of each size and outside it:
 * two rounds of fresh inputs, the operation, and a comparison of every output
 * element with the value this rank computes itself from the fill formula
 * (osu_value); ranks add up their mismatches, so every rank prints and exits
 * alike. Inputs are small integers, so sums are exact in every dtype and the
 * comparison is bit for bit. With device buffers the inputs are filled in
 * host copies and copied to the device, and after the call both buffers are
 * copied back and checked there: what is compared is what the device holds.
 *
 * What an operation is (its buffers, calls and expected values) is its own
 * file's (osu_allreduce.c, ...); the bandwidth formulas are osu_bw.c's.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "osu_common.h"

/* OSU's defaults: messages up to 8 KiB get 1000 iterations and 100 warm-up
 * calls, larger ones 100 and 10. */
#define OSU_LARGE_MESSAGE     8192
#define OSU_ITERS_SMALL       1000
#define OSU_WARMUP_SMALL      100
#define OSU_ITERS_LARGE       100
#define OSU_WARMUP_LARGE      10
#define OSU_VALIDATION_ROUNDS 2
#define OSU_MAX_DTYPES        8
#define EXIT_USAGE            2
#define EXIT_UNAVAILABLE      77

/* ---- 16-bit floats (raw side's SUM ops, validation values) ---- */

/* MPI has no 16-bit float type, so the raw baseline reduces float16 and
 * bfloat16 with a user-defined op on MPI_UINT16_T, the way a hand-written
 * MPI program would: widen both operands, add in float32, round to nearest
 * even. These conversions are the benchmark's own, independent of acx's. */

static float bf16_to_f32(uint16_t h) {
    uint32_t b = (uint32_t)h << 16;
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

static uint16_t f32_to_bf16(float f) {
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    if ((b & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((b >> 16) | 0x40u); /* quiet NaN */
    b += 0x7fffu + ((b >> 16) & 1u);                                           /* to nearest even */
    return (uint16_t)(b >> 16);
}

static float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 31) { /* inf, NaN */
        uint32_t b = sign | 0x7f800000u | (man << 13);
        float f;
        memcpy(&f, &b, sizeof f);
        return f;
    }
    float f = exp == 0 ? ldexpf((float)man, -24) : ldexpf((float)(man | 0x400u), (int)exp - 25);
    return sign ? -f : f;
}

static uint16_t f32_to_f16(float f) {
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    uint16_t sign = (uint16_t)((b >> 16) & 0x8000u);
    uint32_t a = b & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);  /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to inf */
    if (a < 0x38800000u) { /* below 2^-14: a subnormal result, in units of 2^-24 */
        float v;
        memcpy(&v, &a, sizeof v);
        return (uint16_t)(sign | (uint16_t)lrintf(v * 16777216.0f)); /* rint: to nearest even */
    }
    uint32_t h = (((a >> 23) - 112u) << 10) | ((a & 0x7fffffu) >> 13), rem = a & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++; /* a carry bumps the exponent: right */
    return (uint16_t)(sign | h);
}

static void bf16_sum_fn(void *in, void *inout, int *len, MPI_Datatype *type) {
    (void)type;
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++)
        b[i] = f32_to_bf16(bf16_to_f32(a[i]) + bf16_to_f32(b[i]));
}

static void f16_sum_fn(void *in, void *inout, int *len, MPI_Datatype *type) {
    (void)type;
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++)
        b[i] = f32_to_f16(f16_to_f32(a[i]) + f16_to_f32(b[i]));
}

/* ---- validation values ---- */

int osu_value(int rank, size_t i, int round, int vmax) {
    size_t v = (size_t)rank * 7919u + i * 31u + (size_t)round * 101u + 1u;
    return (int)(v % ((size_t)vmax + 1u));
}

void osu_put(void *buf, size_t i, acx_dtype_t dtype, long v) {
    switch (dtype) {
    case ACX_DTYPE_FLOAT32: ((float *)buf)[i] = (float)v; break;
    case ACX_DTYPE_FLOAT64: ((double *)buf)[i] = (double)v; break;
    case ACX_DTYPE_FLOAT16: ((uint16_t *)buf)[i] = f32_to_f16((float)v); break;
    case ACX_DTYPE_BFLOAT16: ((uint16_t *)buf)[i] = f32_to_bf16((float)v); break;
    case ACX_DTYPE_INT8: ((int8_t *)buf)[i] = (int8_t)v; break;
    case ACX_DTYPE_UINT8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    case ACX_DTYPE_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case ACX_DTYPE_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
    default: break;
    }
}

int osu_is(const void *buf, size_t i, acx_dtype_t dtype, long v) {
    unsigned char want[8];
    size_t es = acx_dtype_size(dtype);
    osu_put(want, 0, dtype, v);
    return memcmp((const unsigned char *)buf + i * es, want, es) == 0;
}

/* Largest validation value so that the sum over `summed` ranks stays an
 * integer the dtype holds exactly (and, for the 8-bit types, in range). */
static int value_max(acx_dtype_t dtype, int summed) {
    long exact;
    switch (dtype) {
    case ACX_DTYPE_INT8: exact = 127; break;
    case ACX_DTYPE_UINT8: exact = 255; break;
    case ACX_DTYPE_BFLOAT16: exact = 256; break; /* 8 significant bits */
    case ACX_DTYPE_FLOAT16: exact = 2048; break; /* 11 significant bits */
    default: exact = 1L << 20; break;
    }
    long v = exact / (summed > 0 ? summed : 1);
    if (v > 1000) v = 1000;
    return v < 1 ? 1 : (int)v;
}

/* ---- options ---- */

typedef struct options {
    size_t min_size, max_size; /* bytes */
    long iterations, warmup;   /* -1: OSU's defaults for each size */
    int full, validate, busbw, compare_raw;
    int fused_k; /* 0: off */
    double bucket_mb;
    acx_dtype_t dtypes[OSU_MAX_DTYPES]; /* -t a,b,...: one table each */
    int num_dtypes;
    int device_cuda, device_given; /* -d cuda; -d given (else -b nccl implies cuda) */
    acx_backend_kind_t backend;
    const char *json;
} options_t;

static const struct {
    const char *name;
    acx_dtype_t dtype;
} dtype_names[] = {
    {"float", ACX_DTYPE_FLOAT32},     {"float32", ACX_DTYPE_FLOAT32}, {"double", ACX_DTYPE_FLOAT64},
    {"float64", ACX_DTYPE_FLOAT64},   {"float16", ACX_DTYPE_FLOAT16}, {"half", ACX_DTYPE_FLOAT16},
    {"bfloat16", ACX_DTYPE_BFLOAT16}, {"bf16", ACX_DTYPE_BFLOAT16},   {"int8", ACX_DTYPE_INT8},
    {"uint8", ACX_DTYPE_UINT8},       {"char", ACX_DTYPE_UINT8},      {"int32", ACX_DTYPE_INT32},
    {"int", ACX_DTYPE_INT32},         {"int64", ACX_DTYPE_INT64},
};

static void usage(const osu_coll_t *coll, FILE *f) {
    fprintf(
        f,
        "Usage: mpirun -np N %s [options]\n"
        "OSU Micro-Benchmarks 7.x style %s latency test through acx.\n"
        "Options:\n"
        "  -m, --message-size [MIN:]MAX  sizes in bytes, MIN, 2 MIN, 4 MIN, ... <= MAX\n"
        "                                (default 1:1048576; K, M, G suffixes are 2^10..)\n"
        "  -i, --iterations N            timed calls per size (default 1000 up to 8 KiB,\n"
        "                                100 above)\n"
        "  -x, --warmup N                untimed calls first (default 100 / 10)\n"
        "  -f, --full                    also min and max latency over ranks, iterations\n"
        "  -c, --validation              check every result; a Validation column, exit 1\n"
        "                                on a mismatch\n"
        "  -d, --accelerator host|cuda   buffer memory: host, or device memory of the\n"
        "                                rank's CUDA device (default host; cuda with nccl)\n"
        "  -b, --backend mpi|nccl        acx collective backend (default mpi; nccl needs\n"
        "                                -d cuda, mpi stages device buffers through\n"
        "                                pinned host memory)\n"
        "  -t, --type TYPE[,TYPE...]     float (float32), double (float64), float16, bfloat16,\n"
        "                                int8, uint8, int32, int64 (default %s); sizes are\n"
        "                                rounded down to whole elements; a list: one table\n"
        "                                per type\n"
        "      --busbw                   algorithm and bus bandwidth columns (GB/s, nccl-tests)\n"
        "      --compare-raw             also time the raw MPI call, alternating with acx\n"
        "      --json FILE               also write the rows to FILE as JSON\n"
        "%s"
        "  -h, --help                    this text\n"
        "acx's own options (--config FILE, --acx-KEY=VALUE, --debug) are passed to acx_init.\n"
        "Exit status: 0 ok, 1 failure or validation mismatch, 2 bad usage, 77 device or\n"
        "backend not available. See docs/benchmarks.md.\n",
        coll->prog, coll->title, acx_dtype_name(coll->default_dtype),
        coll->fused
            ? "      --fused K                 K tensors of each size as a training step's\n"
              "                                gradients, through acx's fusion buckets, against\n"
              "                                K separate MPI_Allreduce calls (-t float32,\n"
              "                                bfloat16 or float16: the reduce_dtype)\n"
              "      --bucket-mb MB            bucket size for --fused (default 25)\n"
            : "");
}

/* Parse an unsigned byte count with an optional K/M/G (binary) suffix. */
static int parse_bytes(const char *s, size_t *out_p) {
    char *end;
    if (s == NULL || *s < '0' || *s > '9') return -1;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0) return -1;
    unsigned shift = 0;
    if (*end == 'K' || *end == 'k')
        shift = 10, end++;
    else if (*end == 'M' || *end == 'm')
        shift = 20, end++;
    else if (*end == 'G' || *end == 'g')
        shift = 30, end++;
    if (*end != '\0' || v > (1ULL << 40) >> shift) return -1;
    *out_p = (size_t)(v << shift);
    return 0;
}

static int parse_long(const char *s, long lo, long hi, long *out_p) {
    char *end;
    if (s == NULL || *s == '\0') return -1;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < lo || v > hi) return -1;
    *out_p = v;
    return 0;
}

/* -m: "MIN:MAX", "MAX", "MIN:" or ":MAX". */
static int parse_sizes(const char *s, options_t *o) {
    const char *colon = strchr(s, ':');
    size_t lo = 1, hi = 1048576;
    if (colon == NULL) {
        if (parse_bytes(s, &hi) != 0) return -1;
    } else {
        char first[64];
        size_t n = (size_t)(colon - s);
        if (n >= sizeof first) return -1;
        memcpy(first, s, n);
        first[n] = '\0';
        if (n > 0 && parse_bytes(first, &lo) != 0) return -1;
        if (colon[1] != '\0' && parse_bytes(colon + 1, &hi) != 0) return -1;
    }
    if (lo < 1 || hi < lo) return -1;
    o->min_size = lo;
    o->max_size = hi;
    return 0;
}

/* acx_init's options are acx's, not the benchmark's: leave them out of what
 * getopt sees (acx_init strips them from the real argv itself). Same rules
 * as runtime/accelerator.c: --config FILE|=FILE, --debug, --acx-KEY=VALUE,
 * --acx-KEY VALUE (VALUE not starting with "--"). */
static int filter_acx_options(int argc, char **argv, char **out) {
    int n = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (i > 0 && strcmp(a, "--config") == 0) {
            i++;
            continue;
        }
        if (i > 0 && (strncmp(a, "--config=", 9) == 0 || strcmp(a, "--debug") == 0)) continue;
        if (i > 0 && strncmp(a, "--acx-", 6) == 0) {
            if (strchr(a, '=') == NULL && i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) i++;
            continue;
        }
        out[n++] = argv[i];
    }
    out[n] = NULL;
    return n;
}

enum { OPT_BUSBW = 256, OPT_COMPARE_RAW, OPT_JSON, OPT_FUSED, OPT_BUCKET_MB };

/* Fills *o; returns 0, 1 (help printed: exit 0) or -1 (message in err). */
static int parse_options(int argc, char **argv, const osu_coll_t *coll, int rank, options_t *o,
                         char *err, size_t errlen) {
    static const struct option longs[] = {
        {"message-size", required_argument, NULL, 'm'},
        {"iterations", required_argument, NULL, 'i'},
        {"warmup", required_argument, NULL, 'x'},
        {"full", no_argument, NULL, 'f'},
        {"validation", no_argument, NULL, 'c'},
        {"accelerator", required_argument, NULL, 'd'},
        {"backend", required_argument, NULL, 'b'},
        {"type", required_argument, NULL, 't'},
        {"help", no_argument, NULL, 'h'},
        {"busbw", no_argument, NULL, OPT_BUSBW},
        {"compare-raw", no_argument, NULL, OPT_COMPARE_RAW},
        {"json", required_argument, NULL, OPT_JSON},
        {"fused", required_argument, NULL, OPT_FUSED},
        {"bucket-mb", required_argument, NULL, OPT_BUCKET_MB},
        {NULL, 0, NULL, 0},
    };
    *o = (options_t){.min_size = 1,
                     .max_size = 1048576,
                     .iterations = -1,
                     .warmup = -1,
                     .bucket_mb = 25.0,
                     .dtypes = {coll->default_dtype},
                     .num_dtypes = 1,
                     .backend = ACX_BACKEND_MPI};
    char **av = malloc(((size_t)argc + 1) * sizeof *av);
    if (av == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int ac = filter_acx_options(argc, argv, av), ret = 0, c;
    long v;
    opterr = 0;
    optind = 1;
#define BAD(...)                                                                                   \
    do {                                                                                           \
        snprintf(err, errlen, __VA_ARGS__);                                                        \
        ret = -1;                                                                                  \
        goto out;                                                                                  \
    } while (0)
    while ((c = getopt_long(ac, av, ":m:i:x:fcd:b:t:h", longs, NULL)) != -1) {
        switch (c) {
        case 'm':
            if (parse_sizes(optarg, o) != 0)
                BAD("invalid value '%s' for -m: expected [MIN:]MAX in bytes with 1 <= MIN <= MAX "
                    "<= 1T (e.g. 1:1048576, 4096, 8:64K)",
                    optarg);
            break;
        case 'i':
            if (parse_long(optarg, 1, 1000000000L, &v) != 0)
                BAD("invalid value '%s' for -i: expected an integer from 1 to 1000000000", optarg);
            o->iterations = v;
            break;
        case 'x':
            if (parse_long(optarg, 0, 1000000000L, &v) != 0)
                BAD("invalid value '%s' for -x: expected an integer from 0 to 1000000000", optarg);
            o->warmup = v;
            break;
        case 'f': o->full = 1; break;
        case 'c': o->validate = 1; break;
        case 'd':
            o->device_given = 1;
            if (strcmp(optarg, "host") == 0)
                o->device_cuda = 0;
            else if (strcmp(optarg, "cuda") == 0)
                o->device_cuda = 1;
            else
                BAD("invalid value '%s' for -d: expected host or cuda", optarg);
            break;
        case 'b':
            if (strcmp(optarg, "mpi") == 0)
                o->backend = ACX_BACKEND_MPI;
            else if (strcmp(optarg, "nccl") == 0)
                o->backend = ACX_BACKEND_NCCL;
            else
                BAD("invalid value '%s' for -b: expected mpi or nccl", optarg);
            break;
        case 't': {
            const char *p = optarg;
            o->num_dtypes = 0;
            for (;;) {
                size_t len = strcspn(p, ","), k, n = sizeof dtype_names / sizeof dtype_names[0];
                for (k = 0; k < n; k++)
                    if (strlen(dtype_names[k].name) == len &&
                        strncmp(p, dtype_names[k].name, len) == 0)
                        break;
                if (k == n)
                    BAD("invalid value '%s' for -t: expected float, double, float16, bfloat16, "
                        "int8, uint8, int32 or int64 (or a comma-separated list of them)",
                        optarg);
                if (o->num_dtypes == OSU_MAX_DTYPES)
                    BAD("invalid value '%s' for -t: at most %d types", optarg, OSU_MAX_DTYPES);
                o->dtypes[o->num_dtypes++] = dtype_names[k].dtype;
                if (p[len] == '\0') break;
                p += len + 1;
            }
            break;
        }
        case 'h':
            if (rank == 0) usage(coll, stdout);
            ret = 1;
            goto out;
        case OPT_BUSBW: o->busbw = 1; break;
        case OPT_COMPARE_RAW: o->compare_raw = 1; break;
        case OPT_JSON: o->json = optarg; break;
        case OPT_FUSED:
            if (coll->fused == NULL)
                BAD("--fused is only offered by acx-bench-allreduce (gradient buckets are "
                    "all-reduces)");
            if (parse_long(optarg, 1, 100000, &v) != 0)
                BAD("invalid value '%s' for --fused: expected a tensor count from 1 to 100000",
                    optarg);
            o->fused_k = (int)v;
            break;
        case OPT_BUCKET_MB: {
            char *end;
            errno = 0;
            double mb = strtod(optarg, &end);
            if (errno != 0 || *end != '\0' || !(mb > 0.0) || mb > 1048576.0)
                BAD("invalid value '%s' for --bucket-mb: expected a size in MiB, > 0", optarg);
            o->bucket_mb = mb;
            break;
        }
        case ':': {
            const char *name = av[optind - 1];
            BAD("option %s needs a value", name);
        }
        default: {
            const char *name = av[optind - 1];
            if (optopt > 0 && optopt < 256 && optopt != '?') BAD("unknown option -%c", optopt);
            BAD("unknown option %s", name);
        }
        }
    }
    if (optind < ac)
        BAD("unexpected argument '%s' (this benchmark takes options only)", av[optind]);
    if (o->fused_k > 0 && (size_t)o->fused_k * o->max_size > ((size_t)1 << 31))
        BAD("--fused %d x %zu bytes is more than 2 GiB per rank", o->fused_k, o->max_size);
    if (o->backend == ACX_BACKEND_NCCL && !o->device_given) o->device_cuda = 1;
    if (o->backend == ACX_BACKEND_NCCL && !o->device_cuda)
        BAD("-b nccl needs -d cuda: NCCL reduces device memory only");
    if (o->device_cuda && o->compare_raw)
        BAD("--compare-raw times the raw MPI call on host memory; with -d cuda there is no raw "
            "counterpart (this MPI is not CUDA-aware): drop one of them");
    if (o->device_cuda && o->fused_k > 0)
        BAD("--fused times acx's host-memory gradient buckets; it does not take -d cuda");
    for (int d = 0; o->fused_k > 0 && d < o->num_dtypes; d++)
        if (o->dtypes[d] != ACX_DTYPE_FLOAT32 && o->dtypes[d] != ACX_DTYPE_BFLOAT16 &&
            o->dtypes[d] != ACX_DTYPE_FLOAT16)
            BAD("--fused reduces float32 gradients, on the wire as float32, bfloat16 or float16 "
                "(reduce_dtype); -t %s is none of them",
                acx_dtype_name(o->dtypes[d]));
out:
#undef BAD
    free(av);
    return ret;
}

/* ---- buffers ---- */

static size_t extent_elems(osu_extent_t e, size_t count, int n) {
    return e == OSU_NONE ? 0 : e == OSU_ONE ? count : count * (size_t)n;
}

static void *alloc_buf(size_t elems, size_t esize) {
    if (elems == 0) return NULL;
    return calloc(elems, esize);
}

/* A zeroed buffer [elems] of the accelerator's memory (NULL for none): what
 * its collectives move; the status says why not. */
static acx_status_t alloc_acx_buf(acx_accelerator_t *acc, size_t elems, size_t esize, void **p_p) {
    *p_p = NULL;
    if (elems == 0) return ACX_OK;
    /* elems * esize <= ranks x 1 TiB (-m's limit): no overflow */
    return acx_buffer_alloc(acc, elems * esize, p_p);
}

/* ---- running and timing ---- */

typedef struct run {
    const osu_coll_t *coll;
    const options_t *o;
    osu_ctx_t c;
    int device;                  /* -d cuda: the CUDA device of the buffers; -1: host memory */
    void *host_send, *host_recv; /* -d cuda -c: host copies of send and recv */
    void *raw_flat;              /* --fused: [k x max count] for the raw sides */
    void *fused_state;
    /* --fused: each size's accelerator is started by start_acx from a copy
     * of the program's arguments (acx_init takes its own options out) */
    int argc;
    char **argv;
    int acc_used;     /* the accelerator prepared a model already: start another */
    int inject_fault; /* OSU_BENCH_INJECT_FAULT=1: corrupt one output (tests -c itself) */
} run_t;

static void die(const run_t *r, const char *what) {
    fprintf(stderr, "%s: rank %d: %s\n", r->coll->prog, r->c.rank, what);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

/* The sides timed in one loop: acx, the raw MPI call (--compare-raw; with
 * --fused the K separate calls), and with --fused one raw MPI_Allreduce of
 * all K tensors at once: the best any fusion could do through MPI. */
enum { SIDE_ACX = 0, SIDE_RAW = 1, SIDE_ONE = 2, NUM_SIDES = 3 };

static void check_mpi(const run_t *r, int ret) {
    if (ret == MPI_SUCCESS) return;
    char msg[MPI_MAX_ERROR_STRING + 32];
    int len = 0;
    snprintf(msg, sizeof msg, "raw MPI call failed: ");
    MPI_Error_string(ret, msg + strlen(msg), &len);
    die(r, msg);
}

static void call_side(run_t *r, int side) {
    osu_ctx_t *c = &r->c;
    int k = r->o->fused_k;
    if (side == SIDE_ACX) {
        acx_status_t st = k > 0 ? r->coll->fused->step(r->fused_state, 0) : r->coll->run_acx(c);
        if (st != ACX_OK) die(r, acx_last_error());
    } else if (k == 0) {
        check_mpi(r, r->coll->run_raw(c));
    } else if (side == SIDE_RAW) { /* k in-place calls, one per tensor of raw_flat [k x count] */
        size_t bytes = c->count * c->esize;
        for (int u = 0; u < k; u++)
            check_mpi(r, MPI_Allreduce(MPI_IN_PLACE, (char *)r->raw_flat + (size_t)u * bytes,
                                       (int)c->count, c->mpi_type, c->mpi_sum, c->comm));
    } else { /* one in-place call over raw_flat [k x count] */
        check_mpi(r, MPI_Allreduce(MPI_IN_PLACE, r->raw_flat, (int)((size_t)k * c->count),
                                   c->mpi_type, c->mpi_sum, c->comm));
    }
}

/* Per-call samples kept for the medians (the first ones of a longer run). */
#define OSU_MAX_SAMPLES (1L << 20)

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of x [n] (sorts x). */
static double median(double *x, long n) {
    if (n <= 0) return 0.0;
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

/* Time warmup + iters rounds; in each, every side runs once, bracketed by
 * MPI_Wtime, starting with side (round mod sides) so that no side always
 * follows another. Per side and rank: total_s [NUM_SIDES] the timed
 * rounds' seconds, median_s [NUM_SIDES] the median single call (the mean is
 * OSU's figure; the median is the one a busy machine's preemptions barely
 * move). Sides not run stay 0. */
static void time_size(run_t *r, long iters, long warmup, double *total_s, double *median_s) {
    int sides = r->o->fused_k > 0 ? 3 : r->o->compare_raw ? 2 : 1;
    long ns = iters < OSU_MAX_SAMPLES ? iters : OSU_MAX_SAMPLES;
    double *samples[NUM_SIDES] = {NULL};
    for (int s = 0; s < NUM_SIDES; s++) {
        total_s[s] = median_s[s] = 0.0;
        if (s < sides && (samples[s] = malloc((size_t)ns * sizeof(double))) == NULL)
            die(r, "out of memory for the timing samples");
    }
    MPI_Barrier(r->c.comm);
    for (long i = 0; i < warmup + iters; i++) {
        for (int j = 0; j < sides; j++) {
            int s = (int)((i + j) % sides);
            double t0 = MPI_Wtime();
            call_side(r, s);
            double dt = MPI_Wtime() - t0;
            if (i < warmup) continue;
            total_s[s] += dt;
            if (i - warmup < ns) samples[s][i - warmup] = dt;
        }
    }
    for (int s = 0; s < sides; s++) {
        median_s[s] = median(samples[s], ns);
        free(samples[s]);
    }
}

/* -d cuda: bytes between a host buffer and one of the accelerator's; a
 * failure ends the job. */
static void to_host(const run_t *r, void *host, const void *buf, size_t bytes) {
    if (acx_buffer_to_host(r->c.acc, host, buf, bytes) != ACX_OK) die(r, acx_last_error());
}

static void from_host(const run_t *r, void *buf, const void *host, size_t bytes) {
    if (acx_buffer_from_host(r->c.acc, buf, host, bytes) != ACX_OK) die(r, acx_last_error());
}

/* -c for one size: returns the number of wrong elements over all ranks. */
static long validate_size(run_t *r) {
    osu_ctx_t *c = &r->c;
    const osu_coll_t *coll = r->coll;
    int vmax = value_max(c->dtype, coll->reduces ? c->size : 1);
    long bad = 0;
    for (int round = 0; round < OSU_VALIDATION_ROUNDS; round++) {
        if (r->o->fused_k > 0) { /* tensor u's element i is element u * count + i */
            const osu_fused_ops_t *f = r->coll->fused;
            for (int u = 0; u < r->o->fused_k; u++) {
                float *g = f->grad(r->fused_state, u);
                for (size_t i = 0; i < c->count; i++)
                    g[i] = (float)osu_value(c->rank, (size_t)u * c->count + i, round, vmax);
            }
            acx_status_t st = f->step(r->fused_state, 1);
            if (st != ACX_OK) die(r, acx_last_error());
            if (r->inject_fault && c->rank == 0 && c->count > 0)
                ((unsigned char *)f->grad(r->fused_state, 0))[0] ^= 0x40;
            for (int u = 0; u < r->o->fused_k; u++) {
                const float *g = f->grad(r->fused_state, u);
                for (size_t i = 0; i < c->count; i++) {
                    long want = 0;
                    for (int q = 0; q < c->size; q++)
                        want += osu_value(q, (size_t)u * c->count + i, round, vmax);
                    bad += g[i] != (float)want;
                }
            }
            continue;
        }
        size_t in_bytes = extent_elems(coll->send_extent, c->count, c->size) * c->esize;
        size_t out_bytes = extent_elems(coll->recv_extent, c->count, c->size) * c->esize;
        void *dev_send = c->send, *dev_recv = c->recv; /* device memory with -d cuda */
        /* with -d cuda, fill and check see host copies */
        if (r->device >= 0) {
            c->send = r->host_send;
            c->recv = dev_recv != NULL ? r->host_recv : NULL;
        }
        if (c->recv != NULL) memset(c->recv, 0xa5, out_bytes); /* no stale result */
        coll->fill(c, round, vmax);
        if (r->device >= 0) {
            from_host(r, dev_send, c->send, in_bytes);
            from_host(r, dev_recv, c->recv, out_bytes);
            c->send = dev_send;
            c->recv = dev_recv;
        }
        call_side(r, SIDE_ACX);
        if (r->device >= 0) { /* what the device holds now, both buffers (bcast is in place) */
            to_host(r, r->host_send, dev_send, in_bytes);
            to_host(r, r->host_recv, dev_recv, out_bytes);
            c->send = r->host_send;
            c->recv = dev_recv != NULL ? r->host_recv : NULL;
        }
        void *out = c->recv != NULL ? c->recv : c->send;
        if (r->inject_fault && c->rank == 0 && c->count > 0) ((unsigned char *)out)[0] ^= 0x40;
        bad += (long)coll->check(c, round, vmax);
        c->send = dev_send;
        c->recv = dev_recv;
    }
    MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_LONG, MPI_SUM, c->comm);
    return bad;
}

/* ---- statistics and output ---- */

typedef struct stats {
    double avg, min, max; /* microseconds: over ranks, of each rank's mean */
} stats_t;

static stats_t stats_over_ranks(double local_us, MPI_Comm comm, int n) {
    double sum = local_us, mm[2] = {local_us, -local_us};
    MPI_Allreduce(MPI_IN_PLACE, &sum, 1, MPI_DOUBLE, MPI_SUM, comm);
    MPI_Allreduce(MPI_IN_PLACE, mm, 2, MPI_DOUBLE, MPI_MAX, comm);
    return (stats_t){.avg = sum / n, .min = -mm[1], .max = mm[0]};
}

typedef struct row {
    size_t bytes, count;
    long iters, warmup;
    stats_t acx, raw, one;                     /* one: --fused's single raw call */
    double acx_median, raw_median, one_median; /* us: mean over ranks of each rank's median */
    int has_raw, validated, pass, buckets;
    double algbw, busbw;
} row_t;

static void print_header(const run_t *r) {
    const options_t *o = r->o;
    const osu_ctx_t *c = &r->c;
    printf("# OSU-style acx %s Latency Test\n", r->coll->title);
    char buffers[64] = "host";
    if (r->device >= 0) snprintf(buffers, sizeof buffers, "cuda:%d", r->device);
    printf("# Datatype: %s (%zu bytes/element); ranks: %d; backend: %s; buffers: %s%s\n",
           acx_dtype_name(c->dtype), c->esize, c->size, c->nccl ? "nccl" : "mpi", buffers,
           r->device >= 0 && !c->nccl ? " (staged through pinned host memory)" : "");
    if (c->esize > 1)
        printf("# Size: bytes per rank rounded down to whole elements; sizes below one element "
               "skipped\n");
    if (r->coll->op == OSU_ALL_GATHER || r->coll->op == OSU_REDUCE_SCATTER)
        printf("# Size: per rank (%s); the whole array is ranks x Size\n",
               r->coll->op == OSU_ALL_GATHER ? "each rank's contribution"
                                             : "each rank's share of the result");
    if (o->compare_raw && o->fused_k == 0)
        printf("# --compare-raw: the raw MPI call timed in the same loop, alternating with acx; "
               "Overhead = acx - raw, Acx/Raw = acx / raw\n");
    if (o->fused_k > 0)
        printf("# --fused %d: each row reduces %d tensors of Size bytes: Avg = one step through "
               "acx's fusion buckets (%.6g MiB), Separate = %d MPI_Allreduce calls, Speedup = "
               "Separate / Avg, Raw 1 call = one MPI_Allreduce of all %d (fusion's best case)\n",
               o->fused_k, o->fused_k, o->bucket_mb, o->fused_k, o->fused_k);
    if (o->busbw)
        printf("# Algbw, Busbw: GB/s (1e9 B/s) as nccl-tests defines them (docs/benchmarks.md)\n");
    printf("%-10s%18s", "# Size", "Avg Latency(us)");
    if (o->full) printf("%18s%18s%12s", "Min Latency(us)", "Max Latency(us)", "Iterations");
    if (o->validate) printf("%18s", "Validation");
    if (o->compare_raw && o->fused_k == 0)
        printf("%18s%18s%18s", "Raw Avg(us)", "Overhead(us)", "Acx/Raw");
    if (o->fused_k > 0)
        printf("%18s%18s%12s%18s", "Separate(us)", "Speedup", "Buckets", "Raw 1 call(us)");
    if (o->busbw) printf("%18s%18s", "Algbw(GB/s)", "Busbw(GB/s)");
    printf("\n");
    fflush(stdout);
}

static void print_row(const run_t *r, const row_t *w) {
    const options_t *o = r->o;
    printf("%-10zu%18.2f", w->bytes, w->acx.avg);
    if (o->full) printf("%18.2f%18.2f%12ld", w->acx.min, w->acx.max, w->iters);
    if (o->validate) printf("%18s", w->pass ? "Pass" : "Fail");
    if (o->compare_raw && o->fused_k == 0)
        printf("%18.2f%18.2f%18.3f", w->raw.avg, w->acx.avg - w->raw.avg, w->acx.avg / w->raw.avg);
    if (o->fused_k > 0)
        printf("%18.2f%18.3f%12d%18.2f", w->raw.avg, w->raw.avg / w->acx.avg, w->buckets,
               w->one.avg);
    if (o->busbw) printf("%18.2f%18.2f", w->algbw, w->busbw);
    printf("\n");
    fflush(stdout);
}

static const char *op_key(osu_op_t op) {
    switch (op) {
    case OSU_ALL_REDUCE: return "all_reduce";
    case OSU_ALL_GATHER: return "all_gather";
    case OSU_REDUCE_SCATTER: return "reduce_scatter";
    default: return "broadcast";
    }
}

static void json_begin(FILE *f, const run_t *r) {
    fprintf(f,
            "{\n  \"benchmark\": \"%s\",\n  \"op\": \"%s\",\n"
            "  \"ranks\": %d,\n  \"backend\": \"%s\",\n  \"buffers\": \"%s\",\n"
            "  \"results\": [",
            r->coll->prog, op_key(r->coll->op), r->c.size, r->c.nccl ? "nccl" : "mpi",
            r->device >= 0 ? "cuda" : "host");
}

static void json_row(FILE *f, const run_t *r, const row_t *w, int first) {
    const options_t *o = r->o;
    fprintf(f,
            "%s\n    {\"dtype\": \"%s\", \"size\": %zu, \"count\": %zu, \"iterations\": %ld, "
            "\"warmup\": %ld, "
            "\"avg_us\": %.6g, \"min_us\": %.6g, \"max_us\": %.6g, \"median_us\": %.6g, "
            "\"algbw_gbps\": %.6g, \"busbw_gbps\": %.6g",
            first ? "" : ",", acx_dtype_name(r->c.dtype), w->bytes, w->count, w->iters, w->warmup,
            w->acx.avg, w->acx.min, w->acx.max, w->acx_median, w->algbw, w->busbw);
    if (o->validate) fprintf(f, ", \"validation\": \"%s\"", w->pass ? "pass" : "fail");
    if (o->compare_raw && o->fused_k == 0)
        fprintf(f,
                ", \"raw_avg_us\": %.6g, \"raw_min_us\": %.6g, \"raw_max_us\": %.6g, "
                "\"raw_median_us\": %.6g, \"overhead_us\": %.6g, \"acx_over_raw\": %.6g",
                w->raw.avg, w->raw.min, w->raw.max, w->raw_median, w->acx.avg - w->raw.avg,
                w->acx.avg / w->raw.avg);
    if (o->fused_k > 0)
        fprintf(f,
                ", \"fused_tensors\": %d, \"bucket_mb\": %.6g, \"buckets\": %d, "
                "\"separate_avg_us\": %.6g, \"separate_median_us\": %.6g, \"speedup\": %.6g, "
                "\"raw_one_call_avg_us\": %.6g, \"raw_one_call_median_us\": %.6g",
                o->fused_k, o->bucket_mb, w->buckets, w->raw.avg, w->raw_median,
                w->raw.avg / w->acx.avg, w->one.avg, w->one_median);
    fprintf(f, "}");
}

/* ---- the accelerator ---- */

/* Start the accelerator of this run: -d and -b as its device_state and
 * backend; with --fused also NO_SHARD, --bucket-mb, dtype as reduce_dtype,
 * no accumulation and no preemption agreement (nothing to checkpoint). The
 * program's own acx options (--acx-KEY=VALUE, --config) apply every time:
 * acx_init gets a fresh copy of the arguments. Collective. */
static acx_status_t start_acx(const run_t *r, acx_dtype_t dtype, acx_accelerator_t **acc_p) {
    const options_t *o = r->o;
    acx_config_t cfg = ACX_CONFIG_DEFAULT;
    cfg.backend = o->backend;
    cfg.device_state = o->device_cuda ? ACX_DEVICE_STATE_CUDA : ACX_DEVICE_STATE_HOST;
    if (o->fused_k > 0) {
        cfg.sharding_strategy = ACX_NO_SHARD;
        cfg.bucket_size_mb = o->bucket_mb;
        cfg.gradient_accumulation_steps = 1;
        cfg.mixed_precision = ACX_MP_NO;
        cfg.reduce_dtype = dtype == ACX_DTYPE_BFLOAT16  ? ACX_REDUCE_BF16
                           : dtype == ACX_DTYPE_FLOAT16 ? ACX_REDUCE_FP16
                                                        : ACX_REDUCE_FP32;
        cfg.preemption.signals = "none";
    }
    char **mem = malloc(((size_t)r->argc + 1) * sizeof *mem), **av = mem;
    if (mem == NULL) return ACX_ERR_NO_MEMORY;
    memcpy(mem, r->argv, ((size_t)r->argc + 1) * sizeof *mem);
    int ac = r->argc;
    acx_status_t st = acx_init(&ac, &av, &cfg, acc_p);
    free(mem);
    return st;
}

/* acx_init refused -d/-b: exit 77 when the device or the backend is not
 * there (ACX_ERR_NOT_SUPPORTED, agreed by every rank), else 1; rank 0 says
 * why, once. */
static int start_failed(const run_t *r, acx_status_t st, int nccl) {
    const char *prog = r->coll->prog;
    if (st != ACX_ERR_NOT_SUPPORTED || !r->o->device_cuda) {
        if (r->c.rank == 0) fprintf(stderr, "%s: %s\n", prog, acx_last_error());
        return 1;
    }
    if (r->c.rank == 0) {
        if (nccl)
            fprintf(stderr, "%s: -b nccl: not available in this build/machine: %s\n", prog,
                    acx_last_error());
        else
            fprintf(stderr, "%s: -d cuda: no CUDA device: %s\n", prog, acx_last_error());
    }
    return EXIT_UNAVAILABLE;
}

/* -b nccl: first the device alone (an accelerator on MPI with device
 * state), so that a missing device and a missing NCCL are told apart, and
 * ranks of one node that would share a device (NCCL refuses them) are
 * caught before NCCL is. Returns 0 or the exit status. Collective. */
static int probe_device(const run_t *r) {
    options_t mpi_o = *r->o;
    mpi_o.backend = ACX_BACKEND_MPI;
    run_t probe = *r;
    probe.o = &mpi_o;
    acx_accelerator_t *acc = NULL;
    acx_status_t st = start_acx(&probe, ACX_DTYPE_FLOAT32, &acc);
    if (st != ACX_OK) return start_failed(&probe, st, 0);
    /* the devices of this node's ranks: two alike and NCCL would refuse */
    MPI_Comm node;
    int dev = acx_device(acc), n = acx_local_size(acc), shared = 0;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    int *devs = malloc((size_t)n * sizeof *devs);
    if (devs == NULL) die(r, "out of memory");
    MPI_Allgather(&dev, 1, MPI_INT, devs, 1, MPI_INT, node);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++)
            shared |= devs[i] == devs[j];
    free(devs);
    MPI_Comm_free(&node);
    MPI_Allreduce(MPI_IN_PLACE, &shared, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (shared && r->c.rank == 0)
        fprintf(stderr,
                "%s: -b nccl: %d ranks on a node share its CUDA device(s); NCCL needs a device "
                "per rank (-b mpi can share one)\n",
                r->coll->prog, n);
    if (acx_finalize(acc) != ACX_OK) return 1;
    return shared ? EXIT_UNAVAILABLE : 0;
}

/* --fused: the buckets acx plans for k gradients of count float32 each
 * (docs/collectives.md: in ready order, a bucket closes when the next
 * gradient would take it past bucket_bytes; one gradient at least).
 * tests/osu_bench.test holds it against the count acx logs at acx_prepare. */
static int fused_buckets(size_t count, int k, size_t bucket_bytes) {
    size_t seg = count * sizeof(float), bytes = 0;
    int nb = 0;
    for (int i = 0; i < k; i++) {
        if (nb == 0 || bytes + seg > bucket_bytes) {
            nb++;
            bytes = 0;
        }
        bytes += seg;
    }
    return nb;
}

/* ---- one size ---- */

static void run_size(run_t *r, size_t count, row_t *w) {
    const options_t *o = r->o;
    osu_ctx_t *c = &r->c;
    c->count = count;
    w->count = count;
    w->bytes = count * c->esize;
    int small = w->bytes <= OSU_LARGE_MESSAGE;
    w->iters = o->iterations > 0 ? o->iterations : small ? OSU_ITERS_SMALL : OSU_ITERS_LARGE;
    w->warmup = o->warmup >= 0 ? o->warmup : small ? OSU_WARMUP_SMALL : OSU_WARMUP_LARGE;
    w->buckets = 0;
    if (o->fused_k > 0) {
        /* a new model needs a new accelerator: finish the last size's */
        if (r->acc_used) {
            acx_status_t st = acx_finalize(c->acc);
            c->acc = NULL;
            if (st != ACX_OK) die(r, acx_last_error());
            if ((st = start_acx(r, c->dtype, &c->acc)) != ACX_OK) die(r, acx_last_error());
        }
        r->acc_used = 1;
        acx_status_t st = r->coll->fused->create(c->acc, count, o->fused_k, &r->fused_state);
        if (st != ACX_OK) die(r, acx_last_error());
        w->buckets = fused_buckets(count, o->fused_k, (size_t)(o->bucket_mb * 1048576.0));
    }
    w->validated = o->validate;
    w->pass = 1;
    if (o->validate) w->pass = validate_size(r) == 0;

    double total[NUM_SIDES], med[NUM_SIDES];
    time_size(r, w->iters, w->warmup, total, med);
    stats_t *st[NUM_SIDES] = {&w->acx, &w->raw, &w->one};
    double *md[NUM_SIDES] = {&w->acx_median, &w->raw_median, &w->one_median};
    for (int s = 0; s < NUM_SIDES; s++) { /* collective: every rank runs all three */
        *st[s] = stats_over_ranks(total[s] * 1e6 / (double)w->iters, c->comm, c->size);
        *md[s] = stats_over_ranks(med[s] * 1e6, c->comm, c->size).avg;
    }
    w->has_raw = o->compare_raw || o->fused_k > 0;
    size_t rated = o->fused_k > 0 ? w->bytes * (size_t)o->fused_k : w->bytes;
    osu_bandwidth(r->coll->op, rated, c->size, w->acx.avg * 1e-6, &w->algbw, &w->busbw);
    if (o->fused_k > 0) {
        r->coll->fused->destroy(r->fused_state);
        r->fused_state = NULL;
    }
    MPI_Barrier(c->comm);
}

/* ---- main ---- */

/* Raw side's MPI datatype and SUM op for dtype. */
static int raw_type_and_op(acx_dtype_t dtype, MPI_Datatype *type_p, MPI_Op *op_p) {
    *op_p = MPI_SUM;
    switch (dtype) {
    case ACX_DTYPE_FLOAT32: *type_p = MPI_FLOAT; return MPI_SUCCESS;
    case ACX_DTYPE_FLOAT64: *type_p = MPI_DOUBLE; return MPI_SUCCESS;
    case ACX_DTYPE_INT8: *type_p = MPI_INT8_T; return MPI_SUCCESS;
    case ACX_DTYPE_UINT8: *type_p = MPI_UINT8_T; return MPI_SUCCESS;
    case ACX_DTYPE_INT32: *type_p = MPI_INT32_T; return MPI_SUCCESS;
    case ACX_DTYPE_INT64: *type_p = MPI_INT64_T; return MPI_SUCCESS;
    case ACX_DTYPE_FLOAT16: *type_p = MPI_UINT16_T; return MPI_Op_create(f16_sum_fn, 1, op_p);
    default: *type_p = MPI_UINT16_T; return MPI_Op_create(bf16_sum_fn, 1, op_p);
    }
}

/* One table: every size of -m for one dtype. Adds its rows to *rows_p (the
 * JSON rows so far) and its validation failures to *failed_p; returns the
 * number of rows. */
static int run_table(run_t *r, acx_dtype_t dtype, FILE *json, int *rows_p, int *failed_p) {
    const options_t *o = r->o;
    const osu_coll_t *coll = r->coll;
    osu_ctx_t *c = &r->c;
    c->dtype = dtype;
    c->esize = acx_dtype_size(dtype);
    if (raw_type_and_op(dtype, &c->mpi_type, &c->mpi_sum) != MPI_SUCCESS)
        die(r, "MPI_Op_create failed");

    /* Buffers for the largest size, reused by every size. */
    size_t max_count = o->max_size / c->esize;
    size_t ns = extent_elems(coll->send_extent, max_count, c->size);
    size_t nr = extent_elems(coll->recv_extent, max_count, c->size);
    if (o->fused_k > 0) { /* acx's side is the model's gradients */
        r->raw_flat = alloc_buf((size_t)o->fused_k * max_count, c->esize);
        if (max_count > 0 && r->raw_flat == NULL) die(r, "out of memory for the --fused buffers");
    } else if (r->device >= 0) { /* device buffers; host copies for -c; no raw side */
        acx_status_t st = alloc_acx_buf(c->acc, ns, c->esize, &c->send);
        if (st == ACX_OK) st = alloc_acx_buf(c->acc, nr, c->esize, &c->recv);
        if (st != ACX_OK) die(r, acx_last_error());
        if (o->validate) {
            r->host_send = alloc_buf(ns, c->esize);
            r->host_recv = alloc_buf(nr, c->esize);
            if (max_count > 0 && (r->host_send == NULL || (nr > 0 && r->host_recv == NULL)))
                die(r, "out of memory for the validation copies");
        }
    } else {
        if (alloc_acx_buf(c->acc, ns, c->esize, &c->send) != ACX_OK ||
            alloc_acx_buf(c->acc, nr, c->esize, &c->recv) != ACX_OK)
            die(r, acx_last_error());
        c->raw_send = alloc_buf(ns, c->esize);
        c->raw_recv = alloc_buf(nr, c->esize);
        if (max_count > 0 && (c->send == NULL || c->raw_send == NULL ||
                              (nr > 0 && (c->recv == NULL || c->raw_recv == NULL))))
            die(r, "out of memory for the message buffers");
    }

    int rows = 0;
    if (c->rank == 0) print_header(r);
    for (size_t size = o->min_size; size <= o->max_size; size *= 2) {
        size_t count = size / c->esize;
        if (count == 0) continue;
        row_t w;
        run_size(r, count, &w);
        *failed_p += !w.pass;
        if (c->rank == 0) print_row(r, &w);
        if (json) json_row(json, r, &w, *rows_p == 0);
        (*rows_p)++;
        rows++;
        if (size > SIZE_MAX / 2) break;
    }

    acx_buffer_free(c->acc, c->send);
    acx_buffer_free(c->acc, c->recv);
    free(c->raw_send);
    free(c->raw_recv);
    free(r->raw_flat);
    free(r->host_send);
    free(r->host_recv);
    c->send = c->recv = c->raw_send = c->raw_recv = r->raw_flat = NULL;
    r->host_send = r->host_recv = NULL;
    if (c->mpi_sum != MPI_SUM) MPI_Op_free(&c->mpi_sum);
    return rows;
}

/* ---- acx's side of the timed calls ---- */

acx_status_t osu_acx_all_reduce(osu_ctx_t *c, const void *send, void *recv, size_t count) {
    return acx_all_reduce(c->acc, send, recv, count, c->dtype, ACX_OP_SUM);
}

acx_status_t osu_acx_all_gather(osu_ctx_t *c, const void *send, void *recv, size_t count) {
    return acx_all_gather(c->acc, send, recv, count, c->dtype);
}

acx_status_t osu_acx_reduce_scatter(osu_ctx_t *c, const void *send, void *recv, size_t count) {
    return acx_reduce_scatter(c->acc, send, recv, count, c->dtype, ACX_OP_SUM);
}

acx_status_t osu_acx_broadcast(osu_ctx_t *c, void *buf, size_t count, int root) {
    return acx_broadcast(c->acc, buf, count, c->dtype, root);
}

int osu_main(int argc, char **argv, const osu_coll_t *coll) {
    int provided, rank, world, rc = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);

    options_t o;
    char err[512];
    int parsed = parse_options(argc, argv, coll, rank, &o, err, sizeof err);
    if (parsed != 0) { /* every rank parsed the same arguments and agrees */
        if (parsed < 0 && rank == 0)
            fprintf(stderr, "%s: %s\nTry '%s -h' for the options.\n", coll->prog, err, coll->prog);
        MPI_Finalize();
        return parsed < 0 ? EXIT_USAGE : 0;
    }
    run_t r = {.coll = coll, .o = &o, .device = -1, .argc = argc};
    const char *inject = getenv("OSU_BENCH_INJECT_FAULT");
    r.inject_fault = inject != NULL && strcmp(inject, "1") == 0;
    r.c.rank = rank;
    r.c.size = world;
    r.c.nccl = o.backend == ACX_BACKEND_NCCL;
    r.argv = malloc(((size_t)argc + 1) * sizeof *r.argv);
    if (r.argv == NULL) {
        fprintf(stderr, "%s: out of memory\n", coll->prog);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    memcpy(r.argv, argv, ((size_t)argc + 1) * sizeof *r.argv);
    acx_status_t st = ACX_OK;
    if (o.backend == ACX_BACKEND_NCCL) rc = probe_device(&r);
    if (rc == 0 && (st = start_acx(&r, o.dtypes[0], &r.c.acc)) != ACX_OK)
        rc = start_failed(&r, st, o.backend == ACX_BACKEND_NCCL);
    if (rc != 0) {
        free(r.argv);
        MPI_Finalize();
        return rc;
    }
    if (o.device_cuda) r.device = acx_device(r.c.acc);
    MPI_Comm_dup(MPI_COMM_WORLD, &r.c.comm);
    FILE *json = NULL;
    int json_ok = 1, rows = 0, failed = 0;

    /* The JSON file is opened up front, so a bad path fails before any
     * timing, on every rank alike. */
    if (o.json != NULL && rank == 0) {
        json = fopen(o.json, "w");
        json_ok = json != NULL;
        if (!json_ok) fprintf(stderr, "%s: --json %s: %s\n", coll->prog, o.json, strerror(errno));
    }
    MPI_Bcast(&json_ok, 1, MPI_INT, 0, r.c.comm);
    if (!json_ok) {
        rc = 1;
        goto out;
    }
    if (json) json_begin(json, &r);
    for (int d = 0; d < o.num_dtypes; d++) {
        if (d > 0 && rank == 0) printf("\n");
        int n = run_table(&r, o.dtypes[d], json, &rows, &failed);
        if (n == 0 && rank == 0)
            fprintf(stderr, "%s: no size in -m %zu:%zu holds one %s element (%zu bytes)\n",
                    coll->prog, o.min_size, o.max_size, acx_dtype_name(o.dtypes[d]),
                    acx_dtype_size(o.dtypes[d]));
        if (n == 0) rc = 1;
    }
    if (json) {
        fprintf(json, "\n  ]\n}\n");
        if (fclose(json) != 0) {
            fprintf(stderr, "%s: --json %s: write failed\n", coll->prog, o.json);
            rc = 1;
        }
        json = NULL;
    }
    if (failed > 0) {
        if (rank == 0)
            fprintf(stderr, "%s: validation failed at %d size%s\n", coll->prog, failed,
                    failed == 1 ? "" : "s");
        rc = 1;
    }

out:
    if (json) fclose(json);
    MPI_Comm_free(&r.c.comm);
    free(r.argv);
    if (acx_finalize(r.c.acc) != ACX_OK) {
        if (rank == 0) fprintf(stderr, "%s: acx_finalize: %s\n", coll->prog, acx_last_error());
        rc = 1;
    }
    MPI_Finalize();
    return rc;
}

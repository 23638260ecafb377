/*
 * collectives/mpi/coll_mpi_shm.c — the shared-memory all-reduce of one node
 * (coll_mpi_shm.h says what and why; coll_mpi.c decides when).
 *
 * Segment layout, one per communicator (P ranks, S = slot bytes):
 *
 *   [flag 0 | flag 1 | ... | flag P-1]   128 bytes each (a cache-line pair,
 *                                        so the adjacent-line prefetcher
 *                                        does not make neighbours contend)
 *   [rank 0 set 0 | rank 0 set 1 | rank 1 set 0 | ... ]   S bytes each
 *
 * flag[r] is the number of phases rank r has finished, over the
 * communicator's life; every rank runs the same phases in the same order,
 * so after phase n every flag reads n. Next to it, in the same line, rank
 * r's arguments of the op whose first round uses set k (args[k]): written
 * before the round's first publish, read by every rank once that has
 * arrived, so the check costs no synchronization and no cache line beyond
 * the flags' own (see check_args).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "base/half.h"
#include "collectives/mpi/coll_mpi_shm.h"
#include "base/error.h"
#include "base/log.h"
#include "base/memstat.h"
#include "base/settings.h"

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2,
               "the shared-memory flags need lock-free 64-bit atomics (other processes read them)");

#define FLAG_BYTES    128
#define SEGMENT_ALIGN ((size_t)4096)
/* Pause-loop iterations before a waiting rank starts yielding the CPU, and
 * yields between two MPI progress calls. */
#define SPINS_BEFORE_YIELD  2048u
#define YIELDS_PER_PROGRESS 16u
/* A tag no acx code sends with: MPI_Iprobe on it never matches, it only
 * runs the MPI library's progress engine. (MPI_TAG_UB is at least 32767.) */
#define PROGRESS_TAG 32766

/* What a rank passed to an op, in one word published with its first round
 * (pack_args): kind in bits 62-63, dtype 56-61, op 48-55, the count
 * (elements per rank; all-gather: bytes per rank) in bits 0-47. */
#define ARGS_COUNT_MASK (((uint64_t)1 << 48) - 1)

typedef struct flag {
    _Alignas(FLAG_BYTES) _Atomic uint64_t phase;
    uint64_t args[2]; /* per slot set; plain: ordered by phase's release/acquire */
} flag_t;
_Static_assert(sizeof(flag_t) == FLAG_BYTES, "one flag per 128 bytes");

struct acx_shm {
    MPI_Comm comm; /* not owned: the communicator this segment serves (progress probes) */
    int rank, size;
    size_t slot_bytes, min_bytes;
    int yield_at_once; /* more ranks on the node than online CPUs */
    int check_args;    /* compare the ranks' arguments (off only to measure its cost) */
    int args_pending;  /* the next publish also publishes args_out */
    uint64_t args_out; /* this rank's arguments of the op starting (pack_args) */
    char *base;        /* the mapping, segment_bytes long */
    size_t segment_bytes;
    size_t reserved;           /* bytes of the segment this rank allocated (attach()): its
                                * slots, rank 0 also the flags; acx_memory_stats' comm_segments */
    flag_t *flags;             /* [size], at base */
    char *data;                /* [size][2][slot_bytes] */
    uint64_t phase;            /* phases this rank has finished (= its flag) */
    int set;                   /* slot set of the next round */
    int round_set;             /* slot set of the round in progress */
    int scan;                  /* flags below this index have reached phase (arrived()) */
    const char **src;          /* [size] scratch: the round's slots */
    acx_shm_op_t *head, *tail; /* ops started and not done, oldest first */
};

/* ---- creation ---- */

/* What node rank 0 decides and broadcasts, so every rank agrees. */
enum { SHM_USE = 0, SHM_OFF, SHM_FAILED, SHM_BAD_ENV };
typedef struct shm_plan {
    int verdict;
    int check_args;
    unsigned long long slot_bytes, min_bytes, segment_bytes;
    char name[64];     /* the POSIX shared-memory object (SHM_USE) */
    char message[256]; /* why not (SHM_FAILED, SHM_BAD_ENV) */
} shm_plan_t;

/* A byte count variable (ACX_SHM_SLOT_BYTES, ACX_SHM_MIN_BYTES: range and
 * multiple in base/settings.c; the slot is whole cache lines, which keeps
 * blocks aligned) into *v_p; 0 when absent. -1 (with plan->message set) when
 * malformed. */
static int env_bytes(acx_env_t id, unsigned long long *v_p, shm_plan_t *plan) {
    int64_t v;
    int r = acx_env_int(id, &v);
    if (r < 0) {
        char accepted[128];
        acx_setting_describe(acx_env_setting(id), accepted, sizeof accepted);
        snprintf(plan->message, sizeof plan->message, "%s=%s: expected %s", acx_env_name(id),
                 acx_env_text(id), accepted);
        return -1;
    }
    if (r == 1) *v_p = (unsigned long long)v;
    return r;
}

/* Node rank 0: read the environment, create, size and map the object. On
 * SHM_USE the mapping is returned in *base_p. */
static void plan_segment(int size, shm_plan_t *plan, char **base_p) {
    memset(plan, 0, sizeof *plan);
    /* the test suite's switch, for measuring the check's cost only */
    int nocheck, off;
    acx_env_flag(ACX_ENV_TEST_SHM_NO_ARGS_CHECK, &nocheck);
    plan->check_args = !nocheck;
    if (acx_env_flag(ACX_ENV_SHM_DISABLE, &off) < 0) {
        char accepted[64];
        acx_setting_describe(acx_env_setting(ACX_ENV_SHM_DISABLE), accepted, sizeof accepted);
        plan->verdict = SHM_BAD_ENV;
        snprintf(plan->message, sizeof plan->message, "%s=%s: expected %s",
                 acx_env_name(ACX_ENV_SHM_DISABLE), acx_env_text(ACX_ENV_SHM_DISABLE), accepted);
        return;
    }
    if (off) {
        plan->verdict = SHM_OFF;
        return;
    }
    size_t slot = ACX_SHM_SLOT_BYTES_MAX;
    while (slot > ACX_SHM_SLOT_BYTES_MIN_DEFAULT && slot * (size_t)size > ACX_SHM_SEGMENT_BUDGET)
        slot /= 2;
    plan->slot_bytes = slot;
    plan->min_bytes = ACX_SHM_MIN_BYTES_DEFAULT;
    if (env_bytes(ACX_ENV_SHM_SLOT_BYTES, &plan->slot_bytes, plan) < 0 ||
        env_bytes(ACX_ENV_SHM_MIN_BYTES, &plan->min_bytes, plan) < 0) {
        plan->verdict = SHM_BAD_ENV;
        return;
    }
    size_t header = ((size_t)size * FLAG_BYTES + SEGMENT_ALIGN - 1) / SEGMENT_ALIGN * SEGMENT_ALIGN;
    plan->segment_bytes = header + (size_t)size * 2 * plan->slot_bytes;

    /* A clear message for the common case; the reservation proper is each
     * rank's posix_fallocate of its own slots (reserve()). */
    struct statvfs fs;
    if (statvfs("/dev/shm", &fs) == 0 &&
        (unsigned long long)fs.f_bavail * fs.f_frsize < plan->segment_bytes) {
        plan->verdict = SHM_FAILED;
        snprintf(plan->message, sizeof plan->message,
                 "/dev/shm has %llu bytes free, the segment needs %llu",
                 (unsigned long long)fs.f_bavail * fs.f_frsize, plan->segment_bytes);
        return;
    }
    static unsigned serial;
    int fd = -1;
    for (int tries = 0; tries < 8 && fd < 0; tries++) {
        snprintf(plan->name, sizeof plan->name, "/acx-shm-%ld-%u", (long)getpid(), serial++);
        fd = shm_open(plan->name, O_RDWR | O_CREAT | O_EXCL, 0600);
        if (fd < 0 && errno != EEXIST) break;
    }
    if (fd < 0) {
        plan->verdict = SHM_FAILED;
        snprintf(plan->message, sizeof plan->message, "shm_open(%s): %s", plan->name,
                 strerror(errno));
        return;
    }
    void *base = MAP_FAILED;
    if (ftruncate(fd, (off_t)plan->segment_bytes) == 0)
        base = mmap(NULL, plan->segment_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        plan->verdict = SHM_FAILED;
        snprintf(plan->message, sizeof plan->message, "sizing or mapping %s (%llu bytes): %s",
                 plan->name, plan->segment_bytes, strerror(errno));
        shm_unlink(plan->name);
    } else {
        *base_p = base;
    }
    close(fd);
}

/* Map the object (ranks other than 0) and reserve this rank's own slots,
 * rank 0 also the flags, with posix_fallocate: a full /dev/shm is an error
 * here, not a SIGBUS at the first write, and the pages are allocated by
 * their owner (on a multi-socket node: in its own memory). They read 0. */
static acx_status_t attach(const shm_plan_t *plan, int rank, int size, char **base_p) {
    int fd = shm_open(plan->name, O_RDWR, 0);
    if (fd < 0) return ACX_ERROR(ACX_ERR_SYSTEM, "shm_open(%s): %s", plan->name, strerror(errno));
    size_t mine = 2 * (size_t)plan->slot_bytes;
    size_t data = (size_t)plan->segment_bytes - (size_t)size * mine;
    size_t first = data + (size_t)rank * mine;
    int err =
        posix_fallocate(fd, rank == 0 ? 0 : (off_t)first, (off_t)(rank == 0 ? first + mine : mine));
    if (err != 0) {
        close(fd);
        return ACX_ERROR(ACX_ERR_SYSTEM, "reserving %zu bytes of %s: %s", mine, plan->name,
                         strerror(err));
    }
    void *base = *base_p;
    struct stat st;
    if (base == NULL && fstat(fd, &st) == 0 &&
        (unsigned long long)st.st_size == plan->segment_bytes)
        base = mmap(NULL, plan->segment_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    err = errno;
    close(fd);
    if (base == NULL || base == MAP_FAILED)
        return ACX_ERROR(ACX_ERR_SYSTEM, "mapping %s (%llu bytes): %s", plan->name,
                         plan->segment_bytes, strerror(err));
    *base_p = base;
    return ACX_OK;
}

static char *slot(const acx_shm_t *s, int rank, int set) {
    return s->data + ((size_t)rank * 2 + (size_t)set) * s->slot_bytes;
}

acx_status_t acx_shm_create(MPI_Comm comm, acx_shm_t **shm_p) {
    if (shm_p == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "shm create: shm_p is NULL");
    *shm_p = NULL;
    int rank = 0, size = 0, node_size = 0;
    ACX_MPI_CHECK(MPI_Comm_rank(comm, &rank));
    ACX_MPI_CHECK(MPI_Comm_size(comm, &size));
    if (size < 2) return ACX_OK;
    /* All on one node iff this rank's shared-memory group is the whole
     * communicator: then it is so for every rank, else for none. */
    MPI_Comm node = MPI_COMM_NULL;
    ACX_MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
    int ret = MPI_Comm_size(node, &node_size);
    MPI_Comm_free(&node);
    if (ret != MPI_SUCCESS) return acx_error_mpi(ret, "MPI_Comm_size", __FILE__, __LINE__);
    if (node_size != size) return ACX_OK;

    shm_plan_t plan;
    char *base = NULL;
    if (rank == 0) plan_segment(size, &plan, &base);
    ret = MPI_Bcast(&plan, (int)sizeof plan, MPI_BYTE, 0, comm);
    if (ret != MPI_SUCCESS) {
        if (base != NULL) {
            munmap(base, plan.segment_bytes);
            shm_unlink(plan.name);
        }
        return acx_error_mpi(ret, "MPI_Bcast (shared-memory segment)", __FILE__, __LINE__);
    }
    if (plan.verdict == SHM_BAD_ENV)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "%s (read on rank 0)", plan.message);
    if (plan.verdict == SHM_OFF) {
        if (rank == 0)
            ACX_INFO(ACX_SUBSYS_COLL, "%s is set: collectives go through MPI only",
                     acx_env_name(ACX_ENV_SHM_DISABLE));
        return ACX_OK;
    }
    if (plan.verdict == SHM_FAILED) {
        if (rank == 0)
            ACX_INFO(ACX_SUBSYS_COLL, "no shared-memory collectives (%s): they go through MPI only",
                     plan.message);
        return ACX_OK;
    }

    /* Everyone maps the object and reserves its part; then rank 0 unlinks
     * it, so nothing is left in /dev/shm however the job ends. */
    acx_status_t mine = attach(&plan, rank, size, &base);
    acx_shm_t *s = acx_calloc(1, sizeof *s, "shared-memory collectives");
    const char **src = acx_calloc((size_t)size, sizeof *src, "shared-memory slot list");
    if (mine == ACX_OK && (s == NULL || src == NULL)) mine = ACX_ERR_NO_MEMORY;
    int ok = mine == ACX_OK, all_ok = 0;
    ret = MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm);
    if (rank == 0) shm_unlink(plan.name);
    if (ret != MPI_SUCCESS || !all_ok) {
        if (base != NULL) munmap(base, plan.segment_bytes);
        free(s);
        free(src);
        if (ret != MPI_SUCCESS)
            return acx_error_mpi(ret, "MPI_Allreduce (shared-memory segment)", __FILE__, __LINE__);
        if (!ok)
            ACX_INFO(ACX_SUBSYS_COLL,
                     "no shared-memory all-reduce (this rank: %s): all-reduce goes through MPI "
                     "only",
                     acx_last_error());
        return ACX_OK;
    }
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    *s = (acx_shm_t){.comm = comm,
                     .rank = rank,
                     .size = size,
                     .slot_bytes = (size_t)plan.slot_bytes,
                     .min_bytes = (size_t)plan.min_bytes,
                     .yield_at_once = cpus > 0 && size > cpus,
                     .check_args = plan.check_args,
                     .base = base,
                     .segment_bytes = (size_t)plan.segment_bytes,
                     .flags = (flag_t *)(void *)base,
                     .src = src};
    s->data = base + (s->segment_bytes - (size_t)size * 2 * s->slot_bytes);
    s->reserved = 2 * s->slot_bytes + (rank == 0 ? (size_t)(s->data - base) : 0);
    acx_mem_note_comm_segment((int64_t)s->reserved);
    if (rank == 0)
        ACX_LOG(ACX_LOG_DEBUG, ACX_SUBSYS_COLL,
                "shared-memory collectives: %d ranks on this node, %zu-byte slots, %zu-byte "
                "segment, from %zu bytes%s",
                size, s->slot_bytes, s->segment_bytes, s->min_bytes,
                s->yield_at_once ? "; more ranks than CPUs: waits yield at once" : "");
    *shm_p = s;
    return ACX_OK;
}

void acx_shm_free(acx_shm_t *s) {
    if (s == NULL) return;
    if (s->base != NULL) munmap(s->base, s->segment_bytes);
    acx_mem_note_comm_segment(-(int64_t)s->reserved);
    free(s->src);
    free(s);
}

/* ---- what goes through shared memory ---- */

/* The reductions the segment runs: SUM of float32, float64, int32, int64;
 * SUM and AVG of float16 and bfloat16. */
static int reduction_ok(acx_dtype_t dtype, acx_red_op_t op) {
    switch (dtype) {
    case ACX_DTYPE_FLOAT32:
    case ACX_DTYPE_FLOAT64:
    case ACX_DTYPE_INT32:
    case ACX_DTYPE_INT64: return op == ACX_OP_SUM;
    case ACX_DTYPE_FLOAT16:
    case ACX_DTYPE_BFLOAT16: return op == ACX_OP_SUM || op == ACX_OP_AVG;
    default: return 0;
    }
}

/* A buffer of elems elements of esize bytes reaches ACX_SHM_MIN_BYTES. */
static int big_enough(const acx_shm_t *s, size_t elems, size_t esize) {
    return elems > 0 && elems <= SIZE_MAX / esize && elems * esize >= s->min_bytes;
}

int acx_shm_all_reduce_ok(const acx_shm_t *s, size_t count, acx_dtype_t dtype, acx_red_op_t op) {
    if (s == NULL || !reduction_ok(dtype, op)) return 0;
    return big_enough(s, count, acx_dtype_size(dtype));
}

int acx_shm_reduce_scatter_ok(const acx_shm_t *s, size_t count, acx_dtype_t dtype,
                              acx_red_op_t op) {
    if (s == NULL || count == 0 || !reduction_ok(dtype, op)) return 0;
    size_t esize = acx_dtype_size(dtype);
    /* a round holds at least one element of each of the size blocks */
    if (s->slot_bytes / esize < (size_t)s->size) return 0;
    return count <= SIZE_MAX / (size_t)s->size && big_enough(s, count * (size_t)s->size, esize);
}

int acx_shm_all_gather_ok(const acx_shm_t *s, size_t count, size_t esize) {
    if (s == NULL || count == 0 || esize == 0 || count > SIZE_MAX / esize / (size_t)s->size)
        return 0;
    return big_enough(s, count * (size_t)s->size, esize);
}

/* ---- flags ---- */

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static void publish(acx_shm_t *s) {
    /* the arguments right before the flag, into the same cache line: a
     * peer spinning on the flag cannot take the line away between them */
    if (s->args_pending) {
        s->flags[s->rank].args[s->round_set] = s->args_out;
        s->args_pending = 0;
    }
    atomic_store_explicit(&s->flags[s->rank].phase, ++s->phase, memory_order_release);
    s->scan = 0;
}

/* Whether every rank has finished phase s->phase (acquire: their slot
 * writes before it are visible). Resumes where the last call stopped. */
static int arrived(acx_shm_t *s) {
    for (; s->scan < s->size; s->scan++)
        if (atomic_load_explicit(&s->flags[s->scan].phase, memory_order_acquire) < s->phase)
            return 0;
    return 1;
}

/* ---- the arithmetic ---- */

/* out[0..n) = src[0][first..] + src[1][first..] + ... (nsrc >= 2 sources), in
 * rank order. Integers add as unsigned: two's-complement wrap-around, like
 * MPI_SUM, without signed overflow. */
#define DEFINE_SUM(name, T)                                                                        \
    static void name(void *out_, const char *const *src, int nsrc, size_t first, size_t n) {       \
        T *restrict out = out_;                                                                    \
        const T *restrict a = (const T *)(const void *)src[0] + first;                             \
        const T *restrict b = (const T *)(const void *)src[1] + first;                             \
        for (size_t k = 0; k < n; k++)                                                             \
            out[k] = a[k] + b[k];                                                                  \
        for (int j = 2; j < nsrc; j++) {                                                           \
            const T *restrict c = (const T *)(const void *)src[j] + first;                         \
            for (size_t k = 0; k < n; k++)                                                         \
                out[k] += c[k];                                                                    \
        }                                                                                          \
    }
DEFINE_SUM(sum_f32, float)
DEFINE_SUM(sum_f64, double)
DEFINE_SUM(sum_u32, uint32_t)
DEFINE_SUM(sum_u64, uint64_t)

/* The 16-bit formula of coll_mpi.c (half_combine_rows, half_avg_round),
 * so that both paths give the same bits: widen to float32, sum in rank
 * order starting from rank 0's value, round once to the 16-bit format;
 * AVG divides the float32 sum by nsrc in float64 and rounds that once
 * (acx_f16_from_f64 / acx_bf16_from_f64). Tiles keep the accumulator in
 * L1 and let half.c's widening loops vectorize. */
static void sum_half(uint16_t *out, const char *const *src, int nsrc, size_t first, size_t n,
                     acx_dtype_t dtype, int avg) {
    enum { TILE = 512 };
    float acc[TILE], x[TILE];
    for (size_t i0 = 0; i0 < n; i0 += TILE) {
        size_t m = n - i0 < TILE ? n - i0 : TILE;
        acx_half_to_f32_n(dtype, (const uint16_t *)(const void *)src[0] + first + i0, acc, m);
        for (int j = 1; j < nsrc; j++) {
            acx_half_to_f32_n(dtype, (const uint16_t *)(const void *)src[j] + first + i0, x, m);
            for (size_t i = 0; i < m; i++)
                acc[i] += x[i];
        }
        if (!avg) {
            acx_half_from_f32_n(dtype, acc, out + i0, m);
        } else {
            double d = (double)nsrc;
            if (dtype == ACX_DTYPE_FLOAT16)
                for (size_t i = 0; i < m; i++)
                    out[i0 + i] = acx_f16_from_f64((double)acc[i] / d);
            else
                for (size_t i = 0; i < m; i++)
                    out[i0 + i] = acx_bf16_from_f64((double)acc[i] / d);
        }
    }
}

/* out[0..n) = the reduction (reduction_ok) of elements [first, first + n)
 * of every source in s->src, in rank order. out aliases no source. */
static void reduce(const acx_shm_t *s, acx_dtype_t dtype, acx_red_op_t op, void *out, size_t first,
                   size_t n) {
    const char *const *src = s->src;
    switch (dtype) {
    case ACX_DTYPE_FLOAT32: sum_f32(out, src, s->size, first, n); break;
    case ACX_DTYPE_FLOAT64: sum_f64(out, src, s->size, first, n); break;
    case ACX_DTYPE_INT32: sum_u32(out, src, s->size, first, n); break;
    case ACX_DTYPE_INT64: sum_u64(out, src, s->size, first, n); break;
    default: sum_half(out, src, s->size, first, n, dtype, op == ACX_OP_AVG); break;
    }
}

/* Block q of a round of m elements: ceil(m / size) rounded up to whole
 * 64-byte lines, the last blocks short or empty. */
static void block_of(const acx_shm_t *s, size_t m, size_t esize, int q, size_t *lo_p,
                     size_t *hi_p) {
    size_t line = 64 / esize;
    size_t block = (m + (size_t)s->size - 1) / (size_t)s->size;
    block = (block + line - 1) / line * line;
    size_t lo = (size_t)q * block;
    *lo_p = lo < m ? lo : m;
    *hi_p = lo + block < m ? lo + block : m;
}

/* ---- ops: rounds and stages ---- */

/* Where the head op's current round is. */
enum {
    STAGE_COPY_IN = 0,  /* the round has not begun */
    STAGE_WAIT_IN,      /* copied in and published; waiting for every rank's copy */
    STAGE_WAIT_REDUCED, /* all-reduce: block reduced and published; waiting for every block */
    STAGE_DONE
};

enum { OP_ALL_REDUCE, OP_REDUCE_SCATTER, OP_ALL_GATHER };

/* The round's size, in elements (all-gather: bytes) of each rank's part,
 * and the slots it uses (s->src, this rank's returned); flips the set. */
static char *begin_round(acx_shm_t *s, acx_shm_op_t *op) {
    size_t p = (size_t)s->size, per_round;
    if (op->kind == OP_ALL_REDUCE) {
        per_round = s->slot_bytes / op->esize;
    } else if (op->kind == OP_REDUCE_SCATTER) { /* P pieces per slot, on 64-byte lines */
        size_t line = 64 / op->esize;
        per_round = s->slot_bytes / op->esize / p;
        if (per_round >= line) per_round = per_round / line * line;
    } else {
        per_round = s->slot_bytes;
    }
    op->m = op->count - op->off < per_round ? op->count - op->off : per_round;
    s->round_set = s->set;
    s->set ^= 1;
    for (int j = 0; j < s->size; j++)
        s->src[j] = slot(s, j, s->round_set);
    return slot(s, s->rank, s->round_set);
}

/*
 * All-reduce, one round of m elements [off, off + m):
 *   COPY_IN       every block but this rank's into its slot (this rank
 *                 reads its own from sendbuf); publish
 *   WAIT_IN       this rank's block, summed over all ranks in rank order,
 *                 into its slot (where the others will read it) and out;
 *                 publish
 *   WAIT_REDUCED  the other ranks' blocks out of their slots
 * A round of at most ACX_SHM_DIRECT_BYTES copies all of it in and, at
 * WAIT_IN, every rank reduces all of it.
 */
static int step_all_reduce(acx_shm_t *s, acx_shm_op_t *op) {
    size_t esize = op->esize, lo, hi;
    const char *in = (const char *)op->sendbuf + op->off * esize;
    char *out = (char *)op->recvbuf + op->off * esize;
    char *mine = slot(s, s->rank, s->round_set);
    int direct = op->m * esize <= ACX_SHM_DIRECT_BYTES;
    switch (op->stage) {
    case STAGE_COPY_IN:
        mine = begin_round(s, op);
        direct = op->m * esize <= ACX_SHM_DIRECT_BYTES;
        if (direct) {
            memcpy(mine, in, op->m * esize);
        } else {
            block_of(s, op->m, esize, s->rank, &lo, &hi);
            memcpy(mine, in, lo * esize);
            memcpy(mine + hi * esize, in + hi * esize, (op->m - hi) * esize);
        }
        publish(s);
        op->stage = STAGE_WAIT_IN;
        return 1;
    case STAGE_WAIT_IN:
        if (!arrived(s)) return 0;
        if (direct) {
            reduce(s, op->dtype, op->op, out, 0, op->m);
            return 2;
        }
        block_of(s, op->m, esize, s->rank, &lo, &hi);
        if (hi > lo) {
            s->src[s->rank] = in;
            reduce(s, op->dtype, op->op, mine + lo * esize, lo, hi - lo);
            s->src[s->rank] = mine;
            memcpy(out + lo * esize, mine + lo * esize, (hi - lo) * esize);
        }
        publish(s);
        op->stage = STAGE_WAIT_REDUCED;
        return 1;
    case STAGE_WAIT_REDUCED:
        if (!arrived(s)) return 0;
        for (int q = 0; q < s->size; q++) {
            if (q == s->rank) continue;
            block_of(s, op->m, esize, q, &lo, &hi);
            if (hi > lo) memcpy(out + lo * esize, s->src[q] + lo * esize, (hi - lo) * esize);
        }
        return 2;
    default: return 0;
    }
}

/*
 * Reduce-scatter, one round of m elements [off, off + m) of each of the P
 * blocks: this rank's slot after COPY_IN is
 *
 *   [ block 0 [off, off+m) | block 1 [off, off+m) | ... | block P-1 [off, off+m) ]
 *
 * and at WAIT_IN rank r reduces piece r of every slot, in rank order, into
 * recvbuf[off, off + m). One synchronization per round: a rank publishes
 * round k + 1 only after it has read round k, which is all the two-set
 * argument needs. In place, recvbuf[off, off + m) is this rank's block of
 * sendbuf for this round, already copied in: writing it is safe.
 */
static int step_reduce_scatter(acx_shm_t *s, acx_shm_op_t *op) {
    size_t esize = op->esize, m;
    const char *in = op->sendbuf;
    switch (op->stage) {
    case STAGE_COPY_IN: {
        char *mine = begin_round(s, op);
        m = op->m;
        for (size_t q = 0; q < (size_t)s->size; q++)
            memcpy(mine + q * m * esize, in + (q * op->count + op->off) * esize, m * esize);
        publish(s);
        op->stage = STAGE_WAIT_IN;
        return 1;
    }
    case STAGE_WAIT_IN:
        if (!arrived(s)) return 0;
        reduce(s, op->dtype, op->op, (char *)op->recvbuf + op->off * esize, (size_t)s->rank * op->m,
               op->m);
        return 2;
    default: return 0;
    }
}

/* All-gather, one round of m bytes [off, off + m) of each rank's part: copy
 * in, publish, and at WAIT_IN copy every rank's slot into its row of
 * recvbuf. In place (sendbuf is this rank's row) the own row stays. */
static int step_all_gather(acx_shm_t *s, acx_shm_op_t *op) {
    const char *in = op->sendbuf;
    char *out = op->recvbuf;
    size_t bytes = op->count; /* per rank */
    switch (op->stage) {
    case STAGE_COPY_IN: {
        char *mine = begin_round(s, op); /* sets op->m */
        memcpy(mine, in + op->off, op->m);
        publish(s);
        op->stage = STAGE_WAIT_IN;
        return 1;
    }
    case STAGE_WAIT_IN:
        if (!arrived(s)) return 0;
        for (int q = 0; q < s->size; q++) {
            char *dst = out + (size_t)q * bytes + op->off;
            if (q != s->rank)
                memcpy(dst, s->src[q], op->m);
            else if (in != out + (size_t)s->rank * bytes)
                memcpy(dst, in + op->off, op->m);
        }
        return 2;
    default: return 0;
    }
}

/* ---- the ranks' arguments ---- */

/*
 * Every rank must pass the same kind, dtype, op and count; a rank that does
 * not would make the others read past its data or leave part of theirs
 * unreduced, silently. So the first round of every op publishes this
 * rank's arguments, one word, with its first flag (publish), and once every
 * flag of that phase has arrived — before any rank reads another's slot —
 * each rank compares every rank's arguments with rank 0's (args_refused).
 * Every rank reads the same published values, so every rank reaches the
 * same verdict at the same phase: on a mismatch all of them end the op
 * there, having published the same phases and flipped the same slot set,
 * and the segment stays in step for the next op. Cost: one store into the
 * flag's own cache line right before the flag itself, and P compares of
 * words in lines that arrived() has just read (docs/benchmarks.md).
 * Not covered: ranks that do not both take this path (a count of 0, or an
 * op or dtype the segment does not run, on some ranks) wait in different
 * collectives: the stall detector ends that.
 */
static uint64_t pack_args(const acx_shm_op_t *op) {
    return (uint64_t)op->kind << 62 | ((uint64_t)op->dtype & 63) << 56 |
           ((uint64_t)op->op & 255) << 48 | ((uint64_t)op->count & ARGS_COUNT_MASK);
}

/* After the first round's flags arrived: 1 (op->refused set) when a rank's
 * arguments differ from rank 0's. The first difference, in the order kind,
 * dtype, op, count, at the lowest rank. (Counts are compared in their low
 * 48 bits: 2^48 elements and more do not fit in a segment's lifetime.) */
static int args_refused(const acx_shm_t *s, acx_shm_op_t *op) {
    uint64_t a0 = s->flags[0].args[s->round_set];
    for (int q = 1; q < s->size; q++) {
        uint64_t a = s->flags[q].args[s->round_set];
        if (a == a0) continue;
        int shift = a >> 62 != a0 >> 62                   ? 62
                    : (a >> 56 & 63) != (a0 >> 56 & 63)   ? 56
                    : (a >> 48 & 255) != (a0 >> 48 & 255) ? 48
                                                          : 0;
        uint64_t mask = shift == 62 ? 3 : shift == 56 ? 63 : shift == 48 ? 255 : ARGS_COUNT_MASK;
        op->refused = shift == 62   ? ACX_SHM_REFUSED_KIND
                      : shift == 56 ? ACX_SHM_REFUSED_DTYPE
                      : shift == 48 ? ACX_SHM_REFUSED_OP
                                    : ACX_SHM_REFUSED_COUNT;
        op->refused_rank = q;
        op->refused_kind[0] = (int)(a0 >> 62);
        op->refused_kind[1] = (int)(a >> 62);
        op->refused_value[0] = a0 >> shift & mask;
        op->refused_value[1] = a >> shift & mask;
        return 1;
    }
    return 0;
}

static const char *kind_name(int kind) {
    return kind == OP_ALL_REDUCE       ? "all-reduce"
           : kind == OP_REDUCE_SCATTER ? "reduce-scatter"
           : kind == OP_ALL_GATHER     ? "all-gather"
                                       : "?";
}

static const char *op_name(uint64_t op) {
    switch ((acx_red_op_t)op) {
    case ACX_OP_SUM: return "sum";
    case ACX_OP_AVG: return "avg";
    case ACX_OP_PROD: return "prod";
    case ACX_OP_MAX: return "max";
    case ACX_OP_MIN: return "min";
    default: return "?";
    }
}

acx_status_t acx_shm_op_status(const acx_shm_op_t *op) {
    if (op->refused == 0) return ACX_OK;
    int q = op->refused_rank;
    uint64_t v0 = op->refused_value[0], v1 = op->refused_value[1];
    const char *k0 = kind_name(op->refused_kind[0]), *k1 = kind_name(op->refused_kind[1]);
    const char *why = "every rank must pass the same count, dtype and op; refused on every rank";
    switch (op->refused) {
    case ACX_SHM_REFUSED_KIND:
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "collective mismatch on the shared-memory path: rank 0 called %s, rank "
                         "%d called %s (every rank must call the same collectives in the same "
                         "order; refused on every rank)",
                         k0, q, k1);
    case ACX_SHM_REFUSED_DTYPE:
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "%s dtype mismatch on the shared-memory path: rank 0 passed %s, rank %d "
                         "passed %s (%s)",
                         k0, acx_dtype_name((acx_dtype_t)v0), q, acx_dtype_name((acx_dtype_t)v1),
                         why);
    case ACX_SHM_REFUSED_OP:
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "%s op mismatch on the shared-memory path: rank 0 passed %s, rank %d "
                         "passed %s (%s)",
                         k0, op_name(v0), q, op_name(v1), why);
    default:
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "%s count mismatch on the shared-memory path: rank 0 passed %llu, rank %d "
                         "passed %llu%s (%s)",
                         k0, (unsigned long long)v0, q, (unsigned long long)v1,
                         op->refused_kind[0] == OP_ALL_GATHER ? " (bytes per rank)" : "", why);
    }
}

/* Take op out of the FIFO, done. */
static void finish(acx_shm_t *s, acx_shm_op_t *op) {
    op->stage = STAGE_DONE;
    s->head = op->next;
    if (s->head == NULL) s->tail = NULL;
    op->next = NULL;
}

/* Advance the head op by one stage if it can go without waiting; 1 if it
 * moved. The first round publishes and checks the arguments around its
 * first synchronization (above). */
static int step_head(acx_shm_t *s) {
    acx_shm_op_t *op = s->head;
    if (op->off == 0 && s->check_args) {
        if (op->stage == STAGE_COPY_IN) {
            s->args_out = pack_args(op); /* with the round's first flag (publish) */
            s->args_pending = 1;
        } else if (op->stage == STAGE_WAIT_IN && !op->args_checked) {
            if (!arrived(s)) return 0;
            op->args_checked = 1;
            if (args_refused(s, op)) {
                finish(s, op);
                return 1;
            }
        }
    }
    int moved = op->kind == OP_ALL_REDUCE       ? step_all_reduce(s, op)
                : op->kind == OP_REDUCE_SCATTER ? step_reduce_scatter(s, op)
                                                : step_all_gather(s, op);
    if (moved != 2) return moved;
    /* the round is done */
    op->off += op->m;
    op->stage = STAGE_COPY_IN;
    if (op->off >= op->count) finish(s, op);
    return 1;
}

void acx_shm_progress(acx_shm_t *s) {
    while (s->head != NULL && step_head(s)) {
    }
}

/* Fill op and queue it behind the ops started before it; advance. */
static void start(acx_shm_t *s, acx_shm_op_t *op, int kind, const void *sendbuf, void *recvbuf,
                  size_t count, acx_dtype_t dtype, acx_red_op_t rop, size_t esize, void *owner) {
    *op = (acx_shm_op_t){.kind = kind,
                         .sendbuf = sendbuf,
                         .recvbuf = recvbuf,
                         .count = count,
                         .dtype = dtype,
                         .op = rop,
                         .esize = esize,
                         .stage = count > 0 ? STAGE_COPY_IN : STAGE_DONE,
                         .owner = owner};
    if (count == 0) return;
    if (s->tail != NULL)
        s->tail->next = op;
    else
        s->head = op;
    s->tail = op;
    acx_shm_progress(s);
}

void acx_shm_all_reduce_start(acx_shm_t *s, acx_shm_op_t *op, const void *sendbuf, void *recvbuf,
                              size_t count, acx_dtype_t dtype, acx_red_op_t rop, void *owner) {
    start(s, op, OP_ALL_REDUCE, sendbuf, recvbuf, count, dtype, rop, acx_dtype_size(dtype), owner);
}

void acx_shm_reduce_scatter_start(acx_shm_t *s, acx_shm_op_t *op, const void *sendbuf,
                                  void *recvbuf, size_t count, acx_dtype_t dtype, acx_red_op_t rop,
                                  void *owner) {
    start(s, op, OP_REDUCE_SCATTER, sendbuf, recvbuf, count, dtype, rop, acx_dtype_size(dtype),
          owner);
}

void acx_shm_all_gather_start(acx_shm_t *s, acx_shm_op_t *op, const void *sendbuf, void *recvbuf,
                              size_t count, size_t esize, void *owner) {
    /* bytes: count elements of esize per rank */
    start(s, op, OP_ALL_GATHER, sendbuf, recvbuf, count * esize, ACX_DTYPE_UINT8, ACX_OP_SUM, 1,
          owner);
}

int acx_shm_test(acx_shm_t *s, acx_shm_op_t *op) {
    acx_shm_progress(s);
    return op->stage == STAGE_DONE;
}

void acx_shm_wait(acx_shm_t *s, acx_shm_op_t *op, void (*progress)(void)) {
    unsigned spins = s->yield_at_once ? SPINS_BEFORE_YIELD : 0;
    while (op->stage != STAGE_DONE) {
        int moved = 0;
        while (s->head != NULL && step_head(s))
            moved = 1;
        if (op->stage == STAGE_DONE) return;
        if (moved && !s->yield_at_once) spins = 0; /* busy with data: spin again before yielding */
        if (++spins < SPINS_BEFORE_YIELD) {
            cpu_relax();
            continue;
        }
        sched_yield();
        if ((spins - SPINS_BEFORE_YIELD) % YIELDS_PER_PROGRESS == 0) {
            int flag = 0;
            (void)MPI_Iprobe(MPI_ANY_SOURCE, PROGRESS_TAG, s->comm, &flag, MPI_STATUS_IGNORE);
            if (progress != NULL) progress();
        }
    }
}

acx_shm_op_t *acx_shm_pending(const acx_shm_t *s) { return s ? s->head : NULL; }

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
 * so after phase n every flag reads n.
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

#include "collectives/mpi/coll_mpi_shm.h"
#include "runtime/base/error.h"
#include "runtime/base/log.h"

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2,
               "the shared-memory flags need lock-free 64-bit atomics (other processes read them)");

#define FLAG_BYTES 128
#define SEGMENT_ALIGN ((size_t)4096)
/* Pause-loop iterations before a waiting rank starts yielding the CPU, and
 * yields between two MPI progress calls. */
#define SPINS_BEFORE_YIELD 2048u
#define YIELDS_PER_PROGRESS 16u
/* A tag no acx code sends with: MPI_Iprobe on it never matches, it only
 * runs the MPI library's progress engine. (MPI_TAG_UB is at least 32767.) */
#define PROGRESS_TAG 32766

typedef struct flag {
    _Alignas(FLAG_BYTES) _Atomic uint64_t phase;
} flag_t;
_Static_assert(sizeof(flag_t) == FLAG_BYTES, "one flag per 128 bytes");

struct acx_shm {
    MPI_Comm comm; /* not owned: the communicator this segment serves (progress probes) */
    int rank, size;
    size_t slot_bytes, min_bytes;
    int yield_at_once; /* more ranks on the node than online CPUs */
    char *base;        /* the mapping, segment_bytes long */
    size_t segment_bytes;
    flag_t *flags; /* [size], at base */
    char *data;    /* [size][2][slot_bytes] */
    uint64_t phase; /* phases this rank has finished (= its flag) */
    int set;        /* slot set of the next round */
    int round_set;  /* slot set of the round in progress */
    int scan;       /* flags below this index have reached phase (arrived()) */
    const char **src; /* [size] scratch: the round's slots */
    acx_shm_op_t *head, *tail; /* ops started and not done, oldest first */
};

/* ---- creation ---- */

/* What node rank 0 decides and broadcasts, so every rank agrees. */
enum { SHM_USE = 0, SHM_OFF, SHM_FAILED, SHM_BAD_ENV };
typedef struct shm_plan {
    int verdict;
    unsigned long long slot_bytes, min_bytes, segment_bytes;
    char name[64];     /* the POSIX shared-memory object (SHM_USE) */
    char message[256]; /* why not (SHM_FAILED, SHM_BAD_ENV) */
} shm_plan_t;

/* Parse ACX_SHM_<key> as a byte count; 0 when absent. -1 (with plan->message
 * set) when malformed. */
static int env_bytes(const char *key, unsigned long long lo, unsigned long long *v_p,
                     shm_plan_t *plan) {
    char name[48];
    snprintf(name, sizeof name, "ACX_SHM_%s", key);
    const char *s = getenv(name);
    if (s == NULL || s[0] == '\0') return 0;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || s[0] == '-' || v < lo ||
        v > (unsigned long long)1 << 40 ||
        (lo == 64 && v % 64 != 0)) { /* the slot: whole cache lines keep blocks aligned */
        snprintf(plan->message, sizeof plan->message,
                 "%s=%s: expected a byte count%s, from %llu to 2^40", name, s,
                 lo == 64 ? " that is a multiple of 64" : "", lo);
        return -1;
    }
    *v_p = v;
    return 1;
}

/* Node rank 0: read the environment, create, size and map the object. On
 * SHM_USE the mapping is returned in *base_p. */
static void plan_segment(int size, shm_plan_t *plan, char **base_p) {
    memset(plan, 0, sizeof *plan);
    const char *off = getenv("ACX_SHM_DISABLE");
    if (off != NULL && strcmp(off, "1") == 0) {
        plan->verdict = SHM_OFF;
        return;
    }
    if (off != NULL && off[0] != '\0' && strcmp(off, "0") != 0) {
        plan->verdict = SHM_BAD_ENV;
        snprintf(plan->message, sizeof plan->message, "ACX_SHM_DISABLE=%s: expected 1 or 0", off);
        return;
    }
    size_t slot = ACX_SHM_SLOT_BYTES_MAX;
    while (slot > ACX_SHM_SLOT_BYTES_MIN_DEFAULT && slot * (size_t)size > ACX_SHM_SEGMENT_BUDGET)
        slot /= 2;
    plan->slot_bytes = slot;
    plan->min_bytes = ACX_SHM_MIN_BYTES_DEFAULT;
    if (env_bytes("SLOT_BYTES", 64, &plan->slot_bytes, plan) < 0 ||
        env_bytes("MIN_BYTES", 0, &plan->min_bytes, plan) < 0) {
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
    if (fd < 0)
        return ACX_ERROR(ACX_ERR_SYSTEM, "shm_open(%s): %s", plan->name, strerror(errno));
    size_t mine = 2 * (size_t)plan->slot_bytes;
    size_t data = (size_t)plan->segment_bytes - (size_t)size * mine;
    size_t first = data + (size_t)rank * mine;
    int err = posix_fallocate(fd, rank == 0 ? 0 : (off_t)first,
                              (off_t)(rank == 0 ? first + mine : mine));
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
            ACX_INFO(ACX_SUBSYS_COLL, "ACX_SHM_DISABLE is set: all-reduce goes through MPI only");
        return ACX_OK;
    }
    if (plan.verdict == SHM_FAILED) {
        if (rank == 0)
            ACX_INFO(ACX_SUBSYS_COLL,
                     "no shared-memory all-reduce (%s): all-reduce goes through MPI only",
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
                     .base = base,
                     .segment_bytes = (size_t)plan.segment_bytes,
                     .flags = (flag_t *)(void *)base,
                     .src = src};
    s->data = base + (s->segment_bytes - (size_t)size * 2 * s->slot_bytes);
    if (rank == 0)
        ACX_LOG(ACX_LOG_DEBUG, ACX_SUBSYS_COLL,
                "shared-memory all-reduce: %d ranks on this node, %zu-byte slots, %zu-byte "
                "segment, from %zu bytes%s",
                size, s->slot_bytes, s->segment_bytes, s->min_bytes,
                s->yield_at_once ? "; more ranks than CPUs: waits yield at once" : "");
    *shm_p = s;
    return ACX_OK;
}

void acx_shm_free(acx_shm_t *s) {
    if (s == NULL) return;
    if (s->base != NULL) munmap(s->base, s->segment_bytes);
    free(s->src);
    free(s);
}

/* ---- the all-reduce ---- */

int acx_shm_all_reduce_ok(const acx_shm_t *s, size_t count, acx_dtype_t dtype, acx_red_op_t op) {
    if (s == NULL || op != ACX_OP_SUM) return 0;
    switch (dtype) {
    case ACX_DTYPE_FLOAT32:
    case ACX_DTYPE_FLOAT64:
    case ACX_DTYPE_INT32:
    case ACX_DTYPE_INT64: break;
    default: return 0;
    }
    return count > 0 && count * acx_dtype_size(dtype) >= s->min_bytes;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static void publish(acx_shm_t *s) {
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

/* out[0..n) = src[0][first..] + src[1][first..] + ... (nsrc >= 2 slots), in
 * rank order. Integers add as unsigned: two's-complement wrap-around, like
 * MPI_SUM, without signed overflow. */
#define DEFINE_SUM(name, T)                                                                        \
    static void name(void *out_, const char *const *src, int nsrc, size_t first, size_t n) {      \
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

typedef void (*sum_fn)(void *out, const char *const *src, int nsrc, size_t first, size_t n);

static sum_fn sum_for(acx_dtype_t dtype) {
    switch (dtype) {
    case ACX_DTYPE_FLOAT32: return sum_f32;
    case ACX_DTYPE_FLOAT64: return sum_f64;
    case ACX_DTYPE_INT32: return sum_u32;
    default: return sum_u64; /* ACX_DTYPE_INT64: acx_shm_all_reduce_ok admits nothing else */
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

/* Where the head op's current round is. */
enum {
    STAGE_COPY_IN = 0, /* the round has not begun */
    STAGE_WAIT_IN,     /* copied in and published; waiting for every rank's copy */
    STAGE_WAIT_REDUCED, /* block reduced and published; waiting for every rank's block */
    STAGE_DONE
};

/* Advance the head op by one stage if it can go without waiting; 1 if it
 * moved. */
static int step_head(acx_shm_t *s) {
    acx_shm_op_t *op = s->head;
    size_t esize = acx_dtype_size(op->dtype);
    char *mine = slot(s, s->rank, s->round_set);
    char *out = (char *)op->recvbuf + op->off * esize;
    size_t lo, hi;
    switch (op->stage) {
    case STAGE_COPY_IN: {
        size_t per_round = s->slot_bytes / esize;
        op->m = op->count - op->off < per_round ? op->count - op->off : per_round;
        s->round_set = s->set;
        s->set ^= 1;
        for (int j = 0; j < s->size; j++)
            s->src[j] = slot(s, j, s->round_set);
        mine = slot(s, s->rank, s->round_set);
        const char *in = (const char *)op->sendbuf + op->off * esize;
        if (op->m * esize <= ACX_SHM_DIRECT_BYTES) {
            memcpy(mine, in, op->m * esize);
        } else { /* the others read every block but this rank's, which it reads from sendbuf */
            block_of(s, op->m, esize, s->rank, &lo, &hi);
            memcpy(mine, in, lo * esize);
            memcpy(mine + hi * esize, in + hi * esize, (op->m - hi) * esize);
        }
        publish(s);
        op->stage = STAGE_WAIT_IN;
        return 1;
    }
    case STAGE_WAIT_IN:
        if (!arrived(s)) return 0;
        if (op->m * esize <= ACX_SHM_DIRECT_BYTES) { /* every rank sums the whole round */
            sum_for(op->dtype)(out, s->src, s->size, 0, op->m);
            break;
        }
        /* This rank's block: summed into its slot (where the others read it
         * next) with its own part read from sendbuf, then copied out. */
        block_of(s, op->m, esize, s->rank, &lo, &hi);
        if (hi > lo) {
            s->src[s->rank] = (const char *)op->sendbuf + op->off * esize;
            sum_for(op->dtype)(mine + lo * esize, s->src, s->size, lo, hi - lo);
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
        break;
    default: return 0;
    }
    /* the round is done */
    op->off += op->m;
    op->stage = STAGE_COPY_IN;
    if (op->off >= op->count) {
        op->stage = STAGE_DONE;
        s->head = op->next;
        if (s->head == NULL) s->tail = NULL;
        op->next = NULL;
    }
    return 1;
}

void acx_shm_progress(acx_shm_t *s) {
    while (s->head != NULL && step_head(s)) {
    }
}

void acx_shm_all_reduce_start(acx_shm_t *s, acx_shm_op_t *op, const void *sendbuf, void *recvbuf,
                              size_t count, acx_dtype_t dtype, void *owner) {
    *op = (acx_shm_op_t){.sendbuf = sendbuf,
                         .recvbuf = recvbuf,
                         .count = count,
                         .dtype = dtype,
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

/*
 * collectives/watchdog.c — the stall detector: the per-node table of what
 * each rank is doing, the enter/exit bookkeeping, and the thread that turns
 * a collective stuck past collective_timeout into a diagnostic and an exit.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "collectives/coll.h"
#include "collectives/watchdog.h"
#include "base/error.h"
#include "base/settings.h"

#define OP_NAME_MAX 24
#define WD_HOST_MAX 64 /* a host name as the rank gave it, with its '\0' */

/* One rank's row in the node table, written only by that rank's main
 * thread; a cache line of its own so ranks never contend for one. The hot
 * path (enter/exit, on every collective) is relaxed stores plus one release
 * store of `inside`, which the readers acquire: a reader that sees
 * inside == 1 sees the op, step and time of that entry. */
typedef struct slot {
    _Alignas(64) _Atomic uint64_t seq; /* outermost collectives entered so far */
    _Atomic int inside;                /* 1 while in one */
    _Atomic int64_t t_enter;           /* coarse monotonic ns at entry (or at the last exit) */
    _Atomic int64_t step;              /* training step at entry */
    _Atomic int64_t limit_ns;          /* the limit of the watch in progress */
    _Atomic int64_t heartbeat;         /* coarse monotonic ns, stamped by the rank's thread */
    _Atomic int64_t stopped_ns;        /* its last pause without heartbeat (stopped, continued) */
    _Atomic int64_t resumed_at;        /* ... which ended then (coarse monotonic ns) */
    _Atomic int ended;                 /* its stall detector is ending it */
    int world_rank;
    char op[OP_NAME_MAX]; /* the op's name (no pointers: other processes read it) */
} slot_t;

static struct {
    int started;
    double timeout_s, io_timeout_s;
    int64_t timeout_ns, io_timeout_ns;
    int64_t stale_ns; /* a heartbeat older than this: the rank is not running */
    int world_size;
    const volatile int64_t *step_p;
    int world_rank;
    char host[WD_HOST_MAX];
    char *hosts;   /* [world size][WD_HOST_MAX]: every rank's host, gathered at start */
    MPI_Comm node; /* shared-memory communicator */
    MPI_Win win;
    slot_t *table; /* [node size] */
    int node_size, node_rank;
    int depth; /* nesting of enter/exit on the main thread */
    pthread_t thread;
    /* The thread waits on cv (CLOCK_MONOTONIC) between checks, so that
     * acx_watchdog_stop wakes it at once instead of after a period. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop; /* under mu */
} wd = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* The coarse clock (the last tick, a few ms resolution) costs a few ns
 * where CLOCK_MONOTONIC costs ~35: plenty for timeouts of seconds. */
static int64_t now_ns(void) {
    struct timespec ts;
#ifdef CLOCK_MONOTONIC_COARSE
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
#else
    clock_gettime(CLOCK_MONOTONIC, &ts);
#endif
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- main thread ---- */

/* The outermost watch is timed from its entry; a nested one with a longer
 * limit extends the limit in force (a checkpoint load inside acx_prepare
 * may take the checkpoint's limit). */
static void enter(const char *op, int64_t limit_ns) {
    if (!wd.started) return;
    slot_t *me = &wd.table[wd.node_rank];
    if (wd.depth++ > 0) {
        if (limit_ns > atomic_load_explicit(&me->limit_ns, memory_order_relaxed))
            atomic_store_explicit(&me->limit_ns, limit_ns, memory_order_relaxed);
        return;
    }
    size_t n = strlen(op); /* short static names: a few ns, unlike snprintf */
    if (n >= OP_NAME_MAX) n = OP_NAME_MAX - 1;
    memcpy(me->op, op, n);
    me->op[n] = '\0';
    atomic_store_explicit(&me->step, wd.step_p ? *wd.step_p : -1, memory_order_relaxed);
    atomic_store_explicit(&me->limit_ns, limit_ns, memory_order_relaxed);
    atomic_store_explicit(&me->t_enter, now_ns(), memory_order_relaxed);
    atomic_store_explicit(&me->seq, atomic_load_explicit(&me->seq, memory_order_relaxed) + 1,
                          memory_order_relaxed);
    atomic_store_explicit(&me->inside, 1, memory_order_release);
}

void acx_watch_enter(const char *op) { enter(op, wd.timeout_ns); }

void acx_watch_enter_io(const char *op) { enter(op, wd.io_timeout_ns); }

void acx_watch_exit(void) {
    if (!wd.started || wd.depth == 0 || --wd.depth > 0) return;
    slot_t *me = &wd.table[wd.node_rank];
    atomic_store_explicit(&me->t_enter, now_ns(), memory_order_relaxed);
    atomic_store_explicit(&me->inside, 0, memory_order_release);
}

/* ---- the thread ---- */

/* Write "a-b on HOST, c on HOST2, ..." for the world ranks not in this
 * node's table to buf (at most n bytes): runs of consecutive ranks on one
 * host, each with the host its rank reported at start — so a line from a
 * node whose peers are dead or cut off names the node that is. */
static void format_other_ranks(char *buf, size_t n) {
    size_t len = 0;
    int count = 0;
    buf[0] = '\0';
    for (int r = 0; r < wd.world_size; r++) {
        int here = 0;
        for (int i = 0; i < wd.node_size && !here; i++)
            here = wd.table[i].world_rank == r;
        if (here) continue;
        const char *host = wd.hosts + (size_t)r * WD_HOST_MAX;
        int hi = r; /* a run r..hi of ranks elsewhere, on one host */
        for (;;) {
            int next_here = hi + 1 >= wd.world_size ||
                            strcmp(wd.hosts + (size_t)(hi + 1) * WD_HOST_MAX, host) != 0;
            for (int i = 0; i < wd.node_size && !next_here; i++)
                next_here = wd.table[i].world_rank == hi + 1;
            if (next_here) break;
            hi++;
        }
        if (len + WD_HOST_MAX + 40 >= n) { /* room for "..." */
            snprintf(buf + len, n - len, ", ...");
            return;
        }
        if (hi > r)
            len += (size_t)snprintf(buf + len, n - len, "%s%d-%d on %s", count ? ", " : "", r, hi,
                                    host);
        else
            len += (size_t)snprintf(buf + len, n - len, "%s%d on %s", count ? ", " : "", r, host);
        count++;
        r = hi;
    }
}

/* Append to line (size bytes, *len used) and keep *len within it: snprintf
 * returns the length it wanted, and a len past size would make the next
 * append's size_t room wrap and write past the buffer. */
static void append(char *line, size_t size, int *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void append(char *line, size_t size, int *len, const char *fmt, ...) {
    if ((size_t)*len + 1 >= size) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line + *len, size - (size_t)*len, fmt, ap);
    va_end(ap);
    if (n > 0) *len = (size_t)*len + (size_t)n < size ? *len + n : (int)size - 1;
}

/*
 * One line, printed once, then the process ends: the launcher sees a rank
 * fail and ends the others. Every other rank of the node is described by
 * its row: NOT RESPONDING when its watchdog thread has stamped no
 * heartbeat for a while (the process is stopped or dead — whatever its row
 * says it was doing, it is not doing it), else arrived (in this
 * collective), in another one, or NOT ARRIVED. When no rank of the node is
 * holding this one up, the line says where the missing ones are: on other
 * nodes (named), or — when the node is the whole job and every rank is in
 * the collective and alive — nowhere, and why it can still hang.
 */
static void report_and_exit(const slot_t *me, double waited, int64_t limit_ns) {
    char line[6144];
    /* the rows and the note about other nodes stop short of the last
     * TAIL_ROOM bytes, kept for the closing words and the newline */
    enum { TAIL_ROOM = 128 };
    const size_t body = sizeof line - TAIL_ROOM;
    uint64_t seq = atomic_load(&me->seq);
    int64_t now = now_ns();
    const char *limit_name = limit_ns == wd.io_timeout_ns && limit_ns != wd.timeout_ns
                                 ? "checkpoint.timeout"
                                 : "collective_timeout";
    int len = 0;
    append(line, body, &len,
           "acx: rank %d (%s): collective %s #%llu (step %lld) has not completed after "
           "%.3g s (%s %g s); ranks on this node:",
           wd.world_rank, wd.host, me->op, (unsigned long long)seq,
           (long long)atomic_load(&me->step), waited, limit_name, (double)limit_ns / 1e9);
    int named = 0, ended = 0;
    for (int i = 0; i < wd.node_size && len < (int)sizeof line - 400; i++) {
        const slot_t *s = &wd.table[i];
        if (i == wd.node_rank) continue;
        uint64_t sseq = atomic_load(&s->seq);
        int in = atomic_load_explicit(&s->inside, memory_order_acquire);
        char sop[OP_NAME_MAX];
        memcpy(sop, s->op, sizeof sop);
        sop[OP_NAME_MAX - 1] = '\0';
        double ago = (double)(now - atomic_load(&s->t_enter)) / 1e9;
        double silent = (double)(now - atomic_load(&s->heartbeat)) / 1e9;
        char where[96], buf[256];
        const char *what;
        if (in)
            snprintf(where, sizeof where, "in %s #%llu", sop, (unsigned long long)sseq);
        else
            snprintf(where, sizeof where, "outside any collective, after #%llu",
                     (unsigned long long)sseq);
        if (atomic_load(&s->ended)) {
            snprintf(buf, sizeof buf, "ENDED by its own stall detector (last seen %s)", where);
            what = buf;
            ended++;
        } else if (now - atomic_load(&s->heartbeat) > wd.stale_ns) {
            snprintf(buf, sizeof buf,
                     "NOT RESPONDING (stopped or dead: no heartbeat for %.0f s; last seen %s)",
                     silent, where);
            what = buf;
            named++;
        } else if (in && sseq == seq && strcmp(sop, me->op) == 0) {
            what = "arrived";
            if (atomic_load(&s->stopped_ns) > 0 && now - atomic_load(&s->resumed_at) < limit_ns) {
                snprintf(buf, sizeof buf,
                         "arrived, but was STOPPED for %.0f s (no heartbeat) until just now",
                         (double)atomic_load(&s->stopped_ns) / 1e9);
                what = buf;
                named++;
            }
        } else if (in && sseq == seq) {
            snprintf(buf, sizeof buf, "in a different collective, %s #%llu", sop,
                     (unsigned long long)sseq);
            what = buf;
            named++;
        } else if (in) {
            snprintf(buf, sizeof buf, "in %s #%llu for %.0f s", sop, (unsigned long long)sseq, ago);
            what = buf;
            named++;
        } else {
            snprintf(buf, sizeof buf,
                     "NOT ARRIVED (outside any collective for %.0f s, after #%llu)", ago,
                     (unsigned long long)sseq);
            what = buf;
            named++;
        }
        append(line, body, &len, " rank %d %s;", s->world_rank, what);
    }
    /* (a rank already ended by its detector named the culprits in its own line) */
    if (named == 0 && ended == 0 && len < (int)sizeof line - 400) {
        if (wd.node_size < wd.world_size) {
            char others[1024];
            format_other_ranks(others, sizeof others);
            append(line, body, &len,
                   " every rank of this node has arrived and is alive: the ranks holding "
                   "it up are on other nodes, among world ranks %s (a line from their "
                   "node's own stall detector says which; none from a node: it is dead "
                   "or unreachable);",
                   others);
        } else {
            append(line, body, &len,
                   " every rank of the job has arrived and is alive, so no rank can be "
                   "named: the collective itself is not completing (ranks calling "
                   "different collectives or counts, or an MPI or network failure);");
        }
    }
    append(line, sizeof line, &len, " ending the job (raise %s if this is legitimately slow)\n",
           limit_name);
    (void)!write(STDERR_FILENO, line, strlen(line));
    atomic_store(&wd.table[wd.node_rank].ended, 1); /* the others' lines say why it is gone */
    acx_coll_abort_all(); /* NCCL kernels waiting for a stuck peer end with the process */
    _exit(ACX_EXIT_STALL);
}

/* Wait one period on wd.cv, or less when acx_watchdog_stop signals it.
 * Returns 1 when the thread is to end. */
static int wait_period(int64_t period_ns) {
    struct timespec due;
    clock_gettime(CLOCK_MONOTONIC, &due);
    int64_t ns = (int64_t)due.tv_nsec + period_ns;
    due.tv_sec += (time_t)(ns / 1000000000);
    due.tv_nsec = (long)(ns % 1000000000);
    pthread_mutex_lock(&wd.mu);
    int err = 0;
    while (!wd.stop && err != ETIMEDOUT)
        err = pthread_cond_timedwait(&wd.cv, &wd.mu, &due);
    int stop = wd.stop;
    pthread_mutex_unlock(&wd.mu);
    return stop;
}

static void *watch_loop(void *arg) {
    (void)arg;
    /* check about 10 times per timeout, at most twice a second */
    double period = wd.timeout_s / 10.0;
    if (period > 0.5) period = 0.5;
    if (period < 0.01) period = 0.01;
    int64_t period_ns = (int64_t)(period * 1e9);
    slot_t *me = &wd.table[wd.node_rank];
    int64_t quiet_until = 0;
    while (!wait_period(period_ns)) {
        int64_t now = now_ns(), last = atomic_load_explicit(&me->heartbeat, memory_order_relaxed);
        atomic_store_explicit(&me->heartbeat, now, memory_order_relaxed); /* alive */
        /* This process itself was stopped (SIGSTOP, a suspended job) and
         * has just been continued: what it waits for may complete now, or
         * it is being torn down. Judge again only after a full limit. */
        if (now - last > wd.stale_ns) {
            quiet_until = now + atomic_load(&me->limit_ns);
            atomic_store(&me->stopped_ns, now - last);
            atomic_store(&me->resumed_at, now);
        }
        if (now < quiet_until || !atomic_load(&me->inside)) continue;
        int64_t waited = now - atomic_load(&me->t_enter), limit = atomic_load(&me->limit_ns);
        if (waited > limit && atomic_load(&me->inside))
            report_and_exit(me, (double)waited / 1e9, limit);
    }
    return NULL;
}

/* ---- lifecycle ---- */

acx_status_t acx_watchdog_start(double timeout_s, double io_timeout_s, int world_rank,
                                const char *host, const volatile int64_t *step_p) {
    if (wd.started) return ACX_ERROR(ACX_ERR_STATE, "the stall detector is already running");
    acx_status_t status = ACX_OK;
    /* ACX_TEST_WATCHDOG_NODE_RANKS=k (the test suite's): tables of k
     * consecutive ranks, as if the node held only them (still one real node,
     * so the window can be shared) — how stall_stopped.test gets a
     * "other nodes" line from one machine */
    int64_t k = 0;
    if (acx_env_int(ACX_ENV_TEST_WATCHDOG_NODE_RANKS, &k) != 1) k = 0;
    if (k > 0)
        ACX_MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, (int)(world_rank / k), world_rank, &wd.node));
    else
        ACX_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank,
                                          MPI_INFO_NULL, &wd.node));
    MPI_Comm_rank(wd.node, &wd.node_rank);
    MPI_Comm_size(wd.node, &wd.node_size);
    slot_t *mine = NULL;
    ACX_MPI_CHECK_GOTO(MPI_Win_allocate_shared((MPI_Aint)sizeof(slot_t), (int)sizeof(slot_t),
                                               MPI_INFO_NULL, wd.node, &mine, &wd.win),
                       status, err_comm);
    MPI_Aint size;
    int disp;
    ACX_MPI_CHECK_GOTO(MPI_Win_shared_query(wd.win, 0, &size, &disp, &wd.table), status, err_win);
    memset(mine, 0, sizeof *mine);
    mine->world_rank = world_rank;
    strcpy(mine->op, "none");
    atomic_store(&mine->t_enter, now_ns());
    atomic_store(&mine->heartbeat, now_ns());
    ACX_MPI_CHECK_GOTO(MPI_Barrier(wd.node), status, err_win); /* every row initialized */
    MPI_Comm_size(MPI_COMM_WORLD, &wd.world_size);
    /* Every rank's host, for the line about ranks on other nodes: the
     * table shows only this node, and when another node is dead or cut
     * off, its own detector's line never arrives — this one must say which
     * node that is. 64 bytes a rank, once. */
    snprintf(wd.host, sizeof wd.host, "%s", host ? host : "?");
    wd.hosts = malloc((size_t)wd.world_size * WD_HOST_MAX);
    /* ACX_TEST_WATCHDOG_NO_TABLE_RANK=r (the test suite's): rank r acts as
     * if that allocation failed (stall.test) */
    int64_t no_table_rank = -1;
    if (acx_env_int(ACX_ENV_TEST_WATCHDOG_NO_TABLE_RANK, &no_table_rank) == 1 &&
        no_table_rank == world_rank) {
        free(wd.hosts);
        wd.hosts = NULL;
    }
    /* Agreed before the all-gather: a rank that skipped it alone would
     * leave the others in it for ever, with no detector yet to end them.
     * Every rank returns the same error, naming the lowest rank that could
     * not allocate. */
    int no_table = wd.hosts == NULL ? world_rank : INT_MAX, failed = INT_MAX;
    ACX_MPI_CHECK_GOTO(MPI_Allreduce(&no_table, &failed, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD),
                       status, err_win);
    if (failed != INT_MAX) {
        status = ACX_ERROR(ACX_ERR_NO_MEMORY,
                           "the stall detector's table of %d host names (%zu bytes) could not be "
                           "allocated on rank %d",
                           wd.world_size, (size_t)wd.world_size * WD_HOST_MAX, failed);
        goto err_win;
    }
    ACX_MPI_CHECK_GOTO(MPI_Allgather(wd.host, WD_HOST_MAX, MPI_CHAR, wd.hosts, WD_HOST_MAX,
                                     MPI_CHAR, MPI_COMM_WORLD),
                       status, err_win);
    wd.timeout_s = timeout_s;
    wd.io_timeout_s = io_timeout_s > 0 ? io_timeout_s : timeout_s;
    wd.timeout_ns = (int64_t)(timeout_s * 1e9);
    wd.io_timeout_ns = (int64_t)(wd.io_timeout_s * 1e9);
    /* A live thread stamps every period (below); one silent for 4 periods,
     * and at least a second (a loaded node delays threads), is not running.
     * Kept under the timeout, so a rank stopped when the others began to
     * wait is always seen as such. */
    double period = timeout_s / 10.0 > 0.5    ? 0.5
                    : timeout_s / 10.0 < 0.01 ? 0.01
                                              : timeout_s / 10.0;
    double stale = 4 * period > 1.0 ? 4 * period : 1.0;
    if (stale > timeout_s / 2) stale = timeout_s / 2;
    wd.stale_ns = (int64_t)(stale * 1e9);
    wd.step_p = step_p;
    wd.world_rank = world_rank;
    wd.depth = 0;
    wd.stop = 0;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int err = pthread_cond_init(&wd.cv, &ca);
    pthread_condattr_destroy(&ca);
    if (err != 0) {
        status =
            ACX_ERROR(ACX_ERR_SYSTEM, "cannot start the stall detector thread: %s", strerror(err));
        goto err_win;
    }
    err = pthread_create(&wd.thread, NULL, watch_loop, NULL);
    if (err != 0) {
        pthread_cond_destroy(&wd.cv);
        status =
            ACX_ERROR(ACX_ERR_SYSTEM, "cannot start the stall detector thread: %s", strerror(err));
        goto err_win;
    }
    wd.started = 1;
    return ACX_OK;
err_win:
    free(wd.hosts);
    wd.hosts = NULL;
    MPI_Win_free(&wd.win);
err_comm:
    MPI_Comm_free(&wd.node);
    return status;
}

void acx_watchdog_stop(void) {
    if (!wd.started) return;
    pthread_mutex_lock(&wd.mu);
    wd.stop = 1;
    pthread_cond_signal(&wd.cv);
    pthread_mutex_unlock(&wd.mu);
    pthread_join(wd.thread, NULL); /* at once: the signal ends its wait */
    pthread_cond_destroy(&wd.cv);
    wd.started = 0;
    MPI_Win_free(&wd.win);
    MPI_Comm_free(&wd.node);
    wd.table = NULL;
    free(wd.hosts);
    wd.hosts = NULL;
}

/* ---- the deadline: waits after the table is gone ---- */

/* One plain timer thread, no table and no MPI: a condition variable on
 * CLOCK_MONOTONIC that either acx_deadline_stop signals or that times out,
 * printing the step that did not complete and ending the process. */
static struct {
    int started;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    struct timespec due;
    double limit_s;
    const char *what;           /* "acx_finalize" */
    _Atomic(const char *) step; /* static string: where the caller is */
    int world_rank;
    char host[64];
} dl = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void *deadline_loop(void *arg) {
    (void)arg;
    pthread_mutex_lock(&dl.mu);
    int err = 0;
    while (!dl.stop && err != ETIMEDOUT)
        err = pthread_cond_timedwait(&dl.cv, &dl.mu, &dl.due);
    int expired = !dl.stop;
    pthread_mutex_unlock(&dl.mu);
    if (!expired) return NULL;
    char line[1024];
    snprintf(line, sizeof line,
             "acx: rank %d (%s): %s: %s has not completed after %g s (collective_timeout): a rank "
             "of the job did not reach it (stopped or dead); which one cannot be told at this "
             "step, where the stall detector's table is being freed or gone (a rank stopped "
             "earlier is named by the detector's own line); ending the process\n",
             dl.world_rank, dl.host, dl.what, atomic_load(&dl.step), dl.limit_s);
    (void)!write(STDERR_FILENO, line, strlen(line));
    _exit(ACX_EXIT_STALL);
}

acx_status_t acx_deadline_start(double limit_s, const char *what, const char *step, int world_rank,
                                const char *host) {
    if (dl.started) return ACX_ERROR(ACX_ERR_STATE, "a deadline is already running");
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int err = pthread_cond_init(&dl.cv, &ca);
    pthread_condattr_destroy(&ca);
    if (err != 0)
        return ACX_ERROR(ACX_ERR_SYSTEM, "cannot start the %s deadline: %s", what, strerror(err));
    clock_gettime(CLOCK_MONOTONIC, &dl.due);
    dl.due.tv_sec += (time_t)limit_s;
    dl.due.tv_nsec += (long)((limit_s - (double)(time_t)limit_s) * 1e9);
    if (dl.due.tv_nsec >= 1000000000L) {
        dl.due.tv_sec++;
        dl.due.tv_nsec -= 1000000000L;
    }
    dl.stop = 0;
    dl.limit_s = limit_s;
    dl.what = what;
    atomic_store(&dl.step, step);
    dl.world_rank = world_rank;
    snprintf(dl.host, sizeof dl.host, "%s", host ? host : "?");
    err = pthread_create(&dl.thread, NULL, deadline_loop, NULL);
    if (err != 0) {
        pthread_cond_destroy(&dl.cv);
        return ACX_ERROR(ACX_ERR_SYSTEM, "cannot start the %s deadline: %s", what, strerror(err));
    }
    dl.started = 1;
    return ACX_OK;
}

void acx_deadline_step(const char *step) {
    if (dl.started) atomic_store(&dl.step, step);
}

void acx_deadline_stop(void) {
    if (!dl.started) return;
    pthread_mutex_lock(&dl.mu);
    dl.stop = 1;
    pthread_cond_signal(&dl.cv);
    pthread_mutex_unlock(&dl.mu);
    pthread_join(dl.thread, NULL);
    pthread_cond_destroy(&dl.cv);
    dl.started = 0;
}

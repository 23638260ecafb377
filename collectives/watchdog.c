/*
 * collectives/watchdog.c — the stall detector: the per-node table of what
 * each rank is doing, the enter/exit bookkeeping, and the thread that turns
 * a collective stuck past collective_timeout into a diagnostic and an exit.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "collectives/coll.h"
#include "collectives/watchdog.h"
#include "runtime/base/error.h"

#define OP_NAME_MAX 24

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
    int world_rank;
    char op[OP_NAME_MAX];              /* the op's name (no pointers: other processes read it) */
} slot_t;

static struct {
    int started;
    double timeout_s;
    const volatile int64_t *step_p;
    int world_rank;
    char host[64];
    MPI_Comm node;  /* shared-memory communicator */
    MPI_Win win;
    slot_t *table;  /* [node size] */
    int node_size, node_rank;
    int depth;      /* nesting of enter/exit on the main thread */
    pthread_t thread;
    _Atomic int stop;
} wd;

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

void acx_watch_enter(const char *op) {
    if (!wd.started || wd.depth++ > 0) return;
    slot_t *me = &wd.table[wd.node_rank];
    size_t n = strlen(op); /* short static names: a few ns, unlike snprintf */
    if (n >= OP_NAME_MAX) n = OP_NAME_MAX - 1;
    memcpy(me->op, op, n);
    me->op[n] = '\0';
    atomic_store_explicit(&me->step, wd.step_p ? *wd.step_p : -1, memory_order_relaxed);
    atomic_store_explicit(&me->t_enter, now_ns(), memory_order_relaxed);
    atomic_store_explicit(&me->seq, atomic_load_explicit(&me->seq, memory_order_relaxed) + 1,
                          memory_order_relaxed);
    atomic_store_explicit(&me->inside, 1, memory_order_release);
}

void acx_watch_exit(void) {
    if (!wd.started || wd.depth == 0 || --wd.depth > 0) return;
    slot_t *me = &wd.table[wd.node_rank];
    atomic_store_explicit(&me->t_enter, now_ns(), memory_order_relaxed);
    atomic_store_explicit(&me->inside, 0, memory_order_release);
}

/* ---- the thread ---- */

/* One line, printed once, then the process ends: the launcher sees a rank
 * fail and ends the others. */
static void report_and_exit(const slot_t *me, double waited) {
    char line[4096];
    uint64_t seq = atomic_load(&me->seq);
    int64_t now = now_ns();
    int len = snprintf(line, sizeof line,
                       "acx: rank %d (%s): collective %s #%llu (step %lld) has not completed after "
                       "%.3g s (collective_timeout %g s); ranks on this node:",
                       wd.world_rank, wd.host, me->op, (unsigned long long)seq,
                       (long long)atomic_load(&me->step), waited, wd.timeout_s);
    for (int i = 0; i < wd.node_size && len < (int)sizeof line - 160; i++) {
        const slot_t *s = &wd.table[i];
        uint64_t sseq = atomic_load(&s->seq);
        int in = atomic_load_explicit(&s->inside, memory_order_acquire);
        char sop[OP_NAME_MAX];
        memcpy(sop, s->op, sizeof sop);
        sop[OP_NAME_MAX - 1] = '\0';
        double ago = (double)(now - atomic_load(&s->t_enter)) / 1e9;
        const char *what;
        char buf[128];
        if (i == wd.node_rank) continue;
        if (in && sseq == seq && strcmp(sop, me->op) == 0)
            what = "arrived";
        else if (in && sseq == seq) {
            snprintf(buf, sizeof buf, "in a different collective, %s #%llu", sop,
                     (unsigned long long)sseq);
            what = buf;
        } else if (in) {
            snprintf(buf, sizeof buf, "in %s #%llu for %.0f s", sop, (unsigned long long)sseq, ago);
            what = buf;
        } else {
            snprintf(buf, sizeof buf, "NOT ARRIVED (outside any collective for %.0f s, after #%llu)",
                     ago, (unsigned long long)sseq);
            what = buf;
        }
        len += snprintf(line + len, sizeof line - (size_t)len, " rank %d %s;", s->world_rank, what);
    }
    snprintf(line + len, sizeof line - (size_t)len,
             " ending the job (raise collective_timeout if this step is legitimately slow)\n");
    (void)!write(STDERR_FILENO, line, strlen(line));
    acx_coll_abort_all(); /* NCCL kernels waiting for a stuck peer end with the process */
    _exit(ACX_EXIT_STALL);
}

static void *watch_loop(void *arg) {
    (void)arg;
    /* check about 10 times per timeout, at most twice a second */
    double period = wd.timeout_s / 10.0;
    if (period > 0.5) period = 0.5;
    if (period < 0.01) period = 0.01;
    struct timespec ts = {.tv_sec = (time_t)period,
                          .tv_nsec = (long)((period - (double)(time_t)period) * 1e9)};
    const slot_t *me = &wd.table[wd.node_rank];
    while (!atomic_load(&wd.stop)) {
        nanosleep(&ts, NULL);
        if (!atomic_load(&me->inside)) continue;
        double waited = (double)(now_ns() - atomic_load(&me->t_enter)) / 1e9;
        if (waited > wd.timeout_s && atomic_load(&me->inside)) report_and_exit(me, waited);
    }
    return NULL;
}

/* ---- lifecycle ---- */

acx_status_t acx_watchdog_start(double timeout_s, int world_rank, const char *host,
                                const volatile int64_t *step_p) {
    if (wd.started) return ACX_ERROR(ACX_ERR_STATE, "the stall detector is already running");
    acx_status_t status = ACX_OK;
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
    ACX_MPI_CHECK_GOTO(MPI_Barrier(wd.node), status, err_win); /* every row initialized */
    wd.timeout_s = timeout_s;
    wd.step_p = step_p;
    wd.world_rank = world_rank;
    snprintf(wd.host, sizeof wd.host, "%s", host ? host : "?");
    wd.depth = 0;
    atomic_store(&wd.stop, 0);
    int err = pthread_create(&wd.thread, NULL, watch_loop, NULL);
    if (err != 0) {
        status = ACX_ERROR(ACX_ERR_SYSTEM, "cannot start the stall detector thread: %s",
                           strerror(err));
        goto err_win;
    }
    wd.started = 1;
    return ACX_OK;
err_win:
    MPI_Win_free(&wd.win);
err_comm:
    MPI_Comm_free(&wd.node);
    return status;
}

void acx_watchdog_stop(void) {
    if (!wd.started) return;
    atomic_store(&wd.stop, 1);
    pthread_join(wd.thread, NULL);
    wd.started = 0;
    MPI_Win_free(&wd.win);
    MPI_Comm_free(&wd.node);
    wd.table = NULL;
}

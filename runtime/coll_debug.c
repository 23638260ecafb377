/*
 * runtime/coll_debug.c — the collective debug mode: before a public
 * collective, every rank shares what it is about to call and the call is
 * refused, on every rank alike, when the calls differ.
 *
 * Owns reading ACX_DEBUG_MODE, the record exchanged per call and the report
 * of a mismatch. The public collectives (collectives_api.c, eval.c) decide
 * what goes into a call's record; the fast path (the counter and the branch
 * when the mode is off) is inline in coll_debug.h. The sharded strategies'
 * collectives on a unit come through acx_coll_debug_unit_check with the
 * unit's index and name, in the same record, so a rank gathering one unit
 * while another gathers a different one — or is at a public collective —
 * is reported like any other mismatch instead of mixing data or hanging.
 *
 * Why one MPI_Allgather on the world's MPI communicator: a mismatch is a
 * program whose ranks disagree about what comes next, so the check itself
 * must be a call every rank makes whatever it was about to do — the same
 * collective, with a fixed size, is the only thing they can all agree on.
 * MPI matches collectives on a communicator in call order, so the check
 * pairs with the other ranks' checks as long as every rank reaches some
 * public collective; a rank that is inside an internal collective (or not
 * in any) still hangs the others — that is the stall detector's job.
 */
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/watchdog.h"
#include "base/error.h"
#include "base/log.h"
#include "base/settings.h"
#include "runtime/coll_debug.h"

/* ---- reading ACX_DEBUG_MODE ---- */

acx_status_t acx_coll_debug_read(acx_accelerator_t *acc) {
    const char *name = acx_env_name(ACX_ENV_DEBUG_MODE), *v = acx_env_text(ACX_ENV_DEBUG_MODE);
    int on;
    if (acx_env_flag(ACX_ENV_DEBUG_MODE, &on) < 0)
        return ACX_ERROR(ACX_ERR_INVALID_CONFIG,
                         "%s='%s' is not a boolean: use 1 or 0 (true/false, yes/no, on/off)", name,
                         v);
    if (!on) {
        acc->coll_debug = ACX_COLL_DEBUG_OFF;
        return ACX_OK;
    }
    acc->coll_debug = ACX_COLL_DEBUG_ON;
    if (acc->rank == 0)
        ACX_INFO(ACX_SUBSYS_COLL,
                 "debug mode (%s=%s): every public collective is "
                 "checked across ranks first (one extra all-gather per call)",
                 name, v);
    return ACX_OK;
}

acx_status_t acx_coll_debug_init(acx_accelerator_t *acc) {
    if (acc == NULL || acc->world == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "coll debug init: no world communicator");
    ACX_CHECK(acx_coll_agree(acc->world, acx_coll_debug_read(acc)));
    /* max of (on, -on) gives max and -min of the setting in one call */
    int on = acc->coll_debug == ACX_COLL_DEBUG_ON, v[2] = {on, -on};
    ACX_MPI_CHECK(ACX_WATCHED("debug mode agreement", MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_INT,
                                                                    MPI_MAX, acc->world->mpi)));
    if (v[0] != -v[1])
        return ACX_ERROR(ACX_ERR_INVALID_CONFIG,
                         "%s differs across ranks (this is rank %d, where it is %s): "
                         "set it for every rank (mpirun -x %s, or acx launch --debug)",
                         acx_env_name(ACX_ENV_DEBUG_MODE), acc->rank, on ? "on" : "off",
                         acx_env_name(ACX_ENV_DEBUG_MODE));
    return ACX_OK;
}

/* ---- the record ---- */

/* What each rank contributes: fixed size, no pointers, the same layout on
 * every rank (one executable), sent as bytes. -1 marks an absent field. */
typedef struct coll_record {
    uint64_t seq;
    int64_t count;
    int32_t id, dtype, op, root;
    int32_t line;
    int32_t status;               /* this rank's argument check, an acx_status_t */
    int32_t world_rank;           /* for the report (the exchange may run on a node) */
    int32_t unit;                 /* unit collectives: the unit's index; else -1 */
    char file[48];                /* base name of the call site, "" if unknown */
    char unit_name[ACX_MAX_NAME]; /* unit collectives: the unit's name; else "" */
} coll_record_t;

static void record_fill(coll_record_t *r, const acx_accelerator_t *acc, const acx_coll_call_t *c,
                        acx_status_t local) {
    memset(r, 0, sizeof *r);
    r->seq = acc->coll_seq;
    r->count = c->count;
    r->id = (int32_t)c->id;
    r->dtype = c->dtype;
    r->op = c->op;
    r->root = c->root;
    r->line = c->line;
    r->status = (int32_t)local;
    r->world_rank = acc->rank;
    r->unit = -1;
    if (c->file != NULL) {
        const char *base = strrchr(c->file, '/');
        snprintf(r->file, sizeof r->file, "%s", base ? base + 1 : c->file);
    }
}

/* The fields that must agree (the call site need not). */
static int record_same_call(const coll_record_t *a, const coll_record_t *b) {
    return a->seq == b->seq && a->id == b->id && a->count == b->count && a->dtype == b->dtype &&
           a->op == b->op && a->root == b->root && a->unit == b->unit &&
           strcmp(a->unit_name, b->unit_name) == 0;
}

static int record_same(const coll_record_t *a, const coll_record_t *b) {
    return record_same_call(a, b) && a->line == b->line && strcmp(a->file, b->file) == 0;
}

/* ---- the report ---- */

/* Names as the public API spells them (without acx_), and what the
 * compared count is for each. */
static const struct {
    const char *name, *count;
} coll_names[ACX_COLL_ID_COUNT_] = {
    [ACX_COLL_ALL_REDUCE] = {"all_reduce", "count"},
    [ACX_COLL_ALL_REDUCE_ASYNC] = {"all_reduce_async", "count"},
    [ACX_COLL_REDUCE_SCATTER] = {"reduce_scatter", "count"},
    [ACX_COLL_REDUCE_SCATTER_ASYNC] = {"reduce_scatter_async", "count"},
    [ACX_COLL_BROADCAST] = {"broadcast", "count"},
    [ACX_COLL_BROADCAST_ASYNC] = {"broadcast_async", "count"},
    [ACX_COLL_ALL_GATHER] = {"all_gather", "count"},
    [ACX_COLL_ALL_GATHER_ASYNC] = {"all_gather_async", "count"},
    [ACX_COLL_GATHER] = {"gather", "count"},
    [ACX_COLL_GATHER_ASYNC] = {"gather_async", "count"},
    [ACX_COLL_BARRIER] = {"barrier", NULL},
    [ACX_COLL_BARRIER_ASYNC] = {"barrier_async", NULL},
    [ACX_COLL_REDUCE_SCALAR] = {"reduce_scalar", "count"},
    [ACX_COLL_REDUCE] = {"reduce", "count"},
    [ACX_COLL_GATHER_FOR_METRICS] = {"gather_for_metrics", "sample_bytes"},
    [ACX_COLL_PAD_ACROSS_PROCESSES] = {"pad_across_processes", "row_numel"},
    [ACX_COLL_MAIN_PROCESS_FIRST] = {"main_process_first", NULL},
    [ACX_COLL_LOCAL_MAIN_PROCESS_FIRST] = {"local_main_process_first", NULL},
    [ACX_COLL_CHECK_TRIGGER] = {"check_trigger", NULL},
    [ACX_COLL_UNIT_ALL_GATHER] = {"all_gather", "count"},
    [ACX_COLL_UNIT_REDUCE_SCATTER] = {"reduce_scatter", "count"},
};

static int is_unit_record(const coll_record_t *r) {
    return r->id == ACX_COLL_UNIT_ALL_GATHER || r->id == ACX_COLL_UNIT_REDUCE_SCATTER;
}

static const char *red_op_name(int op) {
    static const char *const names[ACX_OP_COUNT_] = {[ACX_OP_SUM] = "sum",
                                                     [ACX_OP_AVG] = "avg",
                                                     [ACX_OP_MAX] = "max",
                                                     [ACX_OP_MIN] = "min",
                                                     [ACX_OP_PROD] = "prod"};
    return op >= 0 && op < ACX_OP_COUNT_ ? names[op] : "invalid op";
}

/* Append printf-style to buf [cap] at *len; stops (silently) when full. */
static void appendf(char *buf, size_t cap, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void appendf(char *buf, size_t cap, size_t *len, const char *fmt, ...) {
    if (*len >= cap) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *len, cap - *len, fmt, ap);
    va_end(ap);
    if (n > 0) *len = *len + (size_t)n < cap ? *len + (size_t)n : cap;
}

/* "all_reduce(count 1024, float32, sum) at train.c:88", "barrier at unknown
 * call site", "all_gather of unit 1 'dec' (count 40, bfloat16)" */
static void record_describe(const coll_record_t *r, int with_seq, char *buf, size_t cap,
                            size_t *len) {
    if (with_seq && !is_unit_record(r))
        appendf(buf, cap, len, "#%llu ", (unsigned long long)r->seq);
    if (r->id >= 0 && r->id < ACX_COLL_ID_COUNT_)
        appendf(buf, cap, len, "%s", coll_names[r->id].name);
    else
        appendf(buf, cap, len, "collective %d", (int)r->id);
    const char *sep = "(";
    if (is_unit_record(r)) {
        appendf(buf, cap, len, " of unit %d '%s'", (int)r->unit, r->unit_name);
        sep = " (";
    }
    if (r->count >= 0 && r->id >= 0 && r->id < ACX_COLL_ID_COUNT_ && coll_names[r->id].count) {
        appendf(buf, cap, len, "%s%s %lld", sep, coll_names[r->id].count, (long long)r->count);
        sep = ", ";
    }
    if (r->dtype >= 0) {
        appendf(buf, cap, len, "%s%s", sep, acx_dtype_name((acx_dtype_t)r->dtype));
        sep = ", ";
    }
    if (r->op >= 0) {
        appendf(buf, cap, len, "%s%s", sep, red_op_name(r->op));
        sep = ", ";
    }
    if (r->root >= 0) {
        appendf(buf, cap, len, "%sroot %d", sep, (int)r->root);
        sep = ", ";
    }
    if (sep[0] == ',') appendf(buf, cap, len, ")");
    if (is_unit_record(r)) return; /* inside acx (acquire, grads_ready, a step's refresh) */
    if (r->file[0] != '\0')
        appendf(buf, cap, len, " at %s:%d", r->file, (int)r->line);
    else
        appendf(buf, cap, len, " at unknown call site");
}

/* "rank 3" or "ranks 0,2-4": the world ranks of the records r with
 * group[r] == g (records in communicator rank order). */
static void ranks_describe(const coll_record_t *all, const int *group, int n, int g, char *buf,
                           size_t cap, size_t *len) {
    int members = 0;
    for (int r = 0; r < n; r++)
        members += group[r] == g;
    appendf(buf, cap, len, members == 1 ? "rank " : "ranks ");
    const char *sep = "";
    for (int r = 0; r < n; r++) {
        if (group[r] != g) continue;
        int end = r;
        while (end + 1 < n && group[end + 1] == g &&
               all[end + 1].world_rank == all[end].world_rank + 1)
            end++;
        if (end == r)
            appendf(buf, cap, len, "%s%d", sep, (int)all[r].world_rank);
        else
            appendf(buf, cap, len, "%s%d-%d", sep, (int)all[r].world_rank,
                    (int)all[end].world_rank);
        sep = ",";
        r = end;
    }
}

/* Group ranks with identical records (group[r] = the lowest rank of r's
 * group) and list each group once, in order of its lowest rank. */
static acx_status_t report_mismatch(const coll_record_t *all, int n) {
    int *group = acx_malloc((size_t)n * sizeof *group, "debug mode report");
    if (group == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "collective mismatch at #%llu (no memory for the details)",
                         (unsigned long long)all[0].seq);
    int same_seq = 1, units = 0;
    for (int r = 0; r < n; r++) {
        units += is_unit_record(&all[r]);
        group[r] = r;
        for (int q = 0; q < r; q++)
            if (group[q] == q && record_same(&all[q], &all[r])) {
                group[r] = q;
                break;
            }
        same_seq &= all[r].seq == all[0].seq;
    }
    char msg[ACX_ERRMSG_MAX - 64];
    size_t len = 0;
    const size_t room = sizeof msg - 8; /* for a final "; ..." */
    if (same_seq && units == n)
        appendf(msg, sizeof msg, &len,
                "collective mismatch on sharded units (after %llu public collectives): ",
                (unsigned long long)all[0].seq);
    else if (same_seq)
        appendf(msg, sizeof msg, &len,
                "collective mismatch at #%llu: ", (unsigned long long)all[0].seq);
    else
        appendf(msg, sizeof msg, &len, "collective mismatch (the ranks are at different calls): ");
    for (int g = 0; g < n; g++) {
        if (group[g] != g) continue;
        char one[512];
        size_t olen = 0;
        if (g > 0) appendf(one, sizeof one, &olen, "; ");
        ranks_describe(all, group, n, g, one, sizeof one, &olen);
        appendf(one, sizeof one, &olen, " ");
        record_describe(&all[g], !same_seq, one, sizeof one, &olen);
        if (len + olen > room) {
            appendf(msg, sizeof msg, &len, "; ...");
            break;
        }
        appendf(msg, sizeof msg, &len, "%s", one);
    }
    if (units > 0)
        appendf(msg, sizeof msg, &len,
                "; every rank must acquire units and report their gradients ready in the same "
                "order");
    free(group);
    return ACX_ERROR(ACX_ERR_INVALID_ARG, "%s", msg);
}

/* ---- the exchange ---- */

/* Share *mine over comm (n ranks) and compare: ACX_OK when every record is
 * the same call and passed its argument check. */
static acx_status_t exchange(acx_accelerator_t *acc, MPI_Comm comm, int n, coll_record_t *mine,
                             acx_status_t local) {
    coll_record_t *all = acx_malloc((size_t)n * sizeof *all, "debug mode records");
    /* Nothing to compare with: failing here leaves the other ranks waiting,
     * as any local failure right before a collective would. */
    if (all == NULL) return ACX_ERR_NO_MEMORY;
    acx_status_t status = ACX_OK;
    ACX_MPI_CHECK_GOTO(
        ACX_WATCHED("debug mode check", MPI_Allgather(mine, (int)sizeof *mine, MPI_BYTE, all,
                                                      (int)sizeof *mine, MPI_BYTE, comm)),
        status, out);
    int mismatch = 0, failed = 0;
    for (int r = 0; r < n; r++) {
        all[r].file[sizeof all[r].file - 1] = '\0';
        all[r].unit_name[sizeof all[r].unit_name - 1] = '\0';
        mismatch |= !record_same_call(&all[r], &all[0]);
        failed |= all[r].status != ACX_OK;
    }
    if (mismatch) {
        status = report_mismatch(all, n);
        /* Every rank skips this call. A unit's check does not count as a
         * public collective, so a rank that was at one while another was at
         * a public call would stay one behind for ever: all take the
         * highest sequence number, and their next calls compare equal
         * again when they agree. */
        for (int r = 0; r < n; r++)
            if (all[r].seq > acc->coll_seq) acc->coll_seq = all[r].seq;
    } else if (failed)
        /* every rank saw the failure in the records, so every rank agrees */
        status = acx_coll_agree(acc->world, local);
out:
    free(all);
    return status;
}

acx_status_t acx_coll_debug_exchange(acx_accelerator_t *acc, const acx_coll_call_t *call,
                                     acx_status_t local) {
    coll_record_t mine;
    record_fill(&mine, acc, call, local);
    return exchange(acc, acc->world->mpi, acc->world_size, &mine, local);
}

acx_status_t acx_coll_debug_unit_check(void *owner, acx_comm_t *comm, const acx_unit_call_t *call) {
    acx_accelerator_t *acc = owner;
    acx_coll_call_t c = {
        .id = call->reduce_scatter ? ACX_COLL_UNIT_REDUCE_SCATTER : ACX_COLL_UNIT_ALL_GATHER,
        .count = call->count > (size_t)INT64_MAX ? INT64_MAX : (int64_t)call->count,
        .dtype = (int)call->dtype,
        .op = call->reduce_scatter ? ACX_OP_SUM : -1,
        .root = -1};
    coll_record_t mine;
    record_fill(&mine, acc, &c, ACX_OK);
    mine.unit = call->unit;
    snprintf(mine.unit_name, sizeof mine.unit_name, "%s", call->name ? call->name : "");
    return exchange(acc, comm->mpi, comm->size, &mine, ACX_OK);
}

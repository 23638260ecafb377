/*
 * runtime/eval.c — the evaluation helpers of acx/collectives.h, after
 * Accelerate's: reduce (and its scalar form), gather_for_metrics,
 * pad_across_processes, main_process_first and the cross-rank trigger.
 *
 * They move metrics, predictions and flags, which live in host memory
 * whatever the data backend, so they talk MPI on the world's (and for
 * local_main_process_first the node's) MPI communicator directly, or the
 * MPI backend's all-reduce for its dtype rules. Each is a public collective
 * and goes through the debug-mode check first (coll_debug.h). The plain
 * collectives and requests are collectives_api.c's.
 */
/* The *_at forms are defined here under their own names: no call-site
 * macros. */
#define ACX_NO_CALL_SITE 1

#include <limits.h>
#include <math.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "base/half.h"
#include "collectives/watchdog.h"
#include "runtime/accelerator.h"
#include "base/error.h"
#include "runtime/coll_debug.h"

static acx_coll_call_t call_of(acx_coll_id_t id, int64_t count, int dtype, int op, int root,
                               const char *file, int line) {
    return (acx_coll_call_t){.id = id,
                             .count = count,
                             .dtype = dtype,
                             .op = op,
                             .root = root,
                             .file = file,
                             .line = line};
}

/* ---- reduce ---- */

/* SUM, AVG, MAX, MIN: Accelerate's reductions plus min. PROD is refused:
 * not a metric, and a product over ranks of float16 overflows quickly. */
static acx_status_t check_reduce_op(acx_red_op_t op, acx_dtype_t dtype, const char *fn) {
    if (op != ACX_OP_SUM && op != ACX_OP_AVG && op != ACX_OP_MAX && op != ACX_OP_MIN)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "%s: op %d is not sum (%d), avg (%d), max (%d) or min (%d)", fn, (int)op,
                         ACX_OP_SUM, ACX_OP_AVG, ACX_OP_MAX, ACX_OP_MIN);
    if (acx_dtype_size(dtype) == 0)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "%s: invalid dtype %d", fn, (int)dtype);
    int is_float =
        dtype == ACX_DTYPE_FLOAT32 || dtype == ACX_DTYPE_FLOAT64 || acx_dtype_is_half(dtype);
    if (op == ACX_OP_AVG && !is_float)
        return ACX_ERROR(ACX_ERR_NOT_SUPPORTED,
                         "%s: the mean of %s values is not an integer; reduce with ACX_OP_SUM and "
                         "divide by the world size",
                         fn, acx_dtype_name(dtype));
    return ACX_OK;
}

ACX_API acx_status_t acx_reduce_at(const char *file, int line, acx_accelerator_t *acc,
                                   const void *sendbuf, void *recvbuf, size_t count,
                                   acx_dtype_t dtype, acx_red_op_t op) {
    static const char fn[] = "acx_reduce";
    if (acc == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "%s: acc is NULL", fn);
    acx_status_t local = check_reduce_op(op, dtype, fn);
    if (local == ACX_OK && recvbuf == NULL && count > 0)
        local = ACX_ERROR(ACX_ERR_INVALID_ARG, "%s: recvbuf is NULL with count %zu", fn, count);
    acx_coll_call_t call =
        call_of(ACX_COLL_REDUCE, count > (size_t)INT64_MAX ? INT64_MAX : (int64_t)count, (int)dtype,
                (int)op, -1, file, line);
    ACX_CHECK(acx_coll_debug_check(acc, &call, local));
    if (sendbuf == NULL) sendbuf = recvbuf;
    /* Host memory whatever the data backend: the MPI backend's all-reduce
     * (its float16/bfloat16 rule: float32 accumulation, one rounding) on
     * the MPI-backend world, which the accelerator keeps for host data. */
    return acx_coll_mpi_ops.all_reduce(acc->world_host, sendbuf, recvbuf, count, dtype, op);
}

ACX_API acx_status_t acx_reduce_scalar_at(const char *file, int line, acx_accelerator_t *acc,
                                          double value, acx_red_op_t op, double *out_p) {
    static const char fn[] = "acx_reduce_scalar";
    if (acc == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "%s: acc is NULL", fn);
    acx_status_t local = check_reduce_op(op, ACX_DTYPE_FLOAT64, fn);
    if (local == ACX_OK && out_p == NULL)
        local = ACX_ERROR(ACX_ERR_INVALID_ARG, "%s: out_p is NULL", fn);
    acx_coll_call_t call =
        call_of(ACX_COLL_REDUCE_SCALAR, 1, ACX_DTYPE_FLOAT64, (int)op, -1, file, line);
    ACX_CHECK(acx_coll_debug_check(acc, &call, local));
    double v = value;
    ACX_CHECK(acx_coll_mpi_ops.all_reduce(acc->world_host, &v, &v, 1, ACX_DTYPE_FLOAT64, op));
    *out_p = v;
    return ACX_OK;
}

/* ---- gather_for_metrics ---- */

/*
 * Why per-rank padding counts are enough: the sampler (io/sampler.c) puts
 * the even_batches padding at the tail of each rank's slice of the last
 * global batch, and the slices are in rank order, so concatenating every
 * rank's real samples in rank order gives the dataset stream's positions
 * in order with the repeats left out — the same samples Accelerate keeps by
 * truncating the gathered last batch to the dataset's remainder, without a
 * global "is this the last batch" state.
 *
 * One MPI_Allgather of the real counts (int64 [world]), then one
 * MPI_Allgatherv (or MPI_Gatherv to rank 0) of the bytes.
 */
ACX_API acx_status_t acx_gather_for_metrics_at(const char *file, int line, acx_accelerator_t *acc,
                                               const acx_batch_t *batch, const void *local,
                                               size_t sample_bytes, void *out, int64_t out_capacity,
                                               int to_main_only, int64_t *count_p) {
    static const char fn[] = "acx_gather_for_metrics";
    if (acc == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "%s: acc is NULL", fn);
    acx_status_t bad = ACX_OK;
    int64_t real = 0;
    if (batch == NULL || count_p == NULL || sample_bytes == 0 || sample_bytes > INT_MAX)
        bad = ACX_ERROR(ACX_ERR_INVALID_ARG,
                        "%s: batch and count_p must not be NULL and sample_bytes must be in 1..%d "
                        "(got %zu)",
                        fn, INT_MAX, sample_bytes);
    else if ((real = batch->size - batch->num_padding) < 0 || batch->num_padding < 0 ||
             (real > 0 && local == NULL))
        bad = ACX_ERROR(
            ACX_ERR_INVALID_ARG,
            "%s: local is NULL or the batch is inconsistent (size %lld, num_padding %lld)", fn,
            (long long)(batch ? batch->size : 0), (long long)(batch ? batch->num_padding : 0));
    acx_coll_call_t call = call_of(ACX_COLL_GATHER_FOR_METRICS, (int64_t)sample_bytes, -1, -1,
                                   to_main_only ? 0 : -1, file, line);
    ACX_CHECK(acx_coll_debug_check(acc, &call, bad));

    int n = acc->world_size;
    MPI_Comm comm = acc->world->mpi;
    int64_t *counts = acx_malloc((size_t)n * sizeof *counts, "gather counts");
    int *rcounts = acx_malloc((size_t)n * sizeof *rcounts, "gather counts");
    int *displs = acx_malloc((size_t)n * sizeof *displs, "gather displacements");
    acx_status_t status = ACX_OK;
    if (counts == NULL || rcounts == NULL || displs == NULL) {
        status = ACX_ERR_NO_MEMORY;
        goto out;
    }
    ACX_MPI_CHECK_GOTO(
        ACX_WATCHED("gather_for_metrics",
                    MPI_Allgather(&real, 1, MPI_INT64_T, counts, 1, MPI_INT64_T, comm)),
        status, out);
    int64_t total = 0;
    for (int r = 0; r < n; r++) {
        int64_t bytes = counts[r] * (int64_t)sample_bytes, at = total * (int64_t)sample_bytes;
        if (bytes > INT_MAX || at > INT_MAX - bytes) {
            status =
                ACX_ERROR(ACX_ERR_NOT_SUPPORTED,
                          "%s: 2 GiB or more gathered in one call; gather in smaller pieces", fn);
            goto out;
        }
        rcounts[r] = (int)bytes;
        displs[r] = (int)at;
        total += counts[r];
    }
    int receives = !to_main_only || acc->rank == 0;
    /* Capacity is checked on every rank against the same total, and agreed,
     * so either all ranks go on to the collective or none does. */
    if (receives && total > 0 && out == NULL)
        status = ACX_ERROR(ACX_ERR_INVALID_ARG,
                           "%s: out is NULL on rank %d, which receives %lld samples", fn, acc->rank,
                           (long long)total);
    else if (receives && total > out_capacity)
        status =
            ACX_ERROR(ACX_ERR_INVALID_ARG, "%s: output holds %lld samples but %lld are gathered",
                      fn, (long long)out_capacity, (long long)total);
    status = acx_coll_agree(acc->world, status);
    if (status != ACX_OK) goto out;
    int sendbytes = (int)(real * (int64_t)sample_bytes);
    if (to_main_only)
        ACX_MPI_CHECK_GOTO(
            ACX_WATCHED("gather_for_metrics", MPI_Gatherv(local, sendbytes, MPI_BYTE, out, rcounts,
                                                          displs, MPI_BYTE, 0, comm)),
            status, out);
    else
        ACX_MPI_CHECK_GOTO(
            ACX_WATCHED("gather_for_metrics", MPI_Allgatherv(local, sendbytes, MPI_BYTE, out,
                                                             rcounts, displs, MPI_BYTE, comm)),
            status, out);
    *count_p = receives ? total : 0;
out:
    free(counts);
    free(rcounts);
    free(displs);
    return status;
}

/* ---- pad_across_processes ---- */

/* pad_value as one element of dtype, into elem [8 bytes]. Floats round to
 * nearest even (float16/bfloat16 once, from the double); integers must be
 * exact. */
static acx_status_t pad_element(double v, acx_dtype_t dtype, unsigned char *elem, const char *fn) {
    double lo = 0, hi = 0; /* the integer range, as doubles that are exact */
    switch (dtype) {
    case ACX_DTYPE_FLOAT32: {
        float f = (float)v;
        memcpy(elem, &f, sizeof f);
        return ACX_OK;
    }
    case ACX_DTYPE_FLOAT64: memcpy(elem, &v, sizeof v); return ACX_OK;
    case ACX_DTYPE_FLOAT16: {
        uint16_t h = acx_f16_from_f64(v);
        memcpy(elem, &h, sizeof h);
        return ACX_OK;
    }
    case ACX_DTYPE_BFLOAT16: {
        uint16_t h = acx_bf16_from_f64(v);
        memcpy(elem, &h, sizeof h);
        return ACX_OK;
    }
    case ACX_DTYPE_INT8: lo = -128, hi = 127; break;
    case ACX_DTYPE_UINT8: lo = 0, hi = 255; break;
    case ACX_DTYPE_UINT16: lo = 0, hi = 65535; break;
    case ACX_DTYPE_INT32: lo = -2147483648.0, hi = 2147483647.0; break;
    case ACX_DTYPE_INT64: lo = -9223372036854775808.0, hi = 9223372036854775807.0; break;
    default: return ACX_ERROR(ACX_ERR_INVALID_ARG, "%s: invalid dtype %d", fn, (int)dtype);
    }
    /* hi of int64 rounds up to 2^63 as a double, which is out of range */
    if (!(v == floor(v)) || v < lo || v > hi || (dtype == ACX_DTYPE_INT64 && v >= hi))
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "%s: pad value %.17g is not a %s (an integer in [%.0f, %.0f])", fn, v,
                         acx_dtype_name(dtype), lo, hi);
    switch (dtype) {
    case ACX_DTYPE_INT8: *(int8_t *)elem = (int8_t)v; break;
    case ACX_DTYPE_UINT8: *elem = (uint8_t)v; break;
    case ACX_DTYPE_UINT16: {
        uint16_t u = (uint16_t)v;
        memcpy(elem, &u, sizeof u);
        break;
    }
    case ACX_DTYPE_INT32: {
        int32_t i = (int32_t)v;
        memcpy(elem, &i, sizeof i);
        break;
    }
    default: {
        int64_t i = (int64_t)v;
        memcpy(elem, &i, sizeof i);
        break;
    }
    }
    return ACX_OK;
}

/*
 * out [max_rows x row_numel]:
 *   pad_first = 0:  | buf's rows (rows) | pad rows (max_rows - rows) |
 *   pad_first = 1:  | pad rows (max_rows - rows) | buf's rows (rows) |
 * The only communication is an all-reduce MAX of rows.
 */
ACX_API acx_status_t acx_pad_across_processes_at(const char *file, int line, acx_accelerator_t *acc,
                                                 const void *buf, int64_t rows, int64_t row_numel,
                                                 acx_dtype_t dtype, double pad_value, int pad_first,
                                                 void **out_p, int64_t *max_rows_p) {
    static const char fn[] = "acx_pad_across_processes";
    if (acc == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "%s: acc is NULL", fn);
    unsigned char elem[8];
    size_t esize = acx_dtype_size(dtype);
    acx_status_t local = ACX_OK;
    if (out_p == NULL || max_rows_p == NULL)
        local = ACX_ERROR(ACX_ERR_INVALID_ARG, "%s: %s is NULL", fn,
                          out_p == NULL ? "out_p" : "max_rows_p");
    else if (rows < 0 || row_numel < 0)
        local = ACX_ERROR(ACX_ERR_INVALID_ARG, "%s: rows %lld and row_numel %lld must be >= 0", fn,
                          (long long)rows, (long long)row_numel);
    else if (buf == NULL && rows > 0 && row_numel > 0)
        local =
            ACX_ERROR(ACX_ERR_INVALID_ARG, "%s: buf is NULL with %lld rows", fn, (long long)rows);
    else
        local = pad_element(pad_value, dtype, elem, fn);
    acx_coll_call_t call =
        call_of(ACX_COLL_PAD_ACROSS_PROCESSES, row_numel, (int)dtype, -1, -1, file, line);
    ACX_CHECK(acx_coll_debug_check(acc, &call, local));

    int64_t max_rows = rows;
    ACX_MPI_CHECK(
        ACX_WATCHED("pad_across_processes", MPI_Allreduce(MPI_IN_PLACE, &max_rows, 1, MPI_INT64_T,
                                                          MPI_MAX, acc->world->mpi)));
    if ((uint64_t)row_numel > SIZE_MAX / esize)
        return ACX_ERROR(ACX_ERR_NO_MEMORY, "%s: rows of %lld elements do not fit in memory", fn,
                         (long long)row_numel);
    size_t row_bytes = (size_t)row_numel * esize;
    if (row_numel > 0 && (uint64_t)max_rows > SIZE_MAX / row_bytes)
        return ACX_ERROR(ACX_ERR_NO_MEMORY, "%s: %lld rows of %zu bytes do not fit in memory", fn,
                         (long long)max_rows, row_bytes);
    size_t have = (size_t)rows * row_bytes, total = (size_t)max_rows * row_bytes;
    unsigned char *out = acx_malloc(total ? total : 1, "padded buffer");
    if (out == NULL) return ACX_ERR_NO_MEMORY;
    unsigned char *data = pad_first ? out + (total - have) : out;
    unsigned char *pad = pad_first ? out : out + have;
    if (have > 0) memcpy(data, buf, have);
    for (size_t at = 0; at < total - have; at += esize)
        memcpy(pad + at, elem, esize);
    *out_p = out;
    *max_rows_p = max_rows;
    return ACX_OK;
}

/* ---- main_process_first ---- */

/*
 * One barrier per block, entered at different points (Accelerate's
 * _goes_first): the first process runs the block and then enters the
 * barrier in end; the others enter it in begin and run the block once it
 * releases them.
 *
 *              begin            block          end
 *   main:      -                runs           barrier ──┐
 *   others:    barrier ─────────────────────────────────┴─> runs the block
 *
 * The world form uses the world's communicator, the local form the node's
 * (each node's local rank 0 goes first; nodes do not wait for each other,
 * except in debug mode, whose check is a world collective).
 */
static acx_status_t first_step(const char *file, int line, acx_accelerator_t *acc, int local_form,
                               int begin) {
    static const char *const names[2][2] = {
        {"acx_main_process_first_end", "acx_main_process_first_begin"},
        {"acx_local_main_process_first_end", "acx_local_main_process_first_begin"}};
    const char *fn = names[local_form][begin];
    if (acc == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "%s: acc is NULL", fn);
    int kind = local_form ? 2 : 1;
    if (begin && acc->first_block != 0)
        return ACX_ERROR(ACX_ERR_STATE,
                         "%s: already inside a %smain_process_first block (they do not nest)", fn,
                         acc->first_block == 2 ? "local_" : "");
    if (!begin && acc->first_block != kind)
        return ACX_ERROR(ACX_ERR_STATE, "%s: %s", fn,
                         acc->first_block == 0 ? "no block was begun"
                                               : "the open block is of the other kind");
    int first = local_form ? acc->local_rank == 0 : acc->rank == 0;
    acc->first_block = begin ? kind : 0;
    /* The first process waits at the end, the others at the beginning. */
    if (first == begin) return ACX_OK;
    acx_comm_t *comm = local_form ? acc->node : acc->world;
    acx_coll_call_t call =
        call_of(local_form ? ACX_COLL_LOCAL_MAIN_PROCESS_FIRST : ACX_COLL_MAIN_PROCESS_FIRST, -1,
                -1, -1, -1, file, line);
    ACX_CHECK(acx_coll_debug_check(acc, &call, ACX_OK));
    ACX_MPI_CHECK(MPI_Barrier(comm->mpi));
    return ACX_OK;
}

ACX_API acx_status_t acx_main_process_first_begin_at(const char *file, int line,
                                                     acx_accelerator_t *acc) {
    return first_step(file, line, acc, 0, 1);
}

ACX_API acx_status_t acx_main_process_first_end_at(const char *file, int line,
                                                   acx_accelerator_t *acc) {
    return first_step(file, line, acc, 0, 0);
}

ACX_API acx_status_t acx_local_main_process_first_begin_at(const char *file, int line,
                                                           acx_accelerator_t *acc) {
    return first_step(file, line, acc, 1, 1);
}

ACX_API acx_status_t acx_local_main_process_first_end_at(const char *file, int line,
                                                         acx_accelerator_t *acc) {
    return first_step(file, line, acc, 1, 0);
}

/* ---- the trigger ---- */

ACX_API acx_status_t acx_set_trigger(acx_accelerator_t *acc) {
    if (acc == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_set_trigger: acc is NULL");
    acc->trigger = 1;
    return ACX_OK;
}

ACX_API acx_status_t acx_check_trigger_at(const char *file, int line, acx_accelerator_t *acc,
                                          int *triggered_p) {
    static const char fn[] = "acx_check_trigger";
    if (acc == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "%s: acc is NULL", fn);
    acx_status_t local = triggered_p == NULL
                             ? ACX_ERROR(ACX_ERR_INVALID_ARG, "%s: triggered_p is NULL", fn)
                             : ACX_OK;
    acx_coll_call_t call = call_of(ACX_COLL_CHECK_TRIGGER, -1, -1, -1, -1, file, line);
    ACX_CHECK(acx_coll_debug_check(acc, &call, local));
    int any = acc->trigger;
    ACX_MPI_CHECK(ACX_WATCHED(
        "check_trigger", MPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_MAX, acc->world->mpi)));
    /* Cleared only after a successful check, on every rank at once: a rank
     * that set it since the last check cannot miss its own request. */
    if (any) acc->trigger = 0;
    *triggered_p = any;
    return ACX_OK;
}

/*
 * acx/collectives.h — collectives over the world, through the accelerator's
 * backend, and the evaluation helpers built on them (Accelerate's
 * gather_for_metrics, pad_across_processes, reduce, main_process_first and
 * the cross-rank trigger).
 *
 * Two memory spaces, never mixed up by the backend:
 *   - the collectives (all-reduce ... barrier and their async forms) move
 *     the ACCELERATOR'S memory: where acx_device_state says model state
 *     lives — host memory with host state, device memory with device_state
 *     cuda — with every backend. (Once they moved host memory on MPI and
 *     device memory on NCCL, so a program that worked on one backend
 *     faulted on the other.) A host pointer with device state is refused
 *     (ACX_ERR_INVALID_ARG) on MPI as on NCCL; acx_buffer_alloc
 *     (acx/memory.h) gives buffers of the right kind;
 *   - the evaluation helpers (acx_reduce, acx_reduce_scalar,
 *     acx_gather_for_metrics, acx_pad_across_processes, the trigger) move
 *     HOST memory, whatever the state and backend: metrics, predictions,
 *     flags.
 *
 * The collectives are macros over exported *_at functions that carry the
 * call site (see "Call sites" at the end); their signatures are given in
 * comments where they are documented.
 *
 * All functions here are collective over every rank of the world, with the
 * same count, dtype and op everywhere (acx_request_wait/test and
 * acx_set_trigger are local). With ACX_DEBUG_MODE=1 every rank checks that
 * claim before each call (see "debug mode" at the end of this header).
 */
#ifndef ACX_COLLECTIVES_H
#define ACX_COLLECTIVES_H

#include "acx/status.h"
#include "acx/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Shared rules for everything below:
 *   - Collective: every rank of the world calls it, in the same order as
 *     every other collective (blocking and non-blocking alike), with the
 *     same count, dtype, op and root. A rank that skips one, or calls them
 *     in another order, deadlocks the job or mixes up data.
 *   - count is in elements of dtype, per rank; 0 is allowed (every rank
 *     still calls; whether the call waits for the others is MPI's choice).
 *     Counts need not be multiples of the world size, nor as large as it.
 *   - dtype: any acx_dtype_t. Reductions take SUM, MAX and MIN for every
 *     dtype and AVG (the sum divided by the world size) for float32,
 *     float64, float16 and bfloat16. float16/bfloat16 SUM and AVG accumulate
 *     in float32 and round to nearest even once, at the end; MAX/MIN of them
 *     is exact, with NaN propagating.
 *   - Buffers are the accelerator's memory (above). A blocking call may
 *     reuse them on return; an async call owns them until acx_request_wait
 *     returns (or acx_request_test reported completion): do not read the
 *     output or write the input before that.
 *   - Errors (the same on every rank when the arguments are the same):
 *     ACX_ERR_INVALID_ARG (acc NULL, a NULL buffer with count > 0, a bad
 *     dtype, op or root, req_p NULL, overlapping buffers other than the
 *     in-place forms, a host buffer with device state), ACX_ERR_NOT_SUPPORTED (AVG of an integer
 * dtype; a reduce-scatter above INT_MAX elements per rank), ACX_ERR_NO_MEMORY, ACX_ERR_MPI (MPI's
 * own message).
 */

/* A pending non-blocking collective, from one of the *_async calls. */
typedef struct acx_request acx_request_t;

/* All-reduce: recvbuf [count] on every rank = op over ranks of sendbuf
 * [count] (element-wise). In place: sendbuf == recvbuf, or sendbuf NULL
 * (recvbuf is then the input and the output). torch.distributed.all_reduce. */
/*   acx_status_t acx_all_reduce(acx_accelerator_t *acc, const void *sendbuf, void *recvbuf, size_t
 * count, acx_dtype_t dtype, acx_red_op_t op) */

/* Non-blocking acx_all_reduce: starts it and writes *req_p (only on
 * success); complete it with acx_request_wait. */
/*   acx_status_t acx_all_reduce_async(acx_accelerator_t *acc, const void *sendbuf, void *recvbuf,
 * size_t count, acx_dtype_t dtype, acx_red_op_t op, acx_request_t **req_p) */

/* Reduce-scatter: sendbuf is [world_size x count] (block r = elements
 * [r * count, (r + 1) * count)); recvbuf [count] on rank r = op over ranks of
 * block r. In place (NCCL's rule): recvbuf == sendbuf + rank * count
 * elements; sendbuf may then be overwritten anywhere. Any other overlap is
 * ACX_ERR_INVALID_ARG. torch.distributed.reduce_scatter_tensor. */
/*   acx_status_t acx_reduce_scatter(acx_accelerator_t *acc, const void *sendbuf, void *recvbuf,
 * size_t count, acx_dtype_t dtype, acx_red_op_t op) */

/* Non-blocking acx_reduce_scatter; complete with acx_request_wait. */
/*   acx_status_t acx_reduce_scatter_async(acx_accelerator_t *acc, const void *sendbuf, void
 * *recvbuf, size_t count, acx_dtype_t dtype, acx_red_op_t op, acx_request_t **req_p) */

/* Broadcast: buf [count] of rank root is copied into buf [count] of every
 * other rank (bit for bit, any dtype). root in 0..world_size-1. */
/*   acx_status_t acx_broadcast(acx_accelerator_t *acc, void *buf, size_t count, acx_dtype_t dtype,
 * int root) */

/* Non-blocking acx_broadcast; complete with acx_request_wait. */
/*   acx_status_t acx_broadcast_async(acx_accelerator_t *acc, void *buf, size_t count, acx_dtype_t
 * dtype, int root, acx_request_t **req_p) */

/* All-gather: recvbuf [world_size x count] on every rank gets every rank's
 * sendbuf [count], in rank order (bit for bit). In place: sendbuf == recvbuf
 * + rank * count elements. torch.distributed.all_gather_into_tensor. */
/*   acx_status_t acx_all_gather(acx_accelerator_t *acc, const void *sendbuf, void *recvbuf, size_t
 * count, acx_dtype_t dtype) */

/* Non-blocking acx_all_gather; complete with acx_request_wait. */
/*   acx_status_t acx_all_gather_async(acx_accelerator_t *acc, const void *sendbuf, void *recvbuf,
 * size_t count, acx_dtype_t dtype, acx_request_t **req_p) */

/* Gather to one rank: on root, recvbuf [world_size x count] gets every
 * rank's sendbuf [count] in rank order; on the other ranks recvbuf is not
 * used and may be NULL. In place on root: sendbuf == recvbuf + root * count
 * elements. torch.distributed.gather. */
/*   acx_status_t acx_gather(acx_accelerator_t *acc, const void *sendbuf, void *recvbuf, size_t
 * count, acx_dtype_t dtype, int root) */

/* Non-blocking acx_gather; complete with acx_request_wait. */
/*   acx_status_t acx_gather_async(acx_accelerator_t *acc, const void *sendbuf, void *recvbuf,
 * size_t count, acx_dtype_t dtype, int root, acx_request_t **req_p) */

/* Barrier: returns once every rank has entered it — Accelerate's
 * wait_for_everyone, torch.distributed.barrier. (acx once exported both
 * names for this one call; acx_barrier stays, since it has the non-blocking
 * form and the debug-mode call site.) */
/*   acx_status_t acx_barrier(acx_accelerator_t *acc) */

/* Non-blocking barrier: the request completes once every rank has started it. */
/*   acx_status_t acx_barrier_async(acx_accelerator_t *acc, acx_request_t **req_p) */

/* Complete req (blocking until the collective has finished on this rank)
 * and free it, whatever the status: req is invalid afterwards. Local (not
 * collective), but it finishes only once the other ranks have started the
 * same collective. Errors: ACX_ERR_INVALID_ARG (req NULL), ACX_ERR_MPI. */
ACX_API acx_status_t acx_request_wait(acx_request_t *req);

/* Poll req without blocking: *done_p = 1 once the collective has finished
 * on this rank (the outputs are then final), else 0. Also drives progress
 * of the communication, so call it now and then while computing. req stays
 * valid either way: acx_request_wait must still be called to free it
 * (returning at once after done). Errors: ACX_ERR_INVALID_ARG, ACX_ERR_MPI. */
ACX_API acx_status_t acx_request_test(acx_request_t *req, int *done_p);

/* ---- evaluation helpers (Accelerate's) ---- */

/*
 * The helpers below move metrics, predictions and flags: host memory always,
 * whatever the data backend (they go over MPI on the world communicator).
 * Each is collective over the world unless it says otherwise.
 */

/* Mean (op ACX_OP_AVG), sum, max or min of one double over ranks, into
 * *out_p (the same on every rank). The scalar form of acx_reduce. */
/*   acx_status_t acx_reduce_scalar(acx_accelerator_t *acc, double value, acx_red_op_t op, double
 * *out_p) */

/* Reduce an array across ranks, every rank getting the result: recvbuf
 * [count] = op over ranks of sendbuf [count], element-wise. op: ACX_OP_SUM,
 * ACX_OP_AVG (the mean: the sum divided by the world size, as Accelerate's
 * reduce(..., reduction="mean")), ACX_OP_MAX or ACX_OP_MIN. In place:
 * sendbuf == recvbuf, or sendbuf NULL. Host memory with any backend; the
 * dtype rules are acx_all_reduce's (float16/bfloat16 accumulate in float32
 * and round once). Follows accelerate.utils.reduce.
 * Errors: ACX_ERR_INVALID_ARG (acc NULL, a NULL buffer with count > 0, a bad
 * dtype, op ACX_OP_PROD or not an acx_red_op_t), ACX_ERR_NOT_SUPPORTED
 * (ACX_OP_AVG of an integer dtype: a mean of integers is not an integer;
 * reduce with ACX_OP_SUM and divide), ACX_ERR_NO_MEMORY, ACX_ERR_MPI. */
/*   acx_status_t acx_reduce(acx_accelerator_t *acc, const void *sendbuf, void *recvbuf, size_t
 * count, acx_dtype_t dtype, acx_red_op_t op) */

/* Gather per-sample values of a batch from every rank, dropping exactly the
 * even_batches padding (batch->num_padding trailing samples on each rank),
 * so that over an epoch every sample of the dataset is gathered once: the
 * total equals the dataset length without drop_last, and the samples of
 * the full global batches with it (Accelerate's gather_for_metrics, which
 * truncates the last gathered batch by the dataset's remainder — the same
 * samples, since padding is always the tail of the last global batch).
 * local: [batch->size x sample_bytes] bytes (only the first size -
 * num_padding samples are read; NULL if there are none). out: receives the
 * real samples of rank 0, then rank 1, ... (the order of the dataset
 * stream); capacity out_capacity samples. *count_p = samples written.
 * to_main_only: only rank 0 receives (the others get *count_p = 0 and may
 * pass out NULL). Every rank must call it for the same batches: without
 * even_batches a rank may have one batch fewer than the others, and must
 * then not call it for the batch it does not have (use even_batches or
 * drop_last for evaluation). sample_bytes and to_main_only the same on
 * every rank. Errors: ACX_ERR_INVALID_ARG (on every rank when a receiving
 * rank's capacity is too small: the message gives the needed count),
 * ACX_ERR_NOT_SUPPORTED (2 GiB or more gathered in one call), ACX_ERR_MPI. */
/*   acx_status_t acx_gather_for_metrics(acx_accelerator_t *acc, const acx_batch_t *batch, const
 * void *local, size_t sample_bytes, void *out, int64_t out_capacity, int to_main_only, int64_t
 * *count_p) */

/* Pad a ragged first dimension to the same length on every rank, so that
 * the buffers can then be all-gathered (Accelerate's pad_across_processes
 * with dim 0). buf: [rows x row_numel] of dtype, this rank's rows (rows may
 * differ across ranks, 0 allowed: buf may then be NULL). *max_rows_p = the
 * largest rows over ranks; *out_p = a new buffer [max_rows x row_numel] of
 * dtype holding buf's rows followed by max_rows - rows rows of pad_value
 * (pad_first: the padding rows first, then buf's rows). pad_value is
 * converted to dtype: rounded to nearest even for float32/float16/bfloat16
 * (overflow gives an infinity); integer dtypes need an integral value in
 * the dtype's range (int64: exactly representable in a double, |v| <= 2^53
 * is always safe). Ownership: *out_p is the caller's, freed with free();
 * it is never NULL on success (an empty result is a 1-byte allocation).
 * One all-reduce of one int64; row_numel and dtype the same on every rank.
 * Errors: ACX_ERR_INVALID_ARG (acc, out_p or max_rows_p NULL, rows or
 * row_numel negative, buf NULL with data, a bad dtype, a pad_value the
 * dtype cannot hold — on the rank that passed it), ACX_ERR_NO_MEMORY,
 * ACX_ERR_MPI. */
/*   acx_status_t acx_pad_across_processes(acx_accelerator_t *acc, const void *buf, int64_t rows,
 * int64_t row_numel, acx_dtype_t dtype, double pad_value, int pad_first, void **out_p, int64_t
 * *max_rows_p) */

/*
 * "Main process first" (Accelerate's main_process_first context manager):
 *
 *     ACX_TRY(acx_main_process_first_begin(acc));
 *     ... download, preprocess or cache a file ...
 *     ACX_TRY(acx_main_process_first_end(acc));
 *
 * The main process (rank 0) runs the block at once; every other rank waits
 * in begin until the main process has reached end, then runs the block
 * itself (typically finding the file the main process wrote). Collective
 * over the world: every rank calls both. The local_ pair does the same per
 * node: each node's local main process (local rank 0) goes first and the
 * other ranks of that node wait for it only. The block must not call any
 * collective (acx or MPI): the main process would wait in it for ranks that
 * are themselves waiting for the main process. Blocks do not nest.
 * Errors: ACX_ERR_INVALID_ARG (acc NULL), ACX_ERR_STATE (begin inside an
 * open block, end without begin, or the end of the other kind of block),
 * ACX_ERR_MPI.
 */
/*   acx_status_t acx_main_process_first_begin(acx_accelerator_t *acc) */
/*   acx_status_t acx_main_process_first_end(acx_accelerator_t *acc) */
/*   acx_status_t acx_local_main_process_first_begin(acx_accelerator_t *acc) */
/*   acx_status_t acx_local_main_process_first_end(acx_accelerator_t *acc) */

/*
 * The cross-rank trigger (Accelerate's set_trigger/check_trigger), e.g. for
 * early stopping decided by one rank:
 *
 *     if (my_loss < target) acx_set_trigger(acc);       local, any rank
 *     ACX_TRY(acx_check_trigger(acc, &stop));           collective
 *     if (stop) break;                                   every rank alike
 *
 * acx_set_trigger is local and cheap (no communication). acx_check_trigger
 * is collective (one all-reduce MAX of one int): *triggered_p = 1 on every
 * rank if any rank called acx_set_trigger since the previous check, else 0;
 * a check that reports 1 clears the trigger on every rank.
 * Errors: ACX_ERR_INVALID_ARG (acc or triggered_p NULL), ACX_ERR_MPI.
 */
ACX_API acx_status_t acx_set_trigger(acx_accelerator_t *acc);
/*   acx_status_t acx_check_trigger(acx_accelerator_t *acc, int *triggered_p) */

/* ---- debug mode and call sites ---- */

/*
 * With ACX_DEBUG_MODE=1 in the environment (also true/yes/on; 0, false,
 * no, off or unset: off; anything else: the collectives fail with
 * ACX_ERR_INVALID_CONFIG), every rank checks before each collective of
 * this header (blocking and async forms, the evaluation helpers, both
 * halves of main_process_first) that all ranks are making the same call:
 * one MPI_Allgather of a small fixed record per rank {sequence number of
 * the call on this accelerator, operation, count, dtype, reduction op,
 * root, call site file:line, this rank's argument check}. If the
 * operation, count, dtype, op, root or sequence number differs on any
 * rank, the call returns ACX_ERR_INVALID_ARG on every rank — instead of
 * deadlocking or mixing up data — without running the collective, and
 * acx_last_error() lists each rank's values, ranks with the same values
 * grouped:
 *
 *   collective mismatch at #57: rank 0 barrier at train.c:120; ranks 1-3
 *   all_reduce(count 1024, float32, sum) at train.c:88
 *
 * Call sites are reported, not compared (one call per branch of an `if`
 * is legitimate). A bad argument on some ranks (a NULL buffer, a root out
 * of range) fails every rank with that rank's message instead of leaving
 * the others waiting. Counts compared are the ones that must agree: the
 * element count (all collectives), sample_bytes (gather_for_metrics; its
 * per-rank sample counts may differ) and row_numel (pad_across_processes;
 * its rows may differ). The program can go on after a reported mismatch:
 * every rank skipped the same call. Under the sharded strategies the
 * all-gathers and reduce-scatters of units (acx_unit_acquire and its
 * prefetches, acx_unit_grads_ready, the refresh after a step) are checked
 * the same way, with the unit's index and name compared and reported
 * ("rank 0 all_gather of unit 0 'enc' (count 12, float32); rank 1
 * all_gather of unit 1 'dec' ..."): acx_unit_acquire or
 * acx_unit_grads_ready then fails on every rank. Without ACX_DEBUG_MODE nothing is
 * exchanged (a counter increments). The variable is read once, at the
 * first collective, and must be the same on every rank.
 *
 * Call sites: the names above (their signatures are shown in comments)
 * are macros that pass __FILE__ and __LINE__ to the exported *_at
 * functions below, so a debug report names the program's own lines. Only
 * the *_at forms are symbols: acx once exported every collective twice,
 * under both names, which doubled the surface for no caller's benefit. A
 * language binding defines ACX_NO_CALL_SITE before including acx headers
 * (no macros) and calls the _at forms with a site of its own, or file
 * NULL and line 0 (a report then says "unknown call site").
 */
ACX_API acx_status_t acx_all_reduce_at(const char *file, int line, acx_accelerator_t *acc,
                                       const void *sendbuf, void *recvbuf, size_t count,
                                       acx_dtype_t dtype, acx_red_op_t op);
ACX_API acx_status_t acx_all_reduce_async_at(const char *file, int line, acx_accelerator_t *acc,
                                             const void *sendbuf, void *recvbuf, size_t count,
                                             acx_dtype_t dtype, acx_red_op_t op,
                                             acx_request_t **req_p);
ACX_API acx_status_t acx_reduce_scatter_at(const char *file, int line, acx_accelerator_t *acc,
                                           const void *sendbuf, void *recvbuf, size_t count,
                                           acx_dtype_t dtype, acx_red_op_t op);
ACX_API acx_status_t acx_reduce_scatter_async_at(const char *file, int line, acx_accelerator_t *acc,
                                                 const void *sendbuf, void *recvbuf, size_t count,
                                                 acx_dtype_t dtype, acx_red_op_t op,
                                                 acx_request_t **req_p);
ACX_API acx_status_t acx_broadcast_at(const char *file, int line, acx_accelerator_t *acc, void *buf,
                                      size_t count, acx_dtype_t dtype, int root);
ACX_API acx_status_t acx_broadcast_async_at(const char *file, int line, acx_accelerator_t *acc,
                                            void *buf, size_t count, acx_dtype_t dtype, int root,
                                            acx_request_t **req_p);
ACX_API acx_status_t acx_all_gather_at(const char *file, int line, acx_accelerator_t *acc,
                                       const void *sendbuf, void *recvbuf, size_t count,
                                       acx_dtype_t dtype);
ACX_API acx_status_t acx_all_gather_async_at(const char *file, int line, acx_accelerator_t *acc,
                                             const void *sendbuf, void *recvbuf, size_t count,
                                             acx_dtype_t dtype, acx_request_t **req_p);
ACX_API acx_status_t acx_gather_at(const char *file, int line, acx_accelerator_t *acc,
                                   const void *sendbuf, void *recvbuf, size_t count,
                                   acx_dtype_t dtype, int root);
ACX_API acx_status_t acx_gather_async_at(const char *file, int line, acx_accelerator_t *acc,
                                         const void *sendbuf, void *recvbuf, size_t count,
                                         acx_dtype_t dtype, int root, acx_request_t **req_p);
ACX_API acx_status_t acx_barrier_at(const char *file, int line, acx_accelerator_t *acc);
ACX_API acx_status_t acx_barrier_async_at(const char *file, int line, acx_accelerator_t *acc,
                                          acx_request_t **req_p);
ACX_API acx_status_t acx_reduce_scalar_at(const char *file, int line, acx_accelerator_t *acc,
                                          double value, acx_red_op_t op, double *out_p);
ACX_API acx_status_t acx_reduce_at(const char *file, int line, acx_accelerator_t *acc,
                                   const void *sendbuf, void *recvbuf, size_t count,
                                   acx_dtype_t dtype, acx_red_op_t op);
ACX_API acx_status_t acx_gather_for_metrics_at(const char *file, int line, acx_accelerator_t *acc,
                                               const acx_batch_t *batch, const void *local,
                                               size_t sample_bytes, void *out, int64_t out_capacity,
                                               int to_main_only, int64_t *count_p);
ACX_API acx_status_t acx_pad_across_processes_at(const char *file, int line, acx_accelerator_t *acc,
                                                 const void *buf, int64_t rows, int64_t row_numel,
                                                 acx_dtype_t dtype, double pad_value, int pad_first,
                                                 void **out_p, int64_t *max_rows_p);
ACX_API acx_status_t acx_main_process_first_begin_at(const char *file, int line,
                                                     acx_accelerator_t *acc);
ACX_API acx_status_t acx_main_process_first_end_at(const char *file, int line,
                                                   acx_accelerator_t *acc);
ACX_API acx_status_t acx_local_main_process_first_begin_at(const char *file, int line,
                                                           acx_accelerator_t *acc);
ACX_API acx_status_t acx_local_main_process_first_end_at(const char *file, int line,
                                                         acx_accelerator_t *acc);
ACX_API acx_status_t acx_check_trigger_at(const char *file, int line, acx_accelerator_t *acc,
                                          int *triggered_p);

#ifndef ACX_NO_CALL_SITE
#define ACX_AT_                           __FILE__, __LINE__
#define acx_all_reduce(...)               acx_all_reduce_at(ACX_AT_, __VA_ARGS__)
#define acx_all_reduce_async(...)         acx_all_reduce_async_at(ACX_AT_, __VA_ARGS__)
#define acx_reduce_scatter(...)           acx_reduce_scatter_at(ACX_AT_, __VA_ARGS__)
#define acx_reduce_scatter_async(...)     acx_reduce_scatter_async_at(ACX_AT_, __VA_ARGS__)
#define acx_broadcast(...)                acx_broadcast_at(ACX_AT_, __VA_ARGS__)
#define acx_broadcast_async(...)          acx_broadcast_async_at(ACX_AT_, __VA_ARGS__)
#define acx_all_gather(...)               acx_all_gather_at(ACX_AT_, __VA_ARGS__)
#define acx_all_gather_async(...)         acx_all_gather_async_at(ACX_AT_, __VA_ARGS__)
#define acx_gather(...)                   acx_gather_at(ACX_AT_, __VA_ARGS__)
#define acx_gather_async(...)             acx_gather_async_at(ACX_AT_, __VA_ARGS__)
#define acx_barrier(...)                  acx_barrier_at(ACX_AT_, __VA_ARGS__)
#define acx_barrier_async(...)            acx_barrier_async_at(ACX_AT_, __VA_ARGS__)
#define acx_reduce_scalar(...)            acx_reduce_scalar_at(ACX_AT_, __VA_ARGS__)
#define acx_reduce(...)                   acx_reduce_at(ACX_AT_, __VA_ARGS__)
#define acx_gather_for_metrics(...)       acx_gather_for_metrics_at(ACX_AT_, __VA_ARGS__)
#define acx_pad_across_processes(...)     acx_pad_across_processes_at(ACX_AT_, __VA_ARGS__)
#define acx_main_process_first_begin(...) acx_main_process_first_begin_at(ACX_AT_, __VA_ARGS__)
#define acx_main_process_first_end(...)   acx_main_process_first_end_at(ACX_AT_, __VA_ARGS__)
#define acx_local_main_process_first_begin(...)                                                    \
    acx_local_main_process_first_begin_at(ACX_AT_, __VA_ARGS__)
#define acx_local_main_process_first_end(...)                                                      \
    acx_local_main_process_first_end_at(ACX_AT_, __VA_ARGS__)
#define acx_check_trigger(...) acx_check_trigger_at(ACX_AT_, __VA_ARGS__)
#endif

#ifdef __cplusplus
}
#endif
#endif /* ACX_COLLECTIVES_H */

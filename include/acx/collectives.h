/*
 * acx/collectives.h — collectives over the world, through the accelerator's
 * backend (MPI on host memory; NCCL on device memory when built and chosen),
 * and the metrics helpers built on them.
 *
 * All functions here are collective over every rank of the world, with the
 * same count, dtype and op everywhere (acx_request_wait/test are local).
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
 *   - Buffers are host memory with the MPI backend. A blocking call may
 *     reuse them on return; an async call owns them until acx_request_wait
 *     returns (or acx_request_test reported completion): do not read the
 *     output or write the input before that.
 *   - Errors (the same on every rank when the arguments are the same):
 *     ACX_ERR_INVALID_ARG (acc NULL, a NULL buffer with count > 0, a bad
 *     dtype, op or root, req_p NULL, overlapping buffers other than the
 *     in-place forms), ACX_ERR_NOT_SUPPORTED (AVG of an integer dtype; a
 *     reduce-scatter above INT_MAX elements per rank), ACX_ERR_NO_MEMORY,
 *     ACX_ERR_MPI (MPI's own message).
 */

/* A pending non-blocking collective, from one of the *_async calls. */
typedef struct acx_request acx_request_t;

/* All-reduce: recvbuf [count] on every rank = op over ranks of sendbuf
 * [count] (element-wise). In place: sendbuf == recvbuf, or sendbuf NULL
 * (recvbuf is then the input and the output). torch.distributed.all_reduce. */
ACX_API acx_status_t acx_all_reduce(acx_accelerator_t *acc, const void *sendbuf, void *recvbuf,
                                    size_t count, acx_dtype_t dtype, acx_red_op_t op);

/* Non-blocking acx_all_reduce: starts it and writes *req_p (only on
 * success); complete it with acx_request_wait. */
ACX_API acx_status_t acx_all_reduce_async(acx_accelerator_t *acc, const void *sendbuf,
                                          void *recvbuf, size_t count, acx_dtype_t dtype,
                                          acx_red_op_t op, acx_request_t **req_p);

/* Reduce-scatter: sendbuf is [world_size x count] (block r = elements
 * [r * count, (r + 1) * count)); recvbuf [count] on rank r = op over ranks of
 * block r. In place (NCCL's rule): recvbuf == sendbuf + rank * count
 * elements; sendbuf may then be overwritten anywhere. Any other overlap is
 * ACX_ERR_INVALID_ARG. torch.distributed.reduce_scatter_tensor. */
ACX_API acx_status_t acx_reduce_scatter(acx_accelerator_t *acc, const void *sendbuf, void *recvbuf,
                                        size_t count, acx_dtype_t dtype, acx_red_op_t op);

/* Non-blocking acx_reduce_scatter; complete with acx_request_wait. */
ACX_API acx_status_t acx_reduce_scatter_async(acx_accelerator_t *acc, const void *sendbuf,
                                              void *recvbuf, size_t count, acx_dtype_t dtype,
                                              acx_red_op_t op, acx_request_t **req_p);

/* Broadcast: buf [count] of rank root is copied into buf [count] of every
 * other rank (bit for bit, any dtype). root in 0..world_size-1. */
ACX_API acx_status_t acx_broadcast(acx_accelerator_t *acc, void *buf, size_t count,
                                   acx_dtype_t dtype, int root);

/* Non-blocking acx_broadcast; complete with acx_request_wait. */
ACX_API acx_status_t acx_broadcast_async(acx_accelerator_t *acc, void *buf, size_t count,
                                         acx_dtype_t dtype, int root, acx_request_t **req_p);

/* All-gather: recvbuf [world_size x count] on every rank gets every rank's
 * sendbuf [count], in rank order (bit for bit). In place: sendbuf == recvbuf
 * + rank * count elements. torch.distributed.all_gather_into_tensor. */
ACX_API acx_status_t acx_all_gather(acx_accelerator_t *acc, const void *sendbuf, void *recvbuf,
                                    size_t count, acx_dtype_t dtype);

/* Non-blocking acx_all_gather; complete with acx_request_wait. */
ACX_API acx_status_t acx_all_gather_async(acx_accelerator_t *acc, const void *sendbuf,
                                          void *recvbuf, size_t count, acx_dtype_t dtype,
                                          acx_request_t **req_p);

/* Gather to one rank: on root, recvbuf [world_size x count] gets every
 * rank's sendbuf [count] in rank order; on the other ranks recvbuf is not
 * used and may be NULL. In place on root: sendbuf == recvbuf + root * count
 * elements. torch.distributed.gather. */
ACX_API acx_status_t acx_gather(acx_accelerator_t *acc, const void *sendbuf, void *recvbuf,
                                size_t count, acx_dtype_t dtype, int root);

/* Non-blocking acx_gather; complete with acx_request_wait. */
ACX_API acx_status_t acx_gather_async(acx_accelerator_t *acc, const void *sendbuf, void *recvbuf,
                                      size_t count, acx_dtype_t dtype, int root,
                                      acx_request_t **req_p);

/* Barrier: returns once every rank has entered it (the same as
 * acx_wait_for_everyone). */
ACX_API acx_status_t acx_barrier(acx_accelerator_t *acc);

/* Non-blocking barrier: the request completes once every rank has started it. */
ACX_API acx_status_t acx_barrier_async(acx_accelerator_t *acc, acx_request_t **req_p);

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

/* ---- metrics helpers ---- */

/* Mean (op ACX_OP_AVG) or sum/max/min of one double over ranks, into *out_p. */
ACX_API acx_status_t acx_reduce_scalar(acx_accelerator_t *acc, double value, acx_red_op_t op,
                                       double *out_p);

/* Gather per-sample values of a batch from every rank, dropping exactly the
 * even_batches padding (batch->num_padding trailing samples on each rank).
 * local: [batch->size x sample_bytes] bytes. out: receives the real samples
 * of rank 0, then rank 1, ...; capacity out_capacity samples. *count_p =
 * samples written. to_main_only: only rank 0 receives (others get *count_p = 0).
 * Errors: ACX_ERR_INVALID_ARG (capacity too small: the message gives the
 * needed count), ACX_ERR_MPI. */
ACX_API acx_status_t acx_gather_for_metrics(acx_accelerator_t *acc, const acx_batch_t *batch,
                                            const void *local, size_t sample_bytes, void *out,
                                            int64_t out_capacity, int to_main_only,
                                            int64_t *count_p);

#ifdef __cplusplus
}
#endif
#endif /* ACX_COLLECTIVES_H */

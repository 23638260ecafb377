/*
 * acx/collectives.h — collectives over the world, through the accelerator's
 * backend (MPI on host memory; NCCL on device memory when built and chosen),
 * and the metrics helpers built on them.
 *
 * All functions here are collective over every rank of the world, with the
 * same count, dtype and op everywhere.
 */
#ifndef ACX_COLLECTIVES_H
#define ACX_COLLECTIVES_H

#include "acx/status.h"
#include "acx/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A pending non-blocking collective. */
typedef struct acx_request acx_request_t;

/* All-reduce count elements of dtype: recvbuf[i] = op over ranks of sendbuf[i].
 * sendbuf == recvbuf is in place. Errors: ACX_ERR_INVALID_ARG, ACX_ERR_MPI. */
ACX_API acx_status_t acx_all_reduce(acx_accelerator_t *acc, const void *sendbuf, void *recvbuf,
                                    size_t count, acx_dtype_t dtype, acx_red_op_t op);

/* Non-blocking form: buffers must not be touched until acx_request_wait
 * returns. *req_p is freed by the wait. */
ACX_API acx_status_t acx_all_reduce_async(acx_accelerator_t *acc, const void *sendbuf,
                                          void *recvbuf, size_t count, acx_dtype_t dtype,
                                          acx_red_op_t op, acx_request_t **req_p);
ACX_API acx_status_t acx_request_wait(acx_request_t *req);

/* Broadcast count elements from root to every rank. */
ACX_API acx_status_t acx_broadcast(acx_accelerator_t *acc, void *buf, size_t count,
                                   acx_dtype_t dtype, int root);

/* All-gather: recvbuf [world_size x count] gets every rank's sendbuf [count], in rank order. */
ACX_API acx_status_t acx_all_gather(acx_accelerator_t *acc, const void *sendbuf, void *recvbuf,
                                    size_t count, acx_dtype_t dtype);

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

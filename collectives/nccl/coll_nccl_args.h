/*
 * collectives/nccl/coll_nccl_args.h — NCCL's argument rules as acx states
 * them (package-private to collectives/nccl/), shared by the NCCL backend
 * (coll_nccl.c, NCCL builds) and its test double (coll_nccl_emul.c, every
 * build), so that the double refuses exactly what the backend refuses.
 * None of them needs NCCL or CUDA: they compare numbers and addresses.
 *
 * Each check names the operation (`what`: "all-reduce", ...) and the
 * argument in its error and returns ACX_OK when the argument is fine.
 */
#ifndef ACX_COLL_NCCL_ARGS_H
#define ACX_COLL_NCCL_ARGS_H

#include <stddef.h>

#include "collectives/coll.h"

/* SUM, PROD, MAX, MIN for every dtype; AVG (ncclAvg) for float dtypes only
 * (ACX_ERR_NOT_SUPPORTED otherwise); anything else ACX_ERR_INVALID_ARG. */
acx_status_t acx_nccl_check_op(acx_red_op_t op, acx_dtype_t dtype, const char *what);

/* root is a rank of comm. */
acx_status_t acx_nccl_check_root(const acx_comm_t *comm, int root, const char *what);

/* Neither buffer is NULL when count > 0. */
acx_status_t acx_nccl_check_not_null(const void *sendbuf, const void *recvbuf, size_t count,
                                     const char *what);

/* A [size x count] buffer `whole` and this rank's block `block` [count] of
 * dtype: either the block is whole's block `rank` (in place) or they are
 * disjoint (NCCL's in-place rule for reduce-scatter, all-gather, gather);
 * `rule` says what in place means in the error. Also refuses a size that
 * overflows size_t. */
acx_status_t acx_nccl_check_in_place(const acx_comm_t *comm, const void *whole, const void *block,
                                     size_t count, acx_dtype_t dtype, const char *what,
                                     const char *rule);

/* A non-blocking start's request pointer is not NULL ("<what> start"). */
acx_status_t acx_nccl_check_req(acx_coll_req_t **req_p, const char *what);

/* base + bytes without forming NULL + 0. */
const void *acx_nccl_byte_at(const void *base, size_t bytes);

#endif /* ACX_COLL_NCCL_ARGS_H */

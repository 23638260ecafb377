/*
 * collectives/nccl/coll_nccl_args.c — NCCL's argument rules
 * (coll_nccl_args.h), compiled in every build: the NCCL backend and its
 * test double check their arguments with these same functions.
 */
#include <stdint.h>

#include "collectives/nccl/coll_nccl_args.h"
#include "base/error.h"

static int dtype_is_float(acx_dtype_t dtype) {
    return dtype == ACX_DTYPE_FLOAT32 || dtype == ACX_DTYPE_FLOAT64 || dtype == ACX_DTYPE_FLOAT16 ||
           dtype == ACX_DTYPE_BFLOAT16;
}

acx_status_t acx_nccl_check_op(acx_red_op_t op, acx_dtype_t dtype, const char *what) {
    switch (op) {
    case ACX_OP_SUM:
    case ACX_OP_PROD:
    case ACX_OP_MAX:
    case ACX_OP_MIN: return ACX_OK;
    case ACX_OP_AVG:
        if (!dtype_is_float(dtype))
            return ACX_ERROR(ACX_ERR_NOT_SUPPORTED,
                             "%s op avg needs a float dtype (float32, float64, float16, "
                             "bfloat16), got %s; use sum and divide",
                             what, acx_dtype_name(dtype));
        return ACX_OK;
    default:
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "%s: op %d is not an acx_red_op_t", what, (int)op);
    }
}

acx_status_t acx_nccl_check_root(const acx_comm_t *comm, int root, const char *what) {
    if (root < 0 || root >= comm->size)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "%s: root %d is not a rank of 0..%d", what, root,
                         comm->size - 1);
    return ACX_OK;
}

acx_status_t acx_nccl_check_not_null(const void *sendbuf, const void *recvbuf, size_t count,
                                     const char *what) {
    if (count > 0 && (sendbuf == NULL || recvbuf == NULL))
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "%s of %zu elements: %s is NULL", what, count,
                         sendbuf == NULL ? "sendbuf" : "recvbuf");
    return ACX_OK;
}

const void *acx_nccl_byte_at(const void *base, size_t bytes) {
    return bytes ? (const void *)((const char *)base + bytes) : base;
}

/* [a, a + abytes) and [b, b + bbytes) share a byte (device addresses are
 * unified virtual addresses: comparable like host ones). */
static int overlap(const void *a, size_t abytes, const void *b, size_t bbytes) {
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return abytes > 0 && bbytes > 0 && x < y + bbytes && y < x + abytes;
}

acx_status_t acx_nccl_check_in_place(const acx_comm_t *comm, const void *whole, const void *block,
                                     size_t count, acx_dtype_t dtype, const char *what,
                                     const char *rule) {
    size_t esize = acx_dtype_size(dtype), size = (size_t)comm->size;
    if (esize == 0)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "%s: dtype %d is not an acx_dtype_t", what,
                         (int)dtype);
    if (count > SIZE_MAX / esize / size)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "%s of %zu elements per rank overflows size_t", what,
                         count);
    if (count == 0 || block == acx_nccl_byte_at(whole, (size_t)comm->rank * count * esize))
        return ACX_OK;
    if (overlap(whole, size * count * esize, block, count * esize))
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "%s: the buffers overlap but not in place (in place means %s)", what,
                         rule);
    return ACX_OK;
}

acx_status_t acx_nccl_check_req(acx_coll_req_t **req_p, const char *what) {
    if (req_p == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "%s start: req_p is NULL", what);
    return ACX_OK;
}

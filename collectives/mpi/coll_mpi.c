/*
 * collectives/mpi/coll_mpi.c — the MPI backend (acx_coll_mpi_ops): all-reduce,
 * broadcast, all-gather and barrier on host memory through the MPI library,
 * and the acx -> MPI datatype and op mapping.
 *
 * What MPI 3.1 lacks is filled in here:
 *   - ACX_OP_AVG (NCCL's ncclAvg): MPI_SUM, then a division by the
 *     communicator size on the result; float32/float64 only. The
 *     non-blocking form divides when test/wait sees the request complete.
 *   - counts above INT_MAX elements (MPI takes int counts): the buffer is
 *     split into chunks of at most ACX_COLL_MPI_CHUNK_MAX elements, one MPI
 *     call (or one request) per chunk.
 * Half-precision reductions (bf16/fp16 need user-defined MPI ops) arrive with
 * mixed precision; until then they return ACX_ERR_NOT_SUPPORTED, while
 * broadcast and all-gather already move them as raw 16-bit words.
 *
 * Choosing a backend, creating communicators and status agreement live in
 * ../coll.c; this file never decides which backend runs.
 */
#include <limits.h>
#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>

#include "collectives/coll.h"
#include "runtime/base/error.h"

/* Most elements one MPI call moves. Overridable at compile time only, so the
 * chunking paths can be exercised with small buffers (-DACX_COLL_MPI_CHUNK_MAX=1000). */
#ifndef ACX_COLL_MPI_CHUNK_MAX
#define ACX_COLL_MPI_CHUNK_MAX ((size_t)INT_MAX)
#endif

/* ---- datatype and op mapping ---- */

MPI_Datatype acx_mpi_datatype(acx_dtype_t dtype) {
    switch (dtype) {
    case ACX_DTYPE_FLOAT32: return MPI_FLOAT;
    case ACX_DTYPE_FLOAT64: return MPI_DOUBLE;
    case ACX_DTYPE_INT8: return MPI_INT8_T;
    case ACX_DTYPE_UINT8: return MPI_UINT8_T;
    case ACX_DTYPE_INT32: return MPI_INT32_T;
    case ACX_DTYPE_INT64: return MPI_INT64_T;
    default: return MPI_DATATYPE_NULL; /* float16/bfloat16: no MPI reduction type yet */
    }
}

/* ACX_OP_AVG has no MPI op: callers (this backend) reduce with MPI_SUM and
 * divide. Returning MPI_SUM for it would let a caller forget the division. */
MPI_Op acx_mpi_op(acx_red_op_t op) {
    switch (op) {
    case ACX_OP_SUM: return MPI_SUM;
    case ACX_OP_MAX: return MPI_MAX;
    case ACX_OP_MIN: return MPI_MIN;
    case ACX_OP_PROD: return MPI_PROD;
    default: return MPI_OP_NULL;
    }
}

static const char *op_name(acx_red_op_t op) {
    switch (op) {
    case ACX_OP_SUM: return "sum";
    case ACX_OP_AVG: return "avg";
    case ACX_OP_MAX: return "max";
    case ACX_OP_MIN: return "min";
    case ACX_OP_PROD: return "prod";
    default: return "invalid";
    }
}

/* Type used to *move* (not reduce) elements: half-precision values travel as
 * 16-bit words, which is exact for broadcast and all-gather. */
static MPI_Datatype move_datatype(acx_dtype_t dtype) {
    if (dtype == ACX_DTYPE_FLOAT16 || dtype == ACX_DTYPE_BFLOAT16) return MPI_UINT16_T;
    return acx_mpi_datatype(dtype);
}

static int dtype_valid(acx_dtype_t dtype) { return (int)dtype >= 0 && dtype < ACX_DTYPE_COUNT_; }

/* base + bytes, without forming NULL + 0 (undefined behavior in C) for
 * empty buffers. */
static void *byte_at(const void *base, size_t bytes) {
    return bytes ? (void *)((const char *)base + bytes) : (void *)base;
}

static size_t chunk_len(size_t remaining) {
    return remaining < ACX_COLL_MPI_CHUNK_MAX ? remaining : ACX_COLL_MPI_CHUNK_MAX;
}

/* ---- argument checks ---- */

static acx_status_t check_comm(const acx_comm_t *comm, const char *what) {
    if (comm == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "%s: comm is NULL", what);
    return ACX_OK;
}

/* Check an all-reduce's arguments and give the MPI type and op to run. */
static acx_status_t check_reduce(const acx_comm_t *comm, const void *sendbuf, const void *recvbuf,
                                 size_t count, acx_dtype_t dtype, acx_red_op_t op,
                                 MPI_Datatype *type_p, MPI_Op *op_p) {
    ACX_CHECK(check_comm(comm, "all-reduce"));
    if (count > 0 && (sendbuf == NULL || recvbuf == NULL))
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "all-reduce of %zu elements: %s is NULL", count,
                         sendbuf == NULL ? "sendbuf" : "recvbuf");
    if (!dtype_valid(dtype))
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "all-reduce: dtype %d is not an acx_dtype_t",
                         (int)dtype);
    if ((int)op < 0 || op >= ACX_OP_COUNT_)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "all-reduce: op %d is not an acx_red_op_t", (int)op);
    MPI_Datatype type = acx_mpi_datatype(dtype);
    if (type == MPI_DATATYPE_NULL)
        return ACX_ERROR(ACX_ERR_NOT_SUPPORTED,
                         "all-reduce (%s) of %s is not supported by the MPI backend yet "
                         "(half-precision reduction ops come with mixed precision); reduce in "
                         "float32",
                         op_name(op), acx_dtype_name(dtype));
    if (op == ACX_OP_AVG && dtype != ACX_DTYPE_FLOAT32 && dtype != ACX_DTYPE_FLOAT64)
        return ACX_ERROR(ACX_ERR_NOT_SUPPORTED,
                         "all-reduce op avg needs float32 or float64, got %s; use sum and divide",
                         acx_dtype_name(dtype));
    *type_p = type;
    *op_p = op == ACX_OP_AVG ? MPI_SUM : acx_mpi_op(op);
    return ACX_OK;
}

/* ACX_OP_AVG's second half: buf [count] holds the sum over `size` ranks.
 * A true division (not a multiply by 1/size) so the result is the correctly
 * rounded mean of the sum, as torch's div_. */
static void avg_divide(void *buf, size_t count, acx_dtype_t dtype, int size) {
    if (size == 1) return;
    if (dtype == ACX_DTYPE_FLOAT32) {
        float *x = buf, d = (float)size;
        for (size_t i = 0; i < count; i++)
            x[i] /= d;
    } else {
        double *x = buf, d = (double)size;
        for (size_t i = 0; i < count; i++)
            x[i] /= d;
    }
}

/* ---- communicator state ---- */

/* The MPI backend needs nothing beyond the duplicated MPI communicator. */
static acx_status_t mpi_comm_init(acx_comm_t *comm) {
    comm->state = NULL;
    return ACX_OK;
}

static void mpi_comm_fini(acx_comm_t *comm) { comm->state = NULL; }

/* ---- all-reduce ---- */

static acx_status_t mpi_all_reduce(acx_comm_t *comm, const void *sendbuf, void *recvbuf,
                                   size_t count, acx_dtype_t dtype, acx_red_op_t op) {
    MPI_Datatype type;
    MPI_Op mop;
    ACX_CHECK(check_reduce(comm, sendbuf, recvbuf, count, dtype, op, &type, &mop));
    size_t esize = acx_dtype_size(dtype);
    int in_place = sendbuf == recvbuf;

    /* One call per chunk; count 0 still makes one (empty) call so every rank
     * enters the same collectives. */
    size_t done = 0;
    do {
        size_t n = chunk_len(count - done);
        const void *src = in_place ? MPI_IN_PLACE : byte_at(sendbuf, done * esize);
        ACX_MPI_CHECK(
            MPI_Allreduce(src, byte_at(recvbuf, done * esize), (int)n, type, mop, comm->mpi));
        done += n;
    } while (done < count);

    if (op == ACX_OP_AVG) avg_divide(recvbuf, count, dtype, comm->size);
    return ACX_OK;
}

/* A pending non-blocking all-reduce: one MPI request per chunk, and what the
 * AVG post-division needs once they complete. */
struct acx_coll_req {
    void *avg_buf; /* recvbuf [count] to divide by avg_size; NULL unless ACX_OP_AVG */
    size_t count;
    acx_dtype_t dtype;
    int avg_size;
    int complete; /* MPI finished and the division (if any) applied */
    int nreq;
    MPI_Request mpi[]; /* [nreq] */
};

static void req_finish(acx_coll_req_t *req) {
    if (req->avg_buf != NULL) avg_divide(req->avg_buf, req->count, req->dtype, req->avg_size);
    req->complete = 1;
}

static acx_status_t mpi_all_reduce_start(acx_comm_t *comm, const void *sendbuf, void *recvbuf,
                                         size_t count, acx_dtype_t dtype, acx_red_op_t op,
                                         acx_coll_req_t **req_p) {
    MPI_Datatype type;
    MPI_Op mop;
    acx_status_t status = ACX_OK;
    ACX_CHECK(check_reduce(comm, sendbuf, recvbuf, count, dtype, op, &type, &mop));
    if (req_p == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "all-reduce start: req_p is NULL");

    size_t nchunks = count == 0 ? 1 : (count - 1) / ACX_COLL_MPI_CHUNK_MAX + 1;
    if (nchunks > (size_t)INT_MAX)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "all-reduce start: %zu elements is too many", count);
    acx_coll_req_t *req =
        acx_malloc(sizeof *req + nchunks * sizeof(MPI_Request), "all-reduce request");
    if (req == NULL) return ACX_ERR_NO_MEMORY;
    req->avg_buf = op == ACX_OP_AVG ? recvbuf : NULL;
    req->count = count;
    req->dtype = dtype;
    req->avg_size = comm->size;
    req->complete = 0;
    req->nreq = 0;

    size_t esize = acx_dtype_size(dtype), done = 0;
    int in_place = sendbuf == recvbuf;
    do {
        size_t n = chunk_len(count - done);
        const void *src = in_place ? MPI_IN_PLACE : byte_at(sendbuf, done * esize);
        ACX_MPI_CHECK_GOTO(MPI_Iallreduce(src, byte_at(recvbuf, done * esize), (int)n, type, mop,
                                          comm->mpi, &req->mpi[req->nreq]),
                           status, err_started);
        req->nreq++;
        done += n;
    } while (done < count);
    *req_p = req;
    return ACX_OK;

err_started:
    /* Requests of a non-blocking collective may not be freed or cancelled
     * (MPI 3.1 §5.12): complete the chunks already started before giving up. */
    if (req->nreq > 0) MPI_Waitall(req->nreq, req->mpi, MPI_STATUSES_IGNORE);
    free(req);
    return status;
}

static acx_status_t mpi_test(acx_coll_req_t *req, int *done_p) {
    if (req == NULL || done_p == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "test: %s is NULL", req == NULL ? "req" : "done_p");
    if (!req->complete) {
        int flag = 0;
        ACX_MPI_CHECK(MPI_Testall(req->nreq, req->mpi, &flag, MPI_STATUSES_IGNORE));
        if (!flag) {
            *done_p = 0;
            return ACX_OK;
        }
        req_finish(req);
    }
    *done_p = 1;
    return ACX_OK;
}

static acx_status_t mpi_wait(acx_coll_req_t *req) {
    acx_status_t status = ACX_OK;
    if (req == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "wait: req is NULL");
    if (!req->complete) {
        ACX_MPI_CHECK_GOTO(MPI_Waitall(req->nreq, req->mpi, MPI_STATUSES_IGNORE), status, out_free);
        req_finish(req);
    }
out_free:
    free(req); /* the request is spent either way: the caller cannot retry it */
    return status;
}

/* ---- broadcast, all-gather, barrier ---- */

static acx_status_t mpi_broadcast(acx_comm_t *comm, void *buf, size_t count, acx_dtype_t dtype,
                                  int root) {
    ACX_CHECK(check_comm(comm, "broadcast"));
    if (!dtype_valid(dtype))
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "broadcast: dtype %d is not an acx_dtype_t",
                         (int)dtype);
    if (count > 0 && buf == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "broadcast of %zu elements: buf is NULL", count);
    if (root < 0 || root >= comm->size)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "broadcast: root %d is not a rank of 0..%d", root,
                         comm->size - 1);
    MPI_Datatype type = move_datatype(dtype);
    size_t esize = acx_dtype_size(dtype), done = 0;
    do {
        size_t n = chunk_len(count - done);
        ACX_MPI_CHECK(MPI_Bcast(byte_at(buf, done * esize), (int)n, type, root, comm->mpi));
        done += n;
    } while (done < count);
    return ACX_OK;
}

/* One chunk [off, off + n) of an all-gather whose per-rank count exceeds the
 * chunk limit. recvbuf is [size x count]: rank r's chunk belongs at
 * (r * count + off) elements, so the receive type is n contiguous elements
 * resized to an extent of count elements — MPI then strides the ranks'
 * blocks by one full per-rank row. */
static acx_status_t all_gather_chunk(acx_comm_t *comm, const void *sendbuf, void *recvbuf,
                                     size_t count, size_t off, size_t n, MPI_Datatype type,
                                     size_t esize) {
    acx_status_t status = ACX_OK;
    MPI_Datatype block = MPI_DATATYPE_NULL, row = MPI_DATATYPE_NULL;
    ACX_MPI_CHECK_GOTO(MPI_Type_contiguous((int)n, type, &block), status, out);
    ACX_MPI_CHECK_GOTO(MPI_Type_create_resized(block, 0, (MPI_Aint)(count * esize), &row), status,
                       out);
    ACX_MPI_CHECK_GOTO(MPI_Type_commit(&row), status, out);
    ACX_MPI_CHECK_GOTO(MPI_Allgather(byte_at(sendbuf, off * esize), (int)n, type,
                                     byte_at(recvbuf, off * esize), 1, row, comm->mpi),
                       status, out);
out:
    if (row != MPI_DATATYPE_NULL) MPI_Type_free(&row);
    if (block != MPI_DATATYPE_NULL) MPI_Type_free(&block);
    return status;
}

static acx_status_t mpi_all_gather(acx_comm_t *comm, const void *sendbuf, void *recvbuf,
                                   size_t count, acx_dtype_t dtype) {
    ACX_CHECK(check_comm(comm, "all-gather"));
    if (!dtype_valid(dtype))
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "all-gather: dtype %d is not an acx_dtype_t",
                         (int)dtype);
    if (count > 0 && (sendbuf == NULL || recvbuf == NULL))
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "all-gather of %zu elements: %s is NULL", count,
                         sendbuf == NULL ? "sendbuf" : "recvbuf");
    MPI_Datatype type = move_datatype(dtype);
    size_t esize = acx_dtype_size(dtype);
    if (count <= ACX_COLL_MPI_CHUNK_MAX) {
        ACX_MPI_CHECK(
            MPI_Allgather(sendbuf, (int)count, type, recvbuf, (int)count, type, comm->mpi));
        return ACX_OK;
    }
    for (size_t off = 0; off < count; off += chunk_len(count - off))
        ACX_CHECK(all_gather_chunk(comm, sendbuf, recvbuf, count, off, chunk_len(count - off), type,
                                   esize));
    return ACX_OK;
}

static acx_status_t mpi_barrier(acx_comm_t *comm) {
    ACX_CHECK(check_comm(comm, "barrier"));
    ACX_MPI_CHECK(MPI_Barrier(comm->mpi));
    return ACX_OK;
}

/* ---- the table ---- */

const acx_coll_ops_t acx_coll_mpi_ops = {
    .name = "mpi",
    .comm_init = mpi_comm_init,
    .comm_fini = mpi_comm_fini,
    .all_reduce = mpi_all_reduce,
    .all_reduce_start = mpi_all_reduce_start,
    .test = mpi_test,
    .wait = mpi_wait,
    .broadcast = mpi_broadcast,
    .all_gather = mpi_all_gather,
    .barrier = mpi_barrier,
};

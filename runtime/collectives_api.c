/*
 * runtime/collectives_api.c — the public collectives over the world
 * (acx/collectives.h) and the metrics helpers built on them.
 *
 * Thin: argument checks, then the accelerator's backend (its table of
 * blocking and non-blocking collectives, collectives/coll.h); a public
 * request wraps the backend's one. gather_for_metrics
 * is the one with logic: it drops exactly the even_batches padding, so a
 * metric over the test set counts every sample once (Accelerate's
 * gather_for_metrics, which truncates by the loader's remainder; here each
 * rank knows its own padding count, so nothing global is needed).
 */
#include <limits.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/accelerator.h"
#include "runtime/base/error.h"

/* A public request: the backend's request and the table that completes it. */
/* Pending requests are linked into their accelerator, so acx_finalize can
 * complete the ones the program never waited for (MPI_Finalize with an
 * active request is erroneous and crashes Open MPI). */
struct acx_request {
    const acx_coll_ops_t *ops;
    acx_coll_req_t *req;
    acx_accelerator_t *acc;
    acx_request_t *prev, *next;
};

static void request_link(acx_request_t *r) {
    r->prev = NULL;
    r->next = r->acc->requests;
    if (r->next) r->next->prev = r;
    r->acc->requests = r;
}

static void request_unlink(acx_request_t *r) {
    if (r->prev) r->prev->next = r->next; else r->acc->requests = r->next;
    if (r->next) r->next->prev = r->prev;
}

static acx_status_t check_args(acx_accelerator_t *acc, const void *buf, size_t count,
                               acx_dtype_t dtype, const char *fn) {
    if (acc == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "%s: acc is NULL", fn);
    if (acx_dtype_size(dtype) == 0)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "%s: invalid dtype %d", fn, (int)dtype);
    if (buf == NULL && count > 0) return ACX_ERROR(ACX_ERR_INVALID_ARG, "%s: buffer is NULL", fn);
    return ACX_OK;
}

static acx_status_t check_root(acx_accelerator_t *acc, int root, const char *fn) {
    if (root < 0 || root >= acc->world_size)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "%s: root %d outside 0..%d", fn, root,
                         acc->world_size - 1);
    return ACX_OK;
}

/* The wrapper for a backend request: allocated before the start so that a
 * started collective never has to be abandoned for lack of memory. */
static acx_status_t request_new(acx_accelerator_t *acc, acx_request_t **req_p, const char *fn,
                                acx_request_t **r_p) {
    if (req_p == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "%s: req_p is NULL", fn);
    acx_request_t *r = acx_malloc(sizeof *r, "request");
    if (r == NULL) return ACX_ERR_NO_MEMORY;
    r->ops = acc->world->ops;
    r->req = NULL;
    r->acc = acc;
    *r_p = r;
    return ACX_OK;
}

/* Hand r out when the start (status) succeeded, else free it. */
static acx_status_t request_finish(acx_status_t status, acx_request_t *r, acx_request_t **req_p) {
    if (status != ACX_OK) {
        free(r);
        return status;
    }
    request_link(r);
    *req_p = r;
    return ACX_OK;
}

/* ---- all-reduce, reduce-scatter ---- */

ACX_API acx_status_t acx_all_reduce(acx_accelerator_t *acc, const void *sendbuf, void *recvbuf,
                                    size_t count, acx_dtype_t dtype, acx_red_op_t op) {
    ACX_CHECK(check_args(acc, recvbuf, count, dtype, "acx_all_reduce"));
    if (sendbuf == NULL) sendbuf = recvbuf;
    return acc->world->ops->all_reduce(acc->world, sendbuf, recvbuf, count, dtype, op);
}

ACX_API acx_status_t acx_all_reduce_async(acx_accelerator_t *acc, const void *sendbuf,
                                          void *recvbuf, size_t count, acx_dtype_t dtype,
                                          acx_red_op_t op, acx_request_t **req_p) {
    acx_request_t *r;
    ACX_CHECK(check_args(acc, recvbuf, count, dtype, "acx_all_reduce_async"));
    ACX_CHECK(request_new(acc, req_p, "acx_all_reduce_async", &r));
    if (sendbuf == NULL) sendbuf = recvbuf;
    return request_finish(
        r->ops->all_reduce_start(acc->world, sendbuf, recvbuf, count, dtype, op, &r->req), r,
        req_p);
}

ACX_API acx_status_t acx_reduce_scatter(acx_accelerator_t *acc, const void *sendbuf, void *recvbuf,
                                        size_t count, acx_dtype_t dtype, acx_red_op_t op) {
    ACX_CHECK(check_args(acc, recvbuf, count, dtype, "acx_reduce_scatter"));
    ACX_CHECK(check_args(acc, sendbuf, count, dtype, "acx_reduce_scatter"));
    return acc->world->ops->reduce_scatter(acc->world, sendbuf, recvbuf, count, dtype, op);
}

ACX_API acx_status_t acx_reduce_scatter_async(acx_accelerator_t *acc, const void *sendbuf,
                                              void *recvbuf, size_t count, acx_dtype_t dtype,
                                              acx_red_op_t op, acx_request_t **req_p) {
    acx_request_t *r;
    ACX_CHECK(check_args(acc, recvbuf, count, dtype, "acx_reduce_scatter_async"));
    ACX_CHECK(check_args(acc, sendbuf, count, dtype, "acx_reduce_scatter_async"));
    ACX_CHECK(request_new(acc, req_p, "acx_reduce_scatter_async", &r));
    return request_finish(
        r->ops->reduce_scatter_start(acc->world, sendbuf, recvbuf, count, dtype, op, &r->req), r,
        req_p);
}

/* ---- broadcast, all-gather, gather, barrier ---- */

ACX_API acx_status_t acx_broadcast(acx_accelerator_t *acc, void *buf, size_t count,
                                   acx_dtype_t dtype, int root) {
    ACX_CHECK(check_args(acc, buf, count, dtype, "acx_broadcast"));
    ACX_CHECK(check_root(acc, root, "acx_broadcast"));
    return acc->world->ops->broadcast(acc->world, buf, count, dtype, root);
}

ACX_API acx_status_t acx_broadcast_async(acx_accelerator_t *acc, void *buf, size_t count,
                                         acx_dtype_t dtype, int root, acx_request_t **req_p) {
    acx_request_t *r;
    ACX_CHECK(check_args(acc, buf, count, dtype, "acx_broadcast_async"));
    ACX_CHECK(check_root(acc, root, "acx_broadcast_async"));
    ACX_CHECK(request_new(acc, req_p, "acx_broadcast_async", &r));
    return request_finish(r->ops->broadcast_start(acc->world, buf, count, dtype, root, &r->req), r,
                          req_p);
}

ACX_API acx_status_t acx_all_gather(acx_accelerator_t *acc, const void *sendbuf, void *recvbuf,
                                    size_t count, acx_dtype_t dtype) {
    ACX_CHECK(check_args(acc, recvbuf, count, dtype, "acx_all_gather"));
    ACX_CHECK(check_args(acc, sendbuf, count, dtype, "acx_all_gather"));
    return acc->world->ops->all_gather(acc->world, sendbuf, recvbuf, count, dtype);
}

ACX_API acx_status_t acx_all_gather_async(acx_accelerator_t *acc, const void *sendbuf,
                                          void *recvbuf, size_t count, acx_dtype_t dtype,
                                          acx_request_t **req_p) {
    acx_request_t *r;
    ACX_CHECK(check_args(acc, recvbuf, count, dtype, "acx_all_gather_async"));
    ACX_CHECK(check_args(acc, sendbuf, count, dtype, "acx_all_gather_async"));
    ACX_CHECK(request_new(acc, req_p, "acx_all_gather_async", &r));
    return request_finish(
        r->ops->all_gather_start(acc->world, sendbuf, recvbuf, count, dtype, &r->req), r, req_p);
}

ACX_API acx_status_t acx_gather(acx_accelerator_t *acc, const void *sendbuf, void *recvbuf,
                                size_t count, acx_dtype_t dtype, int root) {
    ACX_CHECK(check_args(acc, sendbuf, count, dtype, "acx_gather"));
    ACX_CHECK(check_root(acc, root, "acx_gather"));
    return acc->world->ops->gather(acc->world, sendbuf, recvbuf, count, dtype, root);
}

ACX_API acx_status_t acx_gather_async(acx_accelerator_t *acc, const void *sendbuf, void *recvbuf,
                                      size_t count, acx_dtype_t dtype, int root,
                                      acx_request_t **req_p) {
    acx_request_t *r;
    ACX_CHECK(check_args(acc, sendbuf, count, dtype, "acx_gather_async"));
    ACX_CHECK(check_root(acc, root, "acx_gather_async"));
    ACX_CHECK(request_new(acc, req_p, "acx_gather_async", &r));
    return request_finish(
        r->ops->gather_start(acc->world, sendbuf, recvbuf, count, dtype, root, &r->req), r, req_p);
}

ACX_API acx_status_t acx_barrier(acx_accelerator_t *acc) {
    if (acc == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_barrier: acc is NULL");
    return acc->world->ops->barrier(acc->world);
}

ACX_API acx_status_t acx_barrier_async(acx_accelerator_t *acc, acx_request_t **req_p) {
    acx_request_t *r;
    if (acc == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_barrier_async: acc is NULL");
    ACX_CHECK(request_new(acc, req_p, "acx_barrier_async", &r));
    return request_finish(r->ops->barrier_start(acc->world, &r->req), r, req_p);
}

/* ---- requests ---- */

ACX_API acx_status_t acx_request_wait(acx_request_t *req) {
    if (req == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_request_wait: req is NULL");
    acx_status_t st = req->ops->wait(req->req);
    request_unlink(req);
    free(req);
    return st;
}

/* Called by acx_finalize: complete what the program left pending. Returns
 * how many there were. */
int acx_requests_drain(acx_accelerator_t *acc) {
    int n = 0;
    while (acc->requests != NULL) {
        acx_request_wait(acc->requests);
        n++;
    }
    return n;
}

ACX_API acx_status_t acx_request_test(acx_request_t *req, int *done_p) {
    if (req == NULL || done_p == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_request_test: %s is NULL",
                         req == NULL ? "req" : "done_p");
    return req->ops->test(req->req, done_p);
}

/* ---- metrics ---- */

ACX_API acx_status_t acx_reduce_scalar(acx_accelerator_t *acc, double value, acx_red_op_t op,
                                       double *out_p) {
    if (acc == NULL || out_p == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_reduce_scalar: acc and out_p must not be NULL");
    double v = value;
    /* Metrics are host scalars: always MPI, whatever the data backend. */
    ACX_CHECK(acx_coll_mpi_ops.all_reduce(acc->world, &v, &v, 1, ACX_DTYPE_FLOAT64, op));
    *out_p = v;
    return ACX_OK;
}

ACX_API acx_status_t acx_gather_for_metrics(acx_accelerator_t *acc, const acx_batch_t *batch,
                                            const void *local, size_t sample_bytes, void *out,
                                            int64_t out_capacity, int to_main_only,
                                            int64_t *count_p) {
    if (acc == NULL || batch == NULL || count_p == NULL || sample_bytes == 0)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "acx_gather_for_metrics: acc, batch, count_p must not be NULL and sample_bytes > 0");
    int n = acc->world_size;
    MPI_Comm comm = acc->world->mpi;
    int64_t real = batch->size - batch->num_padding;
    if (real < 0 || (real > 0 && local == NULL))
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_gather_for_metrics: local is NULL or the batch is inconsistent");
    int64_t *counts = acx_malloc((size_t)n * sizeof *counts, "gather counts");
    int *rcounts = acx_malloc((size_t)n * sizeof *rcounts, "gather counts");
    int *displs = acx_malloc((size_t)n * sizeof *displs, "gather displacements");
    acx_status_t status = ACX_OK;
    if (counts == NULL || rcounts == NULL || displs == NULL) {
        status = ACX_ERR_NO_MEMORY;
        goto out;
    }
    ACX_MPI_CHECK_GOTO(MPI_Allgather(&real, 1, MPI_INT64_T, counts, 1, MPI_INT64_T, comm), status, out);
    int64_t total = 0;
    for (int r = 0; r < n; r++) {
        int64_t bytes = counts[r] * (int64_t)sample_bytes, at = total * (int64_t)sample_bytes;
        if (bytes > INT_MAX || at > INT_MAX) {
            status = ACX_ERROR(ACX_ERR_NOT_SUPPORTED,
                               "acx_gather_for_metrics: more than 2 GiB gathered in one call; gather in smaller pieces");
            goto out;
        }
        rcounts[r] = (int)bytes;
        displs[r] = (int)at;
        total += counts[r];
    }
    int receives = !to_main_only || acc->rank == 0;
    /* Capacity is checked on every rank against the same total, so either
     * all ranks go on to the collective or none does. */
    if (receives && total > 0 && out == NULL) {
        status = ACX_ERROR(ACX_ERR_INVALID_ARG,
                           "acx_gather_for_metrics: out is NULL on rank %d, which receives %lld samples",
                           acc->rank, (long long)total);
    } else if (receives && total > out_capacity) {
        status = ACX_ERROR(ACX_ERR_INVALID_ARG,
                           "acx_gather_for_metrics: output holds %lld samples but %lld are gathered",
                           (long long)out_capacity, (long long)total);
    }
    status = acx_coll_agree(acc->world, status);
    if (status != ACX_OK) goto out;
    int sendbytes = (int)(real * (int64_t)sample_bytes);
    if (to_main_only)
        ACX_MPI_CHECK_GOTO(MPI_Gatherv(local, sendbytes, MPI_BYTE, out, rcounts, displs, MPI_BYTE, 0, comm),
                           status, out);
    else
        ACX_MPI_CHECK_GOTO(MPI_Allgatherv(local, sendbytes, MPI_BYTE, out, rcounts, displs, MPI_BYTE, comm),
                           status, out);
    *count_p = receives ? total : 0;
out:
    free(counts);
    free(rcounts);
    free(displs);
    return status;
}

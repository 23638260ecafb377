/*
 * runtime/collectives_api.c — the public collectives over the world
 * (acx/collectives.h): all-reduce, reduce-scatter, broadcast, all-gather,
 * gather, barrier, their non-blocking forms, and public requests.
 *
 * Thin: argument checks, the debug-mode check (coll_debug.h: a counter when
 * ACX_DEBUG_MODE is off), then the accelerator's backend (its table of
 * blocking and non-blocking collectives, collectives/coll.h); a public
 * request wraps the backend's one. Each call is the *_at form that carries
 * the program's call site (the header's macros call it). Also the buffers
 * of the accelerator's memory the collectives take (acx_buffer_*, declared
 * in acx/memory.h). The evaluation helpers built on top (gather_for_metrics,
 * pad_across_processes, reduce, main_process_first, the trigger) are in
 * eval.c.
 */
/* The *_at forms are defined here under their own names: no call-site
 * macros. */
#define ACX_NO_CALL_SITE 1

#include <limits.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "base/config_resolve.h"
#include "base/error.h"
#include "device/memory.h"
#include "device/ops.h"
#include "runtime/accelerator.h"
#include "runtime/coll_debug.h"

/* A public request: the backend's request and the table that completes it.
 * Pending requests are linked into their accelerator, so acx_finalize can
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
    if (r->prev)
        r->prev->next = r->next;
    else
        r->acc->requests = r->next;
    if (r->next) r->next->prev = r->prev;
}

/* Local argument checks. Their status is not returned at once: it goes
 * through acx_coll_debug_check, so that in debug mode a bad argument on one
 * rank fails every rank instead of leaving the others in the collective. */
/* The memory space rule (acx/collectives.h): a collective's buffers live
 * where the accelerator keeps model state (acx_device_state), whatever the
 * backend. A device backend (NCCL, its test double) refuses host pointers
 * itself; with the MPI backend, which would stage either kind, a host
 * pointer under device state is refused here, so that a program behaves
 * the same on both backends. Under host state pointers are not probed: the
 * probe would create a CUDA context in a host-only program. */
static acx_status_t check_space(const acx_accelerator_t *acc, const void *buf, size_t esize,
                                const char *fn) {
    if (acc->dev == NULL || acc->coll->device_memory) return ACX_OK;
    int is_device = 0;
    if (acc->dev->emulated)
        is_device = acx_devops_emulated_owns(buf, esize);
    else
        ACX_CHECK(acx_cuda_pointer_is_device(buf, &is_device));
    if (is_device) return ACX_OK;
    return ACX_ERROR(ACX_ERR_INVALID_ARG,
                     "%s: a buffer is host memory, but this accelerator's collectives move "
                     "device memory (device_state: %s, where acx_param_data points), with every "
                     "backend: allocate it with acx_buffer_alloc, or reduce host data with "
                     "acx_reduce",
                     fn, acx_device_state_name((int)acx_device_state(acc)));
}

static acx_status_t check_args(const acx_accelerator_t *acc, const void *buf, size_t count,
                               acx_dtype_t dtype, const char *fn) {
    if (acx_dtype_size(dtype) == 0)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "%s: invalid dtype %d", fn, (int)dtype);
    if (buf == NULL && count > 0) return ACX_ERROR(ACX_ERR_INVALID_ARG, "%s: buffer is NULL", fn);
    if (buf != NULL && count > 0) return check_space(acc, buf, acx_dtype_size(dtype), fn);
    return ACX_OK;
}

static acx_status_t check_root(acx_accelerator_t *acc, int root, const char *fn) {
    if (root < 0 || root >= acc->world_size)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "%s: root %d outside 0..%d", fn, root,
                         acc->world_size - 1);
    return ACX_OK;
}

static acx_status_t check_acc(const acx_accelerator_t *acc, const char *fn) {
    if (acc == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "%s: acc is NULL", fn);
    return ACX_OK;
}

/* The wrapper for a backend request: allocated before the start (and
 * before the debug check) so that a started collective never has to be
 * abandoned for lack of memory. */
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

/* The common start of a non-blocking call: the request when the arguments
 * passed (local), then the debug check. On failure nothing is left over. */
static acx_status_t request_begin(acx_accelerator_t *acc, acx_coll_call_t call, acx_status_t local,
                                  acx_request_t **req_p, const char *fn, acx_request_t **r_p) {
    acx_request_t *r = NULL;
    if (local == ACX_OK) local = request_new(acc, req_p, fn, &r);
    acx_status_t status = acx_coll_debug_check(acc, &call, local);
    if (status != ACX_OK) {
        free(r);
        return status;
    }
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

/* The record of a call (coll_debug.h); -1: the operation has no such field. */
static acx_coll_call_t call_of(acx_coll_id_t id, size_t count, acx_dtype_t dtype, int op, int root,
                               const char *file, int line) {
    return (acx_coll_call_t){.id = id,
                             .count = count > (size_t)INT64_MAX ? INT64_MAX : (int64_t)count,
                             .dtype = (int)dtype,
                             .op = op,
                             .root = root,
                             .file = file,
                             .line = line};
}

/* ---- all-reduce, reduce-scatter ---- */

ACX_API acx_status_t acx_all_reduce_at(const char *file, int line, acx_accelerator_t *acc,
                                       const void *sendbuf, void *recvbuf, size_t count,
                                       acx_dtype_t dtype, acx_red_op_t op) {
    ACX_CHECK(check_acc(acc, "acx_all_reduce"));
    acx_coll_call_t call = call_of(ACX_COLL_ALL_REDUCE, count, dtype, (int)op, -1, file, line);
    acx_status_t local = check_args(acc, recvbuf, count, dtype, "acx_all_reduce");
    if (local == ACX_OK && sendbuf != NULL)
        local = check_args(acc, sendbuf, count, dtype, "acx_all_reduce");
    ACX_CHECK(acx_coll_debug_check(acc, &call, local));
    if (sendbuf == NULL) sendbuf = recvbuf;
    return acc->world->ops->all_reduce(acc->world, sendbuf, recvbuf, count, dtype, op);
}

ACX_API acx_status_t acx_all_reduce_async_at(const char *file, int line, acx_accelerator_t *acc,
                                             const void *sendbuf, void *recvbuf, size_t count,
                                             acx_dtype_t dtype, acx_red_op_t op,
                                             acx_request_t **req_p) {
    static const char fn[] = "acx_all_reduce_async";
    acx_request_t *r;
    ACX_CHECK(check_acc(acc, fn));
    ACX_CHECK(request_begin(
        acc, call_of(ACX_COLL_ALL_REDUCE_ASYNC, count, dtype, (int)op, -1, file, line),
        check_args(acc, recvbuf, count, dtype, fn), req_p, fn, &r));
    if (sendbuf == NULL) sendbuf = recvbuf;
    return request_finish(
        r->ops->all_reduce_start(acc->world, sendbuf, recvbuf, count, dtype, op, &r->req), r,
        req_p);
}

ACX_API acx_status_t acx_reduce_scatter_at(const char *file, int line, acx_accelerator_t *acc,
                                           const void *sendbuf, void *recvbuf, size_t count,
                                           acx_dtype_t dtype, acx_red_op_t op) {
    static const char fn[] = "acx_reduce_scatter";
    ACX_CHECK(check_acc(acc, fn));
    acx_status_t local = check_args(acc, recvbuf, count, dtype, fn);
    if (local == ACX_OK) local = check_args(acc, sendbuf, count, dtype, fn);
    acx_coll_call_t call = call_of(ACX_COLL_REDUCE_SCATTER, count, dtype, (int)op, -1, file, line);
    ACX_CHECK(acx_coll_debug_check(acc, &call, local));
    return acc->world->ops->reduce_scatter(acc->world, sendbuf, recvbuf, count, dtype, op);
}

ACX_API acx_status_t acx_reduce_scatter_async_at(const char *file, int line, acx_accelerator_t *acc,
                                                 const void *sendbuf, void *recvbuf, size_t count,
                                                 acx_dtype_t dtype, acx_red_op_t op,
                                                 acx_request_t **req_p) {
    static const char fn[] = "acx_reduce_scatter_async";
    acx_request_t *r;
    ACX_CHECK(check_acc(acc, fn));
    acx_status_t local = check_args(acc, recvbuf, count, dtype, fn);
    if (local == ACX_OK) local = check_args(acc, sendbuf, count, dtype, fn);
    ACX_CHECK(request_begin(
        acc, call_of(ACX_COLL_REDUCE_SCATTER_ASYNC, count, dtype, (int)op, -1, file, line), local,
        req_p, fn, &r));
    return request_finish(
        r->ops->reduce_scatter_start(acc->world, sendbuf, recvbuf, count, dtype, op, &r->req), r,
        req_p);
}

/* ---- broadcast, all-gather, gather, barrier ---- */

ACX_API acx_status_t acx_broadcast_at(const char *file, int line, acx_accelerator_t *acc, void *buf,
                                      size_t count, acx_dtype_t dtype, int root) {
    static const char fn[] = "acx_broadcast";
    ACX_CHECK(check_acc(acc, fn));
    acx_status_t local = check_args(acc, buf, count, dtype, fn);
    if (local == ACX_OK) local = check_root(acc, root, fn);
    acx_coll_call_t call = call_of(ACX_COLL_BROADCAST, count, dtype, -1, root, file, line);
    ACX_CHECK(acx_coll_debug_check(acc, &call, local));
    return acc->world->ops->broadcast(acc->world, buf, count, dtype, root);
}

ACX_API acx_status_t acx_broadcast_async_at(const char *file, int line, acx_accelerator_t *acc,
                                            void *buf, size_t count, acx_dtype_t dtype, int root,
                                            acx_request_t **req_p) {
    static const char fn[] = "acx_broadcast_async";
    acx_request_t *r;
    ACX_CHECK(check_acc(acc, fn));
    acx_status_t local = check_args(acc, buf, count, dtype, fn);
    if (local == ACX_OK) local = check_root(acc, root, fn);
    ACX_CHECK(request_begin(acc,
                            call_of(ACX_COLL_BROADCAST_ASYNC, count, dtype, -1, root, file, line),
                            local, req_p, fn, &r));
    return request_finish(r->ops->broadcast_start(acc->world, buf, count, dtype, root, &r->req), r,
                          req_p);
}

ACX_API acx_status_t acx_all_gather_at(const char *file, int line, acx_accelerator_t *acc,
                                       const void *sendbuf, void *recvbuf, size_t count,
                                       acx_dtype_t dtype) {
    static const char fn[] = "acx_all_gather";
    ACX_CHECK(check_acc(acc, fn));
    acx_status_t local = check_args(acc, recvbuf, count, dtype, fn);
    if (local == ACX_OK) local = check_args(acc, sendbuf, count, dtype, fn);
    acx_coll_call_t call = call_of(ACX_COLL_ALL_GATHER, count, dtype, -1, -1, file, line);
    ACX_CHECK(acx_coll_debug_check(acc, &call, local));
    return acc->world->ops->all_gather(acc->world, sendbuf, recvbuf, count, dtype);
}

ACX_API acx_status_t acx_all_gather_async_at(const char *file, int line, acx_accelerator_t *acc,
                                             const void *sendbuf, void *recvbuf, size_t count,
                                             acx_dtype_t dtype, acx_request_t **req_p) {
    static const char fn[] = "acx_all_gather_async";
    acx_request_t *r;
    ACX_CHECK(check_acc(acc, fn));
    acx_status_t local = check_args(acc, recvbuf, count, dtype, fn);
    if (local == ACX_OK) local = check_args(acc, sendbuf, count, dtype, fn);
    ACX_CHECK(request_begin(acc,
                            call_of(ACX_COLL_ALL_GATHER_ASYNC, count, dtype, -1, -1, file, line),
                            local, req_p, fn, &r));
    return request_finish(
        r->ops->all_gather_start(acc->world, sendbuf, recvbuf, count, dtype, &r->req), r, req_p);
}

ACX_API acx_status_t acx_gather_at(const char *file, int line, acx_accelerator_t *acc,
                                   const void *sendbuf, void *recvbuf, size_t count,
                                   acx_dtype_t dtype, int root) {
    static const char fn[] = "acx_gather";
    ACX_CHECK(check_acc(acc, fn));
    acx_status_t local = check_args(acc, sendbuf, count, dtype, fn);
    if (local == ACX_OK) local = check_root(acc, root, fn);
    acx_coll_call_t call = call_of(ACX_COLL_GATHER, count, dtype, -1, root, file, line);
    ACX_CHECK(acx_coll_debug_check(acc, &call, local));
    return acc->world->ops->gather(acc->world, sendbuf, recvbuf, count, dtype, root);
}

ACX_API acx_status_t acx_gather_async_at(const char *file, int line, acx_accelerator_t *acc,
                                         const void *sendbuf, void *recvbuf, size_t count,
                                         acx_dtype_t dtype, int root, acx_request_t **req_p) {
    static const char fn[] = "acx_gather_async";
    acx_request_t *r;
    ACX_CHECK(check_acc(acc, fn));
    acx_status_t local = check_args(acc, sendbuf, count, dtype, fn);
    if (local == ACX_OK) local = check_root(acc, root, fn);
    ACX_CHECK(request_begin(acc, call_of(ACX_COLL_GATHER_ASYNC, count, dtype, -1, root, file, line),
                            local, req_p, fn, &r));
    return request_finish(
        r->ops->gather_start(acc->world, sendbuf, recvbuf, count, dtype, root, &r->req), r, req_p);
}

ACX_API acx_status_t acx_barrier_at(const char *file, int line, acx_accelerator_t *acc) {
    ACX_CHECK(check_acc(acc, "acx_barrier"));
    acx_coll_call_t call = {.id = ACX_COLL_BARRIER,
                            .count = -1,
                            .dtype = -1,
                            .op = -1,
                            .root = -1,
                            .file = file,
                            .line = line};
    ACX_CHECK(acx_coll_debug_check(acc, &call, ACX_OK));
    return acc->world->ops->barrier(acc->world);
}

ACX_API acx_status_t acx_barrier_async_at(const char *file, int line, acx_accelerator_t *acc,
                                          acx_request_t **req_p) {
    static const char fn[] = "acx_barrier_async";
    acx_request_t *r;
    ACX_CHECK(check_acc(acc, fn));
    acx_coll_call_t call = {.id = ACX_COLL_BARRIER_ASYNC,
                            .count = -1,
                            .dtype = -1,
                            .op = -1,
                            .root = -1,
                            .file = file,
                            .line = line};
    ACX_CHECK(request_begin(acc, call, ACX_OK, req_p, fn, &r));
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

/* ---- buffers in the accelerator's memory (acx/memory.h) ---- */

ACX_API acx_status_t acx_buffer_alloc(acx_accelerator_t *acc, size_t bytes, void **buf_p) {
    if (acc == NULL || buf_p == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_buffer_alloc: %s is NULL",
                         acc == NULL ? "acc" : "buf_p");
    void *p = NULL;
    if (acc->dev != NULL) {
        /* the device table's alloc is zero-filled and complete on return */
        ACX_CHECK(acc->dev->alloc(bytes > 0 ? bytes : 1, "a program buffer", &p));
    } else {
        p = calloc(bytes > 0 ? bytes : 1, 1);
        if (p == NULL)
            return ACX_ERROR(ACX_ERR_NO_MEMORY, "acx_buffer_alloc: %zu bytes of host memory",
                             bytes);
    }
    *buf_p = p;
    return ACX_OK;
}

ACX_API void acx_buffer_free(acx_accelerator_t *acc, void *buf) {
    if (acc == NULL || buf == NULL) return;
    if (acc->dev != NULL) {
        /* the table's free waits for nothing: work on buf must be done */
        (void)acc->dev->sync(acc->compute_stream);
        acc->dev->free(buf);
    } else {
        free(buf);
    }
}

ACX_API acx_status_t acx_buffer_to_host(acx_accelerator_t *acc, void *host, const void *buf,
                                        size_t bytes) {
    if (acc == NULL || ((host == NULL || buf == NULL) && bytes > 0))
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_buffer_to_host: a NULL argument");
    if (bytes == 0) return ACX_OK;
    if (acc->dev != NULL) return acc->dev->to_host(host, buf, bytes, acc->compute_stream);
    memcpy(host, buf, bytes);
    return ACX_OK;
}

ACX_API acx_status_t acx_buffer_from_host(acx_accelerator_t *acc, void *buf, const void *host,
                                          size_t bytes) {
    if (acc == NULL || ((host == NULL || buf == NULL) && bytes > 0))
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_buffer_from_host: a NULL argument");
    if (bytes == 0) return ACX_OK;
    if (acc->dev != NULL) return acc->dev->to_device(buf, host, bytes, acc->compute_stream);
    memcpy(buf, host, bytes);
    return ACX_OK;
}

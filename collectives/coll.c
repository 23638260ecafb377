/*
 * collectives/coll.c — choosing the collective backend, acx communicators,
 * and status agreement across ranks.
 *
 * This is the one file that knows which backends are compiled in (Open MPI's
 * component selection, reduced to a switch). The backends themselves live in
 * their folders (mpi/, later nccl/) and know nothing about each other; the
 * layers above hold an acx_comm_t and call through comm->ops.
 */
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "collectives/coll.h"
#include "runtime/base/error.h"
#include "runtime/base/log.h"

/* ---- backend selection ---- */

#if ACX_HAVE_NCCL
#define NCCL_MISSING_WHY                                                                           \
    "NCCL was found at build time, but the NCCL backend is not implemented in this version"
#else
#define NCCL_MISSING_WHY "this build has no NCCL (configure --with-nccl)"
#endif

acx_status_t acx_coll_select(acx_backend_kind_t kind, const acx_coll_ops_t **ops_p) {
    if (ops_p == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "coll select: ops_p is NULL");
    switch (kind) {
    case ACX_BACKEND_MPI:
        ACX_DEBUG(ACX_SUBSYS_COLL, "backend: mpi (requested)");
        *ops_p = &acx_coll_mpi_ops;
        return ACX_OK;
    case ACX_BACKEND_AUTO:
        /* NCCL would rank first when a device is visible; until its backend
         * exists, AUTO always lands on MPI (host memory). */
        ACX_INFO(ACX_SUBSYS_COLL, "backend: mpi (auto; NCCL backend not available: %s)",
                 NCCL_MISSING_WHY);
        *ops_p = &acx_coll_mpi_ops;
        return ACX_OK;
    case ACX_BACKEND_NCCL:
        return ACX_ERROR(ACX_ERR_NOT_SUPPORTED,
                         "backend: nccl requested, but the NCCL backend is not available in this "
                         "build of acx %s (%s); use backend: mpi (ACX_BACKEND=mpi)",
                         acx_version(), NCCL_MISSING_WHY);
    default:
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "backend kind %d is not one of auto (0), mpi (1), nccl (2)", (int)kind);
    }
}

/* ---- communicators ---- */

/* Wrap an MPI communicator this process now owns (newcomm) with ops: on
 * failure newcomm is freed. MPI errors on acx's communicators return codes
 * instead of aborting, so ACX_MPI_CHECK turns them into statuses with
 * MPI's own message. */
static acx_status_t comm_wrap(MPI_Comm newcomm, const acx_coll_ops_t *ops, acx_comm_t **comm_p) {
    acx_status_t status = ACX_OK;
    acx_comm_t *comm = acx_calloc(1, sizeof *comm, "communicator");
    if (comm == NULL) {
        status = ACX_ERR_NO_MEMORY;
        goto err_free_mpi;
    }
    comm->mpi = newcomm;
    comm->ops = ops;
    ACX_MPI_CHECK_GOTO(MPI_Comm_set_errhandler(newcomm, MPI_ERRORS_RETURN), status, err_free);
    ACX_MPI_CHECK_GOTO(MPI_Comm_rank(newcomm, &comm->rank), status, err_free);
    ACX_MPI_CHECK_GOTO(MPI_Comm_size(newcomm, &comm->size), status, err_free);
    ACX_CHECK_GOTO(ops->comm_init(comm), status, err_free);
    *comm_p = comm;
    return ACX_OK;

err_free:
    free(comm);
err_free_mpi:
    MPI_Comm_free(&newcomm);
    return status;
}

acx_status_t acx_comm_create(MPI_Comm parent, const acx_coll_ops_t *ops, acx_comm_t **comm_p) {
    if (ops == NULL || comm_p == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "comm create: %s is NULL",
                         ops == NULL ? "ops" : "comm_p");
    if (parent == MPI_COMM_NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "comm create: parent is MPI_COMM_NULL");
    /* Dup first: it is collective, and a local failure after it cannot
     * leave other ranks waiting inside acx_comm_create. */
    MPI_Comm dup;
    ACX_MPI_CHECK(MPI_Comm_dup(parent, &dup));
    return comm_wrap(dup, ops, comm_p);
}

/* color MPI_UNDEFINED: this rank joins no new communicator; *comm_p = NULL. */
acx_status_t acx_comm_split(acx_comm_t *parent, int color, int key, acx_comm_t **comm_p) {
    if (parent == NULL || comm_p == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "comm split: %s is NULL",
                         parent == NULL ? "parent" : "comm_p");
    MPI_Comm sub;
    ACX_MPI_CHECK(MPI_Comm_split(parent->mpi, color, key, &sub));
    if (sub == MPI_COMM_NULL) {
        *comm_p = NULL;
        return ACX_OK;
    }
    return comm_wrap(sub, parent->ops, comm_p);
}

void acx_comm_destroy(acx_comm_t *comm) {
    if (comm == NULL) return;
    if (comm->ops != NULL && comm->ops->comm_fini != NULL) comm->ops->comm_fini(comm);
    /* Tolerate teardown after MPI_Finalize (an error path in a program):
     * freeing a communicator then is itself an MPI error. */
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && comm->mpi != MPI_COMM_NULL) MPI_Comm_free(&comm->mpi);
    free(comm);
}

/* ---- status agreement ---- */

/*
 * Two collectives at most:
 *   1. all-reduce MIN of (failed ? rank : INT_MAX) -> lowest failing rank F,
 *      or INT_MAX when every rank passed (then done: nothing to send);
 *   2. broadcast from F of { F's status, F's last-error text }.
 * Every rank, F included, then records "rank F: <text>", so all ranks print
 * the same line and return the same status.
 */
acx_status_t acx_coll_agree(acx_comm_t *comm, acx_status_t local) {
    if (comm == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "coll agree: comm is NULL");
    int mine = local != ACX_OK ? comm->rank : INT_MAX, lowest = INT_MAX;
    ACX_MPI_CHECK(MPI_Allreduce(&mine, &lowest, 1, MPI_INT, MPI_MIN, comm->mpi));
    if (lowest == INT_MAX) return ACX_OK;

    struct {
        int status;
        char text[ACX_ERRMSG_MAX];
    } msg = {0};
    if (comm->rank == lowest) {
        msg.status = (int)local;
        snprintf(msg.text, sizeof msg.text, "%s", acx_last_error());
    }
    ACX_MPI_CHECK(MPI_Bcast(&msg, (int)sizeof msg, MPI_BYTE, lowest, comm->mpi));
    msg.text[sizeof msg.text - 1] = '\0';

    char line[ACX_ERRMSG_MAX];
    snprintf(line, sizeof line, "rank %d: %.*s", lowest, (int)(sizeof line - 24), msg.text);
    return acx_error_set_raw((acx_status_t)msg.status, line);
}

/*
 * collectives/coll.c — choosing the collective backend, acx communicators,
 * and status agreement across ranks.
 *
 * This is the one file that knows which backends are compiled in (Open MPI's
 * component selection, reduced to a switch). The backends themselves live in
 * their folders (mpi/, nccl/) and know nothing about each other (except the
 * NCCL test double, nccl/coll_nccl_emul.c, which moves its data with the MPI
 * backend's table); the
 * layers above hold an acx_comm_t and call through comm->ops.
 */
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/coll.h"
#include "collectives/watchdog.h"
#include "device/device.h"
#include "base/config_resolve.h"
#include "base/error.h"
#include "base/log.h"

#if ACX_HAVE_NCCL
#include "collectives/nccl/coll_nccl.h"
#endif

/* ---- backend selection ---- */

#if ACX_HAVE_NCCL
/* NCCL compiled in: usable when this process sees a device. why: the
 * reason it is not. */
static int nccl_usable(char *why, size_t why_len) {
    char dev_why[256];
    if (acx_device_count(dev_why, sizeof dev_why) > 0) return 1;
    snprintf(why, why_len, "no CUDA device: %s", dev_why);
    return 0;
}
#else
static int nccl_usable(char *why, size_t why_len) {
    snprintf(why, why_len, "this build has no NCCL (configure --with-nccl)");
    return 0;
}
#endif

static const acx_coll_ops_t *nccl_ops(void) {
#if ACX_HAVE_NCCL
    return &acx_coll_nccl_ops;
#else
    return NULL;
#endif
}

/* Every compiled-in backend, for what concerns them all (acx_coll_abort_all). */
static const acx_coll_ops_t *const compiled_in[] = {
    &acx_coll_mpi_ops,
    &acx_coll_nccl_emul_ops,
#if ACX_HAVE_NCCL
    &acx_coll_nccl_ops,
#endif
};

acx_status_t acx_coll_decide(acx_backend_kind_t kind, acx_device_state_t device_state,
                             int nccl_usable, const char *nccl_why, acx_coll_pick_t *pick_p,
                             char *why, size_t why_len) {
    if (pick_p == NULL || why == NULL || why_len == 0)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "coll decide: pick_p and why must not be NULL");
    if (nccl_why == NULL) nccl_why = "";
    if (device_state < ACX_DEVICE_STATE_AUTO || device_state > ACX_DEVICE_STATE_EMULATED)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "device_state %d is not one of auto (0), host (1), cuda (2), "
                         "emulated (3)",
                         (int)device_state);
    switch (kind) {
    case ACX_BACKEND_MPI:
        snprintf(why, why_len, "requested");
        *pick_p = ACX_COLL_PICK_MPI;
        return ACX_OK;
    case ACX_BACKEND_NCCL:
        if (device_state == ACX_DEVICE_STATE_EMULATED) {
            snprintf(why, why_len, "requested with device_state: emulated: the NCCL test double");
            *pick_p = ACX_COLL_PICK_NCCL_EMULATED;
            return ACX_OK;
        }
        if (!nccl_usable)
            return ACX_ERROR(ACX_ERR_NOT_SUPPORTED,
                             "backend: nccl requested, but the NCCL backend is not available to "
                             "this rank of acx %s (%s); use backend: mpi (ACX_BACKEND=mpi)",
                             acx_version(), nccl_why);
        snprintf(why, why_len, "requested");
        *pick_p = ACX_COLL_PICK_NCCL;
        return ACX_OK;
    case ACX_BACKEND_AUTO:
        if (!nccl_usable)
            snprintf(why, why_len, "auto; NCCL backend not available: %s", nccl_why);
        else if (device_state == ACX_DEVICE_STATE_CUDA)
            snprintf(why, why_len, "auto; device_state: cuda, and NCCL and a device are usable");
        else
            snprintf(why, why_len,
                     "auto; a CUDA device and NCCL are available, but device_state: %s keeps "
                     "model state in host memory%s, which NCCL cannot reduce; set "
                     "device_state: cuda (or backend: nccl) to use them",
                     acx_device_state_name((int)device_state),
                     device_state == ACX_DEVICE_STATE_AUTO ? " (auto: host unless backend: nccl)"
                     : device_state == ACX_DEVICE_STATE_EMULATED
                         ? " (the emulated test device; its NCCL double needs backend: nccl)"
                         : "");
        *pick_p = nccl_usable && device_state == ACX_DEVICE_STATE_CUDA ? ACX_COLL_PICK_NCCL
                                                                       : ACX_COLL_PICK_MPI;
        return ACX_OK;
    default:
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "backend kind %d is not one of auto (0), mpi (1), nccl (2)", (int)kind);
    }
}

acx_status_t acx_coll_select(acx_backend_kind_t kind, acx_device_state_t device_state,
                             const acx_coll_ops_t **ops_p) {
    char nccl_why[320] = "", why[512];
    acx_coll_pick_t pick;
    if (ops_p == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "coll select: ops_p is NULL");
    int usable = nccl_usable(nccl_why, sizeof nccl_why);
    ACX_CHECK(acx_coll_decide(kind, device_state, usable, nccl_why, &pick, why, sizeof why));
    switch (pick) {
    case ACX_COLL_PICK_NCCL: *ops_p = nccl_ops(); break;
    case ACX_COLL_PICK_NCCL_EMULATED: *ops_p = &acx_coll_nccl_emul_ops; break;
    default: *ops_p = &acx_coll_mpi_ops; break;
    }
    if (kind == ACX_BACKEND_AUTO)
        ACX_INFO(ACX_SUBSYS_COLL, "backend: %s (%s)", (*ops_p)->name, why);
    else
        ACX_DEBUG(ACX_SUBSYS_COLL, "backend: %s (%s)", (*ops_p)->name, why);
    return ACX_OK;
}

acx_status_t acx_coll_device_setup(const acx_coll_ops_t *ops, int local_rank, int local_size) {
    if (ops == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "device setup: ops is NULL");
    acx_device_need_t need = ops->emulated        ? ACX_DEVICE_NEED_EMULATED
                             : ops->device_memory ? ACX_DEVICE_NEED_CUDA
                                                  : ACX_DEVICE_NEED_HOST;
    char why[256], user[96];
    if (need == ACX_DEVICE_NEED_CUDA && acx_device_count(why, sizeof why) == 0)
        return ACX_ERROR(ACX_ERR_NOT_SUPPORTED,
                         "the %s backend needs a CUDA device, and this rank has none: %s; use "
                         "backend: mpi (ACX_BACKEND=mpi)",
                         ops->name, why);
    snprintf(user, sizeof user, "%s backend", ops->name);
    return acx_device_select(need, user, local_rank, local_size);
}

void acx_coll_abort_all(void) {
    for (size_t i = 0; i < sizeof compiled_in / sizeof compiled_in[0]; i++)
        if (compiled_in[i]->abort_all != NULL) compiled_in[i]->abort_all();
}

acx_status_t acx_coll_set_compute_stream(acx_comm_t *comm, void *stream) {
    if (comm == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "set compute stream: comm is NULL");
    if (comm->ops->set_compute_stream == NULL) return ACX_OK; /* nothing to order */
    return comm->ops->set_compute_stream(comm, stream);
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
    /* watched: a rank that never arrives (stopped, stuck in its own code)
     * is named instead of leaving the others here for ever */
    ACX_MPI_CHECK(
        ACX_WATCHED("agreement", MPI_Allreduce(&mine, &lowest, 1, MPI_INT, MPI_MIN, comm->mpi)));
    if (lowest == INT_MAX) return ACX_OK;

    struct {
        int status;
        char text[ACX_ERRMSG_MAX];
    } msg = {0};
    if (comm->rank == lowest) {
        msg.status = (int)local;
        snprintf(msg.text, sizeof msg.text, "%s", acx_last_error());
    }
    ACX_MPI_CHECK(
        ACX_WATCHED("agreement", MPI_Bcast(&msg, (int)sizeof msg, MPI_BYTE, lowest, comm->mpi)));
    msg.text[sizeof msg.text - 1] = '\0';

    /* an error agreed before by the same rank (a callee's agreement inside
     * the caller's) already carries its name */
    char line[ACX_ERRMSG_MAX], prefix[32];
    snprintf(prefix, sizeof prefix, "rank %d: ", lowest);
    if (strncmp(msg.text, prefix, strlen(prefix)) == 0)
        return acx_error_set_raw((acx_status_t)msg.status, msg.text);
    snprintf(line, sizeof line, "%s%.*s", prefix, (int)(sizeof line - sizeof prefix), msg.text);
    return acx_error_set_raw((acx_status_t)msg.status, line);
}

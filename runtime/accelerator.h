/*
 * runtime/accelerator.h — the accelerator object (library-private to runtime/).
 *
 * Owns everything a process has: topology, the resolved configuration, the
 * world and node communicators, and every model, optimizer and loader the
 * program created (freed by acx_finalize in reverse order of creation).
 */
#ifndef ACX_RUNTIME_ACCELERATOR_H
#define ACX_RUNTIME_ACCELERATOR_H

#include "acx/acx.h"
#include "collectives/coll.h"
#include "base/config_resolve.h"
#include "launch/env.h"
#include "runtime/scaler.h"

#define ACX_HOST_MAX 256

struct acx_accelerator {
    int rank, world_size;
    int local_rank, local_size;
    int node_rank, num_nodes;
    int mpi_owned; /* acx called MPI_Init_thread, so acx finalizes */
    char host[ACX_HOST_MAX];
    /* what started this process (launch/env.h), read at acx_init: the one
     * source of the Slurm job for the runtime (preemption, project lock) */
    acx_launch_env_t launch;

    acx_resolved_config_t config;
    const acx_coll_ops_t *coll;
    /* device-resident model state (device_state, chosen at acx_init), or
     * NULL; the program's compute stream (acx_set_compute_stream) */
    const struct acx_devops *dev;
    void *compute_stream;
    int device; /* the CUDA device bound at acx_init (acx_device), or -1: host memory */
    acx_comm_t *world;
    acx_comm_t *node;
    /* the world on the MPI backend, for host data whatever the data backend
     * (acx_reduce, acx_reduce_scalar); == world when the backend is MPI */
    acx_comm_t *world_host;

    /* owned objects, freed in reverse order at finalize */
    acx_model_t **models;
    int num_models, cap_models;
    acx_optimizer_t **optimizers;
    int num_optimizers, cap_optimizers;
    acx_dataloader_t **loaders;
    int num_loaders, cap_loaders;

    /* the prepared training objects */
    acx_model_t *model;
    acx_optimizer_t *optimizer;
    acx_dataloader_t *loader;

    /* step state */
    int in_micro_step;
    int sync;             /* current micro-step ends at a boundary */
    int grads_reduced;    /* acx_backward_end completed a boundary's reduction this micro-step */
    int micro_since_sync; /* micro-steps accumulated in the gradients, this one included */
    int64_t micro_step;   /* micro-steps begun */
    int64_t step;         /* boundaries passed */
    acx_scaler_t scaler;  /* fp16 loss scaling (runtime/scaler.c) */
    int64_t items_local;  /* acx_accumulate_items since the last boundary (this rank) */
    int items_micro;      /* micro-steps of this window that called acx_accumulate_items */
    int64_t items_last_micro;     /* micro_step of the last such call (counts a micro-step once) */
    int items_reduced;            /* this micro-step all-reduced the boundary's item total */
    int64_t items_total;          /* the last boundary's total over ranks and micro-steps */
    struct acx_request *requests; /* public non-blocking collectives not yet waited */

    /* public collectives (runtime/coll_debug.h, runtime/eval.c) */
    uint64_t coll_seq; /* public collectives started so far; debug reports say "#seq" */
    int coll_debug;    /* ACX_DEBUG_MODE: ACX_COLL_DEBUG_UNREAD / _OFF / _ON */
    int trigger;       /* acx_set_trigger called since the last acx_check_trigger */
    int first_block;   /* inside main_process_first: 0 no, 1 world, 2 node (local_) */

    /* checkpoint state (runtime/checkpoint.c) */
    struct acx_ckpt_entry *ckpt_user; /* registered program state */
    int num_ckpt_user, cap_ckpt_user;
    uint64_t rng_seed;           /* this rank's stream is (rng_seed, rank) ... */
    uint64_t rng_counter;        /* ... at draw rng_counter */
    int rng_restored;            /* rng_seed came from a checkpoint (else: the config's seed) */
    struct acx_project *project; /* the project directory: lock, run_id (runtime/project.c) */

    /* preemption state (runtime/preempt.c) */
    int preempt_active; /* signal handlers installed: agree at every boundary */
    int preempted;      /* the job agreed to stop; its checkpoint is saved */
};

/* Optimizer internals needed by the accelerator (runtime/optimizer.c). */
void acx_optimizer_free(acx_optimizer_t *opt);
acx_status_t acx_optimizer_bind(acx_optimizer_t *opt); /* allocate state at prepare */
acx_model_t *acx_optimizer_model(acx_optimizer_t *opt);

/* Wait for and free every request the program never waited for; returns
 * their number (runtime/collectives_api.c). Collective in effect. */
int acx_requests_drain(acx_accelerator_t *acc);

/* Register an optimizer for cleanup at acx_finalize (runtime/accelerator.c). */
acx_status_t acx_accelerator_adopt_optimizer(acx_accelerator_t *acc, acx_optimizer_t *opt);

/* Checkpoint hooks (runtime/checkpoint.c): after every synchronization
 * boundary (saves when checkpoint.save_every_steps divides the step;
 * collective, as the boundary is), and at finalize. */
acx_status_t acx_checkpoint_step_end(acx_accelerator_t *acc);
void acx_checkpoint_free(acx_accelerator_t *acc);

#endif /* ACX_RUNTIME_ACCELERATOR_H */

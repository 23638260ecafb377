/*
 * launch/env.h — what started this process (library-private).
 *
 * Reads the launcher's environment variables only (no MPI): Slurm
 * (SLURM_JOB_ID, SLURM_STEP_ID, SLURM_NTASKS, SLURM_PROCID, SLURM_LOCALID,
 * SLURM_NODEID, SLURM_*NODELIST), Open MPI (OMPI_COMM_WORLD_*), PMIx
 * (PMIX_RANK, PMIX_NAMESPACE), MPICH/Hydra (PMI_RANK, PMI_SIZE,
 * MPI_LOCALRANKID, MPI_LOCALNRANKS). The runtime compares the size the
 * launcher declared with MPI's world size: N singletons (srun without PMIx
 * support) is the classic silent failure, reported here as an error; rank
 * disagreements are reported as warnings, and the whole picture is
 * formatted for the log.
 */
#ifndef ACX_LAUNCH_ENV_H
#define ACX_LAUNCH_ENV_H

#include <stddef.h>

#include "acx/status.h"

#define ACX_LAUNCH_NODE_NAME_MAX 256  /* bytes of acx_launch_env_t.node_name */
#define ACX_LAUNCH_WARNINGS_MAX  1024 /* bytes of acx_launch_env_t.warnings */

/* What the launcher says about this process. Integers are -1 where the
 * launcher does not say (declared_size: 0, as before); strings are NULL or
 * empty. Pointers are either static (launcher, *_var) or point into the
 * environment as returned by env() (nodelist, pmix_namespace): valid until
 * that variable is changed. Plain value: copy it freely, nothing to free. */
typedef struct acx_launch_env {
    const char *launcher; /* "slurm", "openmpi", "pmix", "hydra", or "none" (static) */
    int declared_size;    /* world size the launcher announced, or 0 */
    const char *size_var; /* the variable it came from ("SLURM_NTASKS"), or NULL */
    int in_slurm_job;     /* SLURM_JOB_ID set */
    long slurm_job_id;    /* 0 if unknown */

    /* The Slurm step this process is a task of: 1 only when srun launched
     * it (launcher "slurm" or "pmix" inside a step). mpirun and Hydra
     * inside an allocation run their ranks under their daemons' step,
     * whose SLURM_* task variables describe the daemons, not the ranks. */
    int in_slurm_step;
    long slurm_step_id; /* SLURM_STEP_ID, -1 outside a step */

    /* This process in the world the launcher declared (from the winning
     * launcher's own variables only; see launch/env.c). */
    int rank;                   /* SLURM_PROCID, OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK */
    const char *rank_var;       /* the variable rank came from, or NULL */
    int local_rank;             /* SLURM_LOCALID, OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID */
    const char *local_rank_var; /* or NULL */
    int local_size;             /* SLURM_STEP_TASKS_PER_NODE at node_id,
                                 * OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS */

    /* Slurm nodes: the step's inside an srun step; otherwise the job
     * allocation's (what a batch script or an mpirun inside it may use). */
    int node_id;              /* SLURM_NODEID: index of this node in nodelist */
    int num_nodes;            /* SLURM_STEP_NUM_NODES / SLURM_JOB_NUM_NODES /
                               * SLURM_NNODES, else the count of nodelist */
    const char *nodelist;     /* compact Slurm host list ("node[01-04]"), or NULL */
    const char *nodelist_var; /* SLURM_STEP_NODELIST, SLURM_JOB_NODELIST or SLURM_NODELIST */
    char node_name[ACX_LAUNCH_NODE_NAME_MAX]; /* host node_id of nodelist, or "" */

    const char *pmix_namespace; /* PMIX_NAMESPACE, or NULL */

    /* Variables that were set but malformed or inconsistent, and ignored:
     * "SLURM_NTASKS='abc' ignored (expected an integer >= 1); ...". Empty
     * when all is well. The runtime logs it as a warning. */
    char warnings[ACX_LAUNCH_WARNINGS_MAX];
} acx_launch_env_t;

/* Fill *out from the environment read through env (getenv when NULL).
 * Never fails and never blocks a run: a malformed or contradictory value
 * (SLURM_NTASKS=abc, SLURM_PROCID=9 of 4 tasks, a host list that does not
 * parse) is left out (-1 / 0 / NULL) and described in out->warnings; MPI's
 * own rank and size stay authoritative, and the singleton check only fires
 * on a well-formed declared size. The calling thread's last-error message
 * is left as it was. */
void acx_launch_env_detect(const char *(*env)(const char *name), acx_launch_env_t *out);

/* The one rule for "inside a Slurm allocation": SLURM_JOB_ID (or the older
 * SLURM_JOBID) is set and not empty. Returns the variable's name and, in
 * *value_p (may be NULL), its text; NULL outside an allocation. env as for
 * acx_launch_env_detect (NULL = the process environment). Local, reads no
 * other state. Used by acx_launch_env_detect and launch/command.c. */
const char *acx_launch_slurm_job_var(const char *(*env)(const char *name), const char **value_p);

/* ACX_ERR_STATE when the launcher declared size > 1 but MPI sees
 * mpi_world_size == 1 (singletons), with a message saying what to run
 * instead: `srun --mpi=pmix` (and `srun --mpi=list`) when the size came
 * from Slurm, the mpirun of the MPI acx was built with otherwise.
 * ACX_ERR_INVALID_ARG for e == NULL or mpi_world_size < 1. */
acx_status_t acx_launch_env_check(const acx_launch_env_t *e, int mpi_world_size);

/* After MPI is up: compare the launcher's rank and local rank with MPI's
 * (pass -1 for a value MPI did not compute). Disagreement is not an error
 * (an MPI library may reorder ranks, e.g. with a rankfile), so this only
 * writes a one-line warning naming the variables and values into
 * warning[size] and returns 1; returns 0 (warning untouched) when they agree
 * or the launcher did not say. */
int acx_launch_env_check_rank(const acx_launch_env_t *e, int mpi_rank, int mpi_local_rank,
                              char *warning, size_t size);

/* Describe *e for the log and `acx env`, e.g.
 *   launcher slurm (job 1234, step 0): rank 3/8, local rank 1/2, node 1/4 (node02),
 *     nodes node[01-04]
 * (one line) followed, when e->warnings is not empty, by a second line
 *   launcher warnings: <e->warnings>
 * (lines separated by '\n', no trailing newline). Unknown numbers print
 * as '?'. Writes at most size bytes, always NUL-terminated when size > 0,
 * and returns the length the whole text has (as snprintf does). */
size_t acx_launch_env_format(const acx_launch_env_t *e, char *buf, size_t size);

#endif /* ACX_LAUNCH_ENV_H */

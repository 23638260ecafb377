/*
 * slurm/launch_env.h — what started this process (library-private).
 *
 * Reads the launcher's environment variables only (no MPI): Slurm
 * (SLURM_JOB_ID, SLURM_NTASKS, SLURM_PROCID), Open MPI (OMPI_COMM_WORLD_SIZE),
 * PMIx (PMIX_RANK), MPICH/Hydra (PMI_SIZE). The runtime compares the size the
 * launcher declared with MPI's world size: N singletons (srun without PMIx
 * support) is the classic silent failure, reported here as an error.
 */
#ifndef ACX_SLURM_LAUNCH_ENV_H
#define ACX_SLURM_LAUNCH_ENV_H

#include "acx/status.h"

typedef struct acx_launch_env {
    const char *launcher;  /* "slurm", "openmpi", "pmix", "hydra", or "none" (static) */
    int declared_size;     /* world size the launcher announced, or 0 */
    const char *size_var;  /* the variable it came from ("SLURM_NTASKS"), or NULL */
    int in_slurm_job;      /* SLURM_JOB_ID set */
    long slurm_job_id;
} acx_launch_env_t;

/* Fill *out from the environment read through env (getenv in production). */
void acx_launch_env_detect(const char *(*env)(const char *name), acx_launch_env_t *out);

/* ACX_ERR_STATE when the launcher declared size > 1 but MPI sees
 * mpi_world_size == 1 (singletons), with a message saying what to run
 * instead (srun --mpi=pmix). */
acx_status_t acx_launch_env_check(const acx_launch_env_t *e, int mpi_world_size);

#endif /* ACX_SLURM_LAUNCH_ENV_H */

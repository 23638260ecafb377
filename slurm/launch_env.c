/*
 * slurm/launch_env.c — who started this process, and whether MPI agrees.
 *
 * Owns: reading the launchers' environment variables (Slurm, Open MPI's
 * mpirun, PMIx, MPICH's Hydra) into an acx_launch_env_t, and the singleton
 * check that turns "srun without PMIx started N processes that each think
 * they are rank 0 of 1" from a silent N-fold duplicate run into an error.
 * Leaves to others: MPI itself (the caller passes MPI's world size), logging
 * the result (runtime/), generating sbatch scripts and requeue (later files
 * in this folder). Makes no MPI call and keeps no state.
 *
 * Which variable announces the world size, in order of trust:
 *
 *   OMPI_COMM_WORLD_SIZE  set by Open MPI's mpirun/prterun for every rank.
 *                         Wins over Slurm: mpirun inside an allocation
 *                         starts its daemons with srun, so the ranks also
 *                         inherit that daemon step's SLURM_STEP_NUM_TASKS
 *                         (one per node), which is not the world size.
 *   PMI_SIZE              set by Hydra's mpiexec (and by srun --mpi=pmi2,
 *                         where it equals SLURM_STEP_NUM_TASKS; that case is
 *                         labelled "slurm"). Wins over Slurm for the same
 *                         reason: Hydra starts its proxies with srun.
 *   SLURM_STEP_NUM_TASKS  inside an srun step only (SLURM_STEP_ID is set);
 *   SLURM_NTASKS,         falling back to these when a step lacks the
 *   SLURM_NPROCS          step variable (old Slurm).
 *
 * Outside a step — a process run directly by the batch script or in an
 * salloc shell — SLURM_NTASKS is the size of the allocation, not of a world
 * this process belongs to: no size is declared, so a single-process program
 * (preprocessing, evaluation) in a batch script is not mistaken for a
 * singleton. Batch scripts carry SLURM_PROCID=0 too, so SLURM_PROCID alone
 * does not mean "inside srun"; SLURM_STEP_ID does.
 *
 * PMIX_RANK without any of the above means a PMIx launcher that announces no
 * size in the environment. Inside a Slurm step it means srun --mpi=pmix: the
 * label is "pmix" and the size is Slurm's. Note that Open MPI's singleton
 * MPI_Init sets PMIX_RANK=0 itself, so detect before MPI_Init for a faithful
 * label; the check below does not depend on the label.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/error.h"
#include "slurm/launch_env.h"

/* ---- parsing ---- */

static const char *env_getenv(const char *name) { return getenv(name); }

/* A whole decimal number in [1, LONG_MAX]; anything else (empty, "4x",
 * "-1", overflow) is treated as absent so a mangled variable cannot invent
 * a world size. */
static int parse_positive(const char *text, long *value_p) {
    if (text == NULL || *text < '0' || *text > '9') return 0;
    char *end = NULL;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || v < 1) return 0;
    *value_p = v;
    return 1;
}

/* The first variable of names[] holding a positive int: its value into
 * *size_p and its name into *var_p. Returns 0 if none does. */
static int first_size(const char *(*env)(const char *), const char *const *names, int count,
                      int *size_p, const char **var_p) {
    for (int i = 0; i < count; i++) {
        long v;
        if (parse_positive(env(names[i]), &v) && v <= INT_MAX) {
            *size_p = (int)v;
            *var_p = names[i];
            return 1;
        }
    }
    return 0;
}

/* ---- detection ---- */

void acx_launch_env_detect(const char *(*env)(const char *name), acx_launch_env_t *out) {
    static const char *const ompi_vars[] = {"OMPI_COMM_WORLD_SIZE"};
    static const char *const hydra_vars[] = {"PMI_SIZE"};
    /* Inside a step srun rewrites SLURM_NTASKS/SLURM_NPROCS to the step's
     * count too, but SLURM_STEP_NUM_TASKS is the one meant for it. */
    static const char *const step_vars[] = {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS",
                                            "SLURM_NPROCS"};
    if (out == NULL) return;
    if (env == NULL) env = env_getenv;

    acx_launch_env_t e = {.launcher = "none", .declared_size = 0, .size_var = NULL,
                          .in_slurm_job = 0, .slurm_job_id = 0};

    long job_id = 0;
    const char *job_text = env("SLURM_JOB_ID");
    if (job_text == NULL) job_text = env("SLURM_JOBID"); /* pre-2.x name, still exported */
    if (job_text != NULL) {
        e.in_slurm_job = 1;
        if (parse_positive(job_text, &job_id)) e.slurm_job_id = job_id;
    }
    int in_step = e.in_slurm_job && (env("SLURM_STEP_ID") != NULL || env("SLURM_STEPID") != NULL);

    int slurm_size = 0;
    const char *slurm_var = NULL;
    if (in_step) first_size(env, step_vars, 3, &slurm_size, &slurm_var);

    int size = 0;
    const char *var = NULL;
    if (first_size(env, ompi_vars, 1, &size, &var)) {
        e.launcher = "openmpi";
        e.declared_size = size;
        e.size_var = var;
    } else if (first_size(env, hydra_vars, 1, &size, &var)) {
        /* srun --mpi=pmi2 exports PMI_SIZE equal to the step's task count:
         * Slurm launched it, not Hydra. */
        e.launcher = (slurm_var != NULL && slurm_size == size) ? "slurm" : "hydra";
        e.declared_size = size;
        e.size_var = var;
    } else if (env("PMIX_RANK") != NULL) {
        e.launcher = "pmix";
        e.declared_size = slurm_size; /* PMIx puts no size in the environment */
        e.size_var = slurm_var;
    } else if (e.in_slurm_job) {
        e.launcher = "slurm";
        e.declared_size = slurm_size; /* 0 outside a step: see the file comment */
        e.size_var = slurm_var;
    }
    *out = e;
}

/* ---- the singleton check ---- */

acx_status_t acx_launch_env_check(const acx_launch_env_t *e, int mpi_world_size) {
    if (e == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_launch_env_check: launch environment is NULL");
    if (mpi_world_size < 1)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "acx_launch_env_check: MPI world size %d, expected >= 1",
                         mpi_world_size);
    if (e->declared_size <= 1 || mpi_world_size != 1) return ACX_OK;

    const char *var = e->size_var != NULL ? e->size_var : "(unknown variable)";
    /* The size came from Slurm: srun started the tasks, but without a PMI
     * plugin the MPI library could use, so each MPI_Init made a world of
     * one. (With --mpi=pmix the label may read "pmix": the remedy is the
     * same, and `srun --mpi=list` shows what this Slurm offers.) */
    if (strncmp(var, "SLURM_", 6) == 0)
        return ACX_ERROR(ACX_ERR_STATE,
                         "launcher declared %d processes (%s=%d) but MPI sees a world of 1: "
                         "srun started %d independent singletons, each believing it is rank 0 "
                         "of 1. Use `srun --mpi=pmix` (check `srun --mpi=list`; or set "
                         "MpiDefault=pmix in slurm.conf)",
                         e->declared_size, var, e->declared_size, e->declared_size);
    /* Another MPI's launcher (e.g. MPICH's mpiexec starting an Open MPI
     * program, or the reverse): the ranks cannot find each other. */
    return ACX_ERROR(ACX_ERR_STATE,
                     "launcher declared %d processes (%s=%d, %s) but MPI sees a world of 1: "
                     "the program was started by a launcher of a different MPI library than "
                     "the one acx was built with, so each process initialized alone. Use the "
                     "mpirun of the MPI acx was built with (`mpirun --version` names it)",
                     e->declared_size, var, e->declared_size, e->launcher);
}

/*
 * tests/unit/test_launch_env.c — launcher detection and the singleton check
 * (slurm/launch_env.c), single process.
 *
 * Each case describes a launcher by the exact variables it exports (taken
 * from what srun, sbatch, Open MPI's mpirun and Hydra set) through a fake
 * environment, so no real launcher is needed and the process's own
 * environment is never read or changed.
 */
#include "tests/acx_test.h"

#include "slurm/launch_env.h"

/* ---- the fake environment ---- */

#define FAKE_MAX 16
static const char *fake_names[FAKE_MAX];
static const char *fake_values[FAKE_MAX];
static int fake_count;

/* Replace the fake environment with a NULL-terminated list of
 * name, value pairs. */
static void fake_set(const char *const *pairs) {
    fake_count = 0;
    for (int i = 0; pairs[i] != NULL && fake_count < FAKE_MAX; i += 2) {
        fake_names[fake_count] = pairs[i];
        fake_values[fake_count] = pairs[i + 1];
        fake_count++;
    }
}

static const char *fake_env(const char *name) {
    for (int i = 0; i < fake_count; i++)
        if (strcmp(fake_names[i], name) == 0) return fake_values[i];
    return NULL;
}

static acx_launch_env_t detect(const char *const *pairs) {
    acx_launch_env_t e;
    memset(&e, 0xab, sizeof e); /* detect must write every field */
    fake_set(pairs);
    acx_launch_env_detect(fake_env, &e);
    return e;
}

static int same(const char *a, const char *b) {
    return (a == NULL && b == NULL) || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

/* ---- detection ---- */

static int test_none(void) {
    TESTING("no launcher: none, size 0");
    acx_launch_env_t e = detect((const char *[]){NULL});
    CHECK(same(e.launcher, "none"));
    CHECK(e.declared_size == 0);
    CHECK(e.size_var == NULL);
    CHECK(e.in_slurm_job == 0);
    CHECK(e.slurm_job_id == 0);
    CHECK_OK(acx_launch_env_check(&e, 1));
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int test_srun_step(void) {
    TESTING("srun step: SLURM_STEP_NUM_TASKS preferred");
    /* sbatch -n 8, then srun -n 4 inside it: the step's count is the world. */
    acx_launch_env_t e = detect((const char *[]){
        "SLURM_JOB_ID", "81723", "SLURM_NTASKS", "8", "SLURM_NPROCS", "8", "SLURM_STEP_ID", "0",
        "SLURM_STEPID", "0", "SLURM_PROCID", "2", "SLURM_STEP_NUM_TASKS", "4", NULL});
    CHECK(same(e.launcher, "slurm"));
    CHECK(e.declared_size == 4);
    CHECK(same(e.size_var, "SLURM_STEP_NUM_TASKS"));
    CHECK(e.in_slurm_job == 1);
    CHECK(e.slurm_job_id == 81723);
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int test_srun_fallbacks(void) {
    TESTING("srun step without step count: NTASKS, then NPROCS");
    acx_launch_env_t e = detect((const char *[]){"SLURM_JOBID", "7", "SLURM_STEPID", "3",
                                                 "SLURM_NTASKS", "6", "SLURM_NPROCS", "5",
                                                 NULL});
    CHECK(same(e.launcher, "slurm"));
    CHECK(e.declared_size == 6);
    CHECK(same(e.size_var, "SLURM_NTASKS"));
    CHECK(e.slurm_job_id == 7);
    /* A mangled value is skipped, never parsed as a prefix ("4x" is not 4). */
    e = detect((const char *[]){"SLURM_JOB_ID", "7", "SLURM_STEP_ID", "0",
                                "SLURM_STEP_NUM_TASKS", "4x", "SLURM_NTASKS", "",
                                "SLURM_NPROCS", "3", NULL});
    CHECK(e.declared_size == 3);
    CHECK(same(e.size_var, "SLURM_NPROCS"));
    e = detect((const char *[]){"SLURM_JOB_ID", "7", "SLURM_STEP_ID", "0",
                                "SLURM_STEP_NUM_TASKS", "-2", NULL});
    CHECK(e.declared_size == 0);
    CHECK(e.size_var == NULL);
    e = detect((const char *[]){"SLURM_JOB_ID", "7", "SLURM_STEP_ID", "0",
                                "SLURM_STEP_NUM_TASKS", "99999999999999999999", NULL});
    CHECK(e.declared_size == 0);
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int test_batch_shell(void) {
    TESTING("batch script (no step): job seen, no size declared");
    /* What sbatch -n 4 gives the batch script itself: SLURM_PROCID=0 but no
     * step variables. A single process there is legitimate. */
    acx_launch_env_t e = detect((const char *[]){"SLURM_JOB_ID", "555", "SLURM_NTASKS", "4",
                                                 "SLURM_NPROCS", "4", "SLURM_PROCID", "0",
                                                 NULL});
    CHECK(same(e.launcher, "slurm"));
    CHECK(e.in_slurm_job == 1);
    CHECK(e.slurm_job_id == 555);
    CHECK(e.declared_size == 0);
    CHECK(e.size_var == NULL);
    CHECK_OK(acx_launch_env_check(&e, 1));
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int test_openmpi(void) {
    TESTING("Open MPI mpirun: OMPI_COMM_WORLD_SIZE wins over Slurm/PMIx");
    acx_launch_env_t e = detect((const char *[]){"OMPI_COMM_WORLD_SIZE", "3",
                                                 "OMPI_COMM_WORLD_RANK", "1", "PMIX_RANK", "1",
                                                 NULL});
    CHECK(same(e.launcher, "openmpi"));
    CHECK(e.declared_size == 3);
    CHECK(same(e.size_var, "OMPI_COMM_WORLD_SIZE"));
    CHECK(e.in_slurm_job == 0);
    /* mpirun -np 2 inside a 2-node allocation: the ranks inherit the
     * daemon step's SLURM_STEP_NUM_TASKS=2 (one daemon per node)... */
    e = detect((const char *[]){"SLURM_JOB_ID", "9", "SLURM_STEP_ID", "0",
                                "SLURM_STEP_NUM_TASKS", "2", "OMPI_COMM_WORLD_SIZE", "1",
                                "PMIX_RANK", "0", NULL});
    CHECK(same(e.launcher, "openmpi"));
    CHECK(e.declared_size == 1);
    CHECK(e.in_slurm_job == 1);
    CHECK(e.slurm_job_id == 9);
    /* ...and mpirun -np 1 there is a consistent world of one. */
    CHECK_OK(acx_launch_env_check(&e, 1));
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int test_pmix(void) {
    TESTING("PMIx: srun --mpi=pmix takes Slurm's size; alone, none");
    acx_launch_env_t e = detect((const char *[]){"SLURM_JOB_ID", "12", "SLURM_STEP_ID", "1",
                                                 "SLURM_STEP_NUM_TASKS", "4", "SLURM_PROCID",
                                                 "3", "PMIX_RANK", "3", NULL});
    CHECK(same(e.launcher, "pmix"));
    CHECK(e.declared_size == 4);
    CHECK(same(e.size_var, "SLURM_STEP_NUM_TASKS"));
    CHECK(e.in_slurm_job == 1);
    e = detect((const char *[]){"PMIX_RANK", "0", "PMIX_NAMESPACE", "prterun-x-1", NULL});
    CHECK(same(e.launcher, "pmix"));
    CHECK(e.declared_size == 0);
    CHECK(e.size_var == NULL);
    CHECK(e.in_slurm_job == 0);
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int test_hydra(void) {
    TESTING("MPICH Hydra: PMI_SIZE; srun --mpi=pmi2 labelled slurm");
    acx_launch_env_t e = detect((const char *[]){"PMI_SIZE", "5", "PMI_RANK", "4", NULL});
    CHECK(same(e.launcher, "hydra"));
    CHECK(e.declared_size == 5);
    CHECK(same(e.size_var, "PMI_SIZE"));
    /* Hydra inside an allocation starts proxies with srun (2 nodes). */
    e = detect((const char *[]){"SLURM_JOB_ID", "4", "SLURM_STEP_ID", "0",
                                "SLURM_STEP_NUM_TASKS", "2", "PMI_SIZE", "8", NULL});
    CHECK(same(e.launcher, "hydra"));
    CHECK(e.declared_size == 8);
    e = detect((const char *[]){"SLURM_JOB_ID", "4", "SLURM_STEP_ID", "0",
                                "SLURM_STEP_NUM_TASKS", "8", "PMI_SIZE", "8", NULL});
    CHECK(same(e.launcher, "slurm"));
    CHECK(e.declared_size == 8);
    CHECK(same(e.size_var, "PMI_SIZE"));
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

/* ---- the check ---- */

static int test_singletons(void) {
    TESTING("srun singletons: ACX_ERR_STATE naming the variable and fix");
    acx_launch_env_t e = detect((const char *[]){"SLURM_JOB_ID", "81723", "SLURM_STEP_ID", "0",
                                                 "SLURM_STEP_NUM_TASKS", "4", NULL});
    CHECK_STATUS(acx_launch_env_check(&e, 1), ACX_ERR_STATE,
                 "launcher declared 4 processes (SLURM_STEP_NUM_TASKS=4) but MPI sees a world "
                 "of 1");
    const char *msg = acx_last_error();
    CHECK(strstr(msg, "srun started 4 independent singletons") != NULL);
    CHECK(strstr(msg, "`srun --mpi=pmix`") != NULL);
    CHECK(strstr(msg, "`srun --mpi=list`") != NULL);
    CHECK(strstr(msg, "launch_env.c:") != NULL); /* recorded where detected */
    /* After an Open MPI singleton's MPI_Init, PMIX_RANK=0 is set: same advice. */
    e = detect((const char *[]){"SLURM_JOB_ID", "1", "SLURM_STEP_ID", "0",
                                "SLURM_STEP_NUM_TASKS", "2", "PMIX_RANK", "0", NULL});
    CHECK_STATUS(acx_launch_env_check(&e, 1), ACX_ERR_STATE, "`srun --mpi=pmix`");
    CHECK(strstr(acx_last_error(), "(SLURM_STEP_NUM_TASKS=2)") != NULL);
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int test_foreign_launcher(void) {
    TESTING("foreign mpirun singletons: advice names mpirun, not srun");
    acx_launch_env_t e = detect((const char *[]){"PMI_SIZE", "3", NULL});
    CHECK_STATUS(acx_launch_env_check(&e, 1), ACX_ERR_STATE,
                 "launcher declared 3 processes (PMI_SIZE=3, hydra) but MPI sees a world of 1");
    CHECK(strstr(acx_last_error(), "mpirun of the MPI acx was built with") != NULL);
    CHECK(strstr(acx_last_error(), "srun") == NULL);
    e = detect((const char *[]){"OMPI_COMM_WORLD_SIZE", "2", NULL});
    CHECK_STATUS(acx_launch_env_check(&e, 1), ACX_ERR_STATE, "(OMPI_COMM_WORLD_SIZE=2, openmpi)");
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int test_consistent(void) {
    TESTING("consistent launches and bad arguments");
    acx_launch_env_t e = detect((const char *[]){"SLURM_JOB_ID", "2", "SLURM_STEP_ID", "0",
                                                 "SLURM_STEP_NUM_TASKS", "4", "PMIX_RANK", "0",
                                                 NULL});
    CHECK_OK(acx_launch_env_check(&e, 4));
    e = detect((const char *[]){"OMPI_COMM_WORLD_SIZE", "1", NULL});
    CHECK_OK(acx_launch_env_check(&e, 1));
    /* Only a world of 1 against a declared N > 1 is the singleton signature;
     * other sizes are the MPI library's business. */
    e = detect((const char *[]){"OMPI_COMM_WORLD_SIZE", "4", NULL});
    CHECK_OK(acx_launch_env_check(&e, 2));
    CHECK_STATUS(acx_launch_env_check(NULL, 1), ACX_ERR_INVALID_ARG, "NULL");
    CHECK_STATUS(acx_launch_env_check(&e, 0), ACX_ERR_INVALID_ARG, "MPI world size 0");
    acx_launch_env_detect(fake_env, NULL); /* must not crash */
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

int main(void) {
    acx_test_watchdog(60);
    int failed = 0;
    failed += test_none();
    failed += test_srun_step();
    failed += test_srun_fallbacks();
    failed += test_batch_shell();
    failed += test_openmpi();
    failed += test_pmix();
    failed += test_hydra();
    failed += test_singletons();
    failed += test_foreign_launcher();
    failed += test_consistent();
    if (failed) printf("%d launch_env case(s) FAILED\n", failed);
    return failed ? 1 : 0;
}

/*
 * tests/unit/test_launch_env.c — launcher detection, the singleton check, the
 * rank cross-check and the log description (launch/env.c), single
 * process.
 *
 * Each case describes a launcher by the exact variables it exports (taken
 * from what srun, sbatch, Open MPI's mpirun and Hydra set; the srun, srun
 * --mpi=pmix, --mpi=pmi2, sbatch and sbatch+mpirun sets were checked against
 * Slurm 22.05 with Open MPI 4.1.4) through a fake environment, so no real
 * launcher is needed and the process's own environment is never read or
 * changed.
 */
#include "tests/acx_test.h"

#include "base/error.h"
#include "launch/env.h"

/* ---- the fake environment ---- */

#define FAKE_MAX 32
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
                                                 "SLURM_NTASKS", "6", "SLURM_NPROCS", "5", NULL});
    CHECK(same(e.launcher, "slurm"));
    CHECK(e.declared_size == 6);
    CHECK(same(e.size_var, "SLURM_NTASKS"));
    CHECK(e.slurm_job_id == 7);
    /* A mangled value is skipped, never parsed as a prefix ("4x" is not 4). */
    e = detect((const char *[]){"SLURM_JOB_ID", "7", "SLURM_STEP_ID", "0", "SLURM_STEP_NUM_TASKS",
                                "4x", "SLURM_NTASKS", "", "SLURM_NPROCS", "3", NULL});
    CHECK(e.declared_size == 3);
    CHECK(same(e.size_var, "SLURM_NPROCS"));
    e = detect((const char *[]){"SLURM_JOB_ID", "7", "SLURM_STEP_ID", "0", "SLURM_STEP_NUM_TASKS",
                                "-2", NULL});
    CHECK(e.declared_size == 0);
    CHECK(e.size_var == NULL);
    e = detect((const char *[]){"SLURM_JOB_ID", "7", "SLURM_STEP_ID", "0", "SLURM_STEP_NUM_TASKS",
                                "99999999999999999999", NULL});
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
                                                 "SLURM_NPROCS", "4", "SLURM_PROCID", "0", NULL});
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
    acx_launch_env_t e = detect((const char *[]){
        "OMPI_COMM_WORLD_SIZE", "3", "OMPI_COMM_WORLD_RANK", "1", "PMIX_RANK", "1", NULL});
    CHECK(same(e.launcher, "openmpi"));
    CHECK(e.declared_size == 3);
    CHECK(same(e.size_var, "OMPI_COMM_WORLD_SIZE"));
    CHECK(e.in_slurm_job == 0);
    /* mpirun -np 2 inside a 2-node allocation: the ranks inherit the
     * daemon step's SLURM_STEP_NUM_TASKS=2 (one daemon per node)... */
    e = detect((const char *[]){"SLURM_JOB_ID", "9", "SLURM_STEP_ID", "0", "SLURM_STEP_NUM_TASKS",
                                "2", "OMPI_COMM_WORLD_SIZE", "1", "PMIX_RANK", "0", NULL});
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
    acx_launch_env_t e =
        detect((const char *[]){"SLURM_JOB_ID", "12", "SLURM_STEP_ID", "1", "SLURM_STEP_NUM_TASKS",
                                "4", "SLURM_PROCID", "3", "PMIX_RANK", "3", NULL});
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
    e = detect((const char *[]){"SLURM_JOB_ID", "4", "SLURM_STEP_ID", "0", "SLURM_STEP_NUM_TASKS",
                                "2", "PMI_SIZE", "8", NULL});
    CHECK(same(e.launcher, "hydra"));
    CHECK(e.declared_size == 8);
    e = detect((const char *[]){"SLURM_JOB_ID", "4", "SLURM_STEP_ID", "0", "SLURM_STEP_NUM_TASKS",
                                "8", "PMI_SIZE", "8", NULL});
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
    CHECK(strstr(msg, "launch/env.c:") != NULL); /* recorded where detected */
    CHECK(strcmp(strstr(msg, ": launcher declared") + 2,
                 "launcher declared 4 processes (SLURM_STEP_NUM_TASKS=4) but MPI sees a world "
                 "of 1: srun started 4 independent singletons, each believing it is rank 0 of "
                 "1. Use `srun --mpi=pmix` (check `srun --mpi=list`; or set MpiDefault=pmix in "
                 "slurm.conf)") == 0);
    /* After an Open MPI singleton's MPI_Init, PMIX_RANK=0 is set: same advice. */
    e = detect((const char *[]){"SLURM_JOB_ID", "1", "SLURM_STEP_ID", "0", "SLURM_STEP_NUM_TASKS",
                                "2", "PMIX_RANK", "0", NULL});
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
    CHECK(strcmp(strstr(acx_last_error(), ": launcher declared") + 2,
                 "launcher declared 3 processes (PMI_SIZE=3, hydra) but MPI sees a world of 1: "
                 "the program was started by a launcher of a different MPI library than the "
                 "one acx was built with, so each process initialized alone. Use the mpirun of "
                 "the MPI acx was built with (`mpirun --version` names it)") == 0);
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
    acx_launch_env_t e =
        detect((const char *[]){"SLURM_JOB_ID", "2", "SLURM_STEP_ID", "0", "SLURM_STEP_NUM_TASKS",
                                "4", "PMIX_RANK", "0", NULL});
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

/* ---- ranks, nodes and the description ---- */

/* The description of e must be exactly `want`. */
static int formats_as(const acx_launch_env_t *e, const char *want) {
    char buf[2048];
    size_t n = acx_launch_env_format(e, buf, sizeof buf);
    if (strcmp(buf, want) != 0 || n != strlen(want)) {
        fprintf(stderr, "\nformat gave (%zu):\n  %s\nexpected:\n  %s\n", n, buf, want);
        return 0;
    }
    return 1;
}

static int test_srun_pmix_full(void) {
    TESTING("srun --mpi=pmix, 8 tasks on 4 nodes: every field");
    /* sbatch -N 4 -n 8, then srun --mpi=pmix: task 3 is the second task on
     * the second node. */
    acx_launch_env_t e = detect((const char *[]){"SLURM_JOB_ID",
                                                 "1234",
                                                 "SLURM_JOBID",
                                                 "1234",
                                                 "SLURM_STEP_ID",
                                                 "0",
                                                 "SLURM_STEPID",
                                                 "0",
                                                 "SLURM_PROCID",
                                                 "3",
                                                 "SLURM_LOCALID",
                                                 "1",
                                                 "SLURM_NODEID",
                                                 "1",
                                                 "SLURM_NTASKS",
                                                 "8",
                                                 "SLURM_NPROCS",
                                                 "8",
                                                 "SLURM_STEP_NUM_TASKS",
                                                 "8",
                                                 "SLURM_STEP_NUM_NODES",
                                                 "4",
                                                 "SLURM_NNODES",
                                                 "4",
                                                 "SLURM_JOB_NUM_NODES",
                                                 "4",
                                                 "SLURM_STEP_NODELIST",
                                                 "node[01-04]",
                                                 "SLURM_JOB_NODELIST",
                                                 "node[01-04]",
                                                 "SLURM_NODELIST",
                                                 "node[01-04]",
                                                 "SLURM_STEP_TASKS_PER_NODE",
                                                 "2(x4)",
                                                 "SLURM_TASKS_PER_NODE",
                                                 "2(x4)",
                                                 "PMIX_RANK",
                                                 "3",
                                                 "PMIX_NAMESPACE",
                                                 "slurm.pmix.1234.0",
                                                 NULL});
    CHECK(same(e.launcher, "pmix"));
    CHECK(e.declared_size == 8);
    CHECK(same(e.size_var, "SLURM_STEP_NUM_TASKS"));
    CHECK(e.in_slurm_job == 1 && e.slurm_job_id == 1234);
    CHECK(e.in_slurm_step == 1 && e.slurm_step_id == 0);
    CHECK(e.rank == 3 && same(e.rank_var, "SLURM_PROCID"));
    CHECK(e.local_rank == 1 && same(e.local_rank_var, "SLURM_LOCALID"));
    CHECK(e.local_size == 2);
    CHECK(e.node_id == 1 && e.num_nodes == 4);
    CHECK(same(e.nodelist, "node[01-04]") && same(e.nodelist_var, "SLURM_STEP_NODELIST"));
    CHECK(strcmp(e.node_name, "node02") == 0);
    CHECK(same(e.pmix_namespace, "slurm.pmix.1234.0"));
    CHECK(strcmp(e.warnings, "") == 0);
    CHECK(formats_as(&e, "launcher pmix (job 1234, step 0): rank 3/8, local rank 1/2, node 1/4 "
                         "(node02), nodes node[01-04]"));
    CHECK_OK(acx_launch_env_check(&e, 8));
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int test_srun_subset(void) {
    TESTING("srun step on part of the allocation: the step's nodes");
    /* sbatch -N 4 (node[01-04]), then srun -N 2 -n 3 -w node[03-04]: 2 tasks
     * on node03, 1 on node04; task 2 is alone on node04 (step node 1).
     * SLURM_NODEID indexes the step's list, not the job's. */
    acx_launch_env_t e = detect((const char *[]){"SLURM_JOB_ID",
                                                 "77",
                                                 "SLURM_STEP_ID",
                                                 "2",
                                                 "SLURM_PROCID",
                                                 "2",
                                                 "SLURM_LOCALID",
                                                 "0",
                                                 "SLURM_NODEID",
                                                 "1",
                                                 "SLURM_NTASKS",
                                                 "3",
                                                 "SLURM_STEP_NUM_TASKS",
                                                 "3",
                                                 "SLURM_STEP_NUM_NODES",
                                                 "2",
                                                 "SLURM_NNODES",
                                                 "2",
                                                 "SLURM_JOB_NUM_NODES",
                                                 "4",
                                                 "SLURM_STEP_NODELIST",
                                                 "node[03-04]",
                                                 "SLURM_JOB_NODELIST",
                                                 "node[01-04]",
                                                 "SLURM_STEP_TASKS_PER_NODE",
                                                 "2,1",
                                                 NULL});
    CHECK(same(e.launcher, "slurm"));
    CHECK(e.declared_size == 3 && e.rank == 2 && e.local_rank == 0 && e.local_size == 1);
    CHECK(e.node_id == 1 && e.num_nodes == 2);
    CHECK(strcmp(e.node_name, "node04") == 0);
    CHECK(e.slurm_step_id == 2);
    CHECK(e.pmix_namespace == NULL);
    CHECK(formats_as(&e, "launcher slurm (job 77, step 2): rank 2/3, local rank 0/1, node 1/2 "
                         "(node04), nodes node[03-04]"));
    /* Same step, the first task: 2 tasks on step node 0. */
    e = detect((const char *[]){"SLURM_JOB_ID", "77", "SLURM_STEP_ID", "2", "SLURM_PROCID", "0",
                                "SLURM_LOCALID", "0", "SLURM_NODEID", "0", "SLURM_STEP_NUM_TASKS",
                                "3", "SLURM_STEP_NUM_NODES", "2", "SLURM_STEP_NODELIST",
                                "node[03-04]", "SLURM_STEP_TASKS_PER_NODE", "2,1", NULL});
    CHECK(e.local_size == 2 && strcmp(e.node_name, "node03") == 0);
    /* An old srun without step node variables: the job's list and count. */
    e = detect((const char *[]){"SLURM_JOBID", "5", "SLURM_STEPID", "0", "SLURM_PROCID", "1",
                                "SLURM_NODEID", "1", "SLURM_NPROCS", "2", "SLURM_NODELIST",
                                "a[7-8]", NULL});
    CHECK(e.num_nodes == 2 && same(e.nodelist_var, "SLURM_NODELIST"));
    CHECK(strcmp(e.node_name, "a8") == 0);
    CHECK(e.local_size == -1 && e.local_rank == -1);
    CHECK(formats_as(&e, "launcher slurm (job 5, step 0): rank 1/2, node 1/2 (a8), nodes a[7-8]"));
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int test_batch_fields(void) {
    TESTING("sbatch script without srun: the allocation, no world");
    /* The batch shell of sbatch -N 4 -n 8, as Slurm 22.05 sets it. */
    acx_launch_env_t e = detect((const char *[]){"SLURM_JOB_ID",
                                                 "555",
                                                 "SLURM_JOBID",
                                                 "555",
                                                 "SLURM_JOB_NODELIST",
                                                 "node[01-04]",
                                                 "SLURM_NODELIST",
                                                 "node[01-04]",
                                                 "SLURM_JOB_NUM_NODES",
                                                 "4",
                                                 "SLURM_NNODES",
                                                 "4",
                                                 "SLURM_LOCALID",
                                                 "0",
                                                 "SLURM_NODEID",
                                                 "0",
                                                 "SLURM_PROCID",
                                                 "0",
                                                 "SLURM_NTASKS",
                                                 "8",
                                                 "SLURM_NPROCS",
                                                 "8",
                                                 "SLURM_TASKS_PER_NODE",
                                                 "2(x4)",
                                                 NULL});
    CHECK(same(e.launcher, "slurm"));
    CHECK(e.declared_size == 0 && e.size_var == NULL);
    CHECK(e.in_slurm_step == 0 && e.slurm_step_id == -1);
    CHECK(e.rank == -1 && e.rank_var == NULL);
    CHECK(e.local_rank == -1 && e.local_size == -1);
    CHECK(e.node_id == 0 && e.num_nodes == 4);
    CHECK(same(e.nodelist_var, "SLURM_JOB_NODELIST") && strcmp(e.node_name, "node01") == 0);
    CHECK(strcmp(e.warnings, "") == 0);
    CHECK(formats_as(&e, "launcher slurm (job 555, no srun step): node 0/4 (node01), allocation "
                         "node[01-04]"));
    CHECK_OK(acx_launch_env_check(&e, 1));
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int test_mpirun_in_allocation(void) {
    TESTING("mpirun inside an allocation: Open MPI's ranks, job's nodes");
    /* mpirun -np 4 in sbatch -N 2: rank 3 runs on node02 under the orted
     * started by srun, so it inherits that daemon step (1 task on 1 node,
     * SLURM_PROCID 0, SLURM_NODEID 0), none of which describes the rank. */
    acx_launch_env_t e = detect((const char *[]){"SLURM_JOB_ID",
                                                 "9",
                                                 "SLURM_STEP_ID",
                                                 "0",
                                                 "SLURM_STEP_NUM_TASKS",
                                                 "1",
                                                 "SLURM_NTASKS",
                                                 "1",
                                                 "SLURM_PROCID",
                                                 "0",
                                                 "SLURM_LOCALID",
                                                 "0",
                                                 "SLURM_NODEID",
                                                 "0",
                                                 "SLURM_STEP_NODELIST",
                                                 "node02",
                                                 "SLURM_STEP_NUM_NODES",
                                                 "1",
                                                 "SLURM_NNODES",
                                                 "1",
                                                 "SLURM_JOB_NUM_NODES",
                                                 "2",
                                                 "SLURM_JOB_NODELIST",
                                                 "node[01-02]",
                                                 "OMPI_COMM_WORLD_SIZE",
                                                 "4",
                                                 "OMPI_COMM_WORLD_RANK",
                                                 "3",
                                                 "OMPI_COMM_WORLD_LOCAL_RANK",
                                                 "1",
                                                 "OMPI_COMM_WORLD_LOCAL_SIZE",
                                                 "2",
                                                 "OMPI_COMM_WORLD_NODE_RANK",
                                                 "1",
                                                 "PMIX_RANK",
                                                 "3",
                                                 "PMIX_NAMESPACE",
                                                 "1963982849",
                                                 NULL});
    CHECK(same(e.launcher, "openmpi"));
    CHECK(e.declared_size == 4 && same(e.size_var, "OMPI_COMM_WORLD_SIZE"));
    CHECK(e.rank == 3 && same(e.rank_var, "OMPI_COMM_WORLD_RANK"));
    CHECK(e.local_rank == 1 && same(e.local_rank_var, "OMPI_COMM_WORLD_LOCAL_RANK"));
    CHECK(e.local_size == 2);
    CHECK(e.in_slurm_job == 1 && e.in_slurm_step == 0 && e.slurm_step_id == -1);
    CHECK(e.node_id == -1 && strcmp(e.node_name, "") == 0);
    CHECK(e.num_nodes == 2 && same(e.nodelist, "node[01-02]"));
    CHECK(same(e.nodelist_var, "SLURM_JOB_NODELIST"));
    CHECK(strcmp(e.warnings, "") == 0);
    CHECK(formats_as(&e, "launcher openmpi (inside Slurm job 9): rank 3/4, local rank 1/2, node "
                         "?/2, allocation node[01-02]"));
    CHECK_OK(acx_launch_env_check(&e, 4));
    /* The same outside Slurm, as on one machine. */
    e = detect((const char *[]){"OMPI_COMM_WORLD_SIZE", "2", "OMPI_COMM_WORLD_RANK", "0",
                                "OMPI_COMM_WORLD_LOCAL_RANK", "0", "OMPI_COMM_WORLD_LOCAL_SIZE",
                                "2", "PMIX_RANK", "0", "PMIX_NAMESPACE", "1963982849", NULL});
    CHECK(e.in_slurm_job == 0 && e.num_nodes == -1 && e.nodelist == NULL);
    CHECK(formats_as(&e, "launcher openmpi: rank 0/2, local rank 0/2"));
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int test_hydra_and_pmix_fields(void) {
    TESTING("Hydra, srun --mpi=pmi2, bare PMIx, none: fields");
    acx_launch_env_t e = detect((const char *[]){
        "PMI_RANK", "4", "PMI_SIZE", "5", "MPI_LOCALRANKID", "0", "MPI_LOCALNRANKS", "2", NULL});
    CHECK(same(e.launcher, "hydra"));
    CHECK(e.rank == 4 && same(e.rank_var, "PMI_RANK"));
    CHECK(e.local_rank == 0 && same(e.local_rank_var, "MPI_LOCALRANKID") && e.local_size == 2);
    CHECK(e.node_id == -1 && e.num_nodes == -1 && e.slurm_step_id == -1);
    CHECK(formats_as(&e, "launcher hydra: rank 4/5, local rank 0/2"));
    /* srun --mpi=pmi2 -n 2 (Slurm 22.05): PMI_* beside the step's SLURM_*. */
    e = detect((const char *[]){"SLURM_JOB_ID",
                                "9",
                                "SLURM_STEP_ID",
                                "0",
                                "SLURM_PROCID",
                                "1",
                                "SLURM_LOCALID",
                                "1",
                                "SLURM_NODEID",
                                "0",
                                "SLURM_STEP_NUM_TASKS",
                                "2",
                                "SLURM_STEP_NUM_NODES",
                                "1",
                                "SLURM_STEP_NODELIST",
                                "vm",
                                "SLURM_STEP_TASKS_PER_NODE",
                                "2",
                                "PMI_FD",
                                "13",
                                "PMI_JOBID",
                                "9.0",
                                "PMI_RANK",
                                "1",
                                "PMI_SIZE",
                                "2",
                                NULL});
    CHECK(same(e.launcher, "slurm") && e.in_slurm_step == 1);
    CHECK(e.rank == 1 && same(e.rank_var, "SLURM_PROCID"));
    CHECK(formats_as(&e, "launcher slurm (job 9, step 0): rank 1/2, local rank 1/2, node 0/1 "
                         "(vm), nodes vm"));
    /* prterun without Open MPI's variables: a rank, nothing else. */
    e = detect((const char *[]){"PMIX_RANK", "2", "PMIX_NAMESPACE", "prterun-x-1", NULL});
    CHECK(e.rank == 2 && same(e.rank_var, "PMIX_RANK") && e.local_rank == -1);
    CHECK(same(e.pmix_namespace, "prterun-x-1"));
    CHECK(formats_as(&e, "launcher pmix (namespace prterun-x-1): rank 2/?"));
    e = detect((const char *[]){NULL});
    CHECK(e.rank == -1 && e.local_rank == -1 && e.local_size == -1 && e.node_id == -1);
    CHECK(e.num_nodes == -1 && e.nodelist == NULL && e.nodelist_var == NULL);
    CHECK(e.rank_var == NULL && e.local_rank_var == NULL && e.pmix_namespace == NULL);
    CHECK(e.in_slurm_step == 0 && e.slurm_step_id == -1);
    CHECK(strcmp(e.node_name, "") == 0 && strcmp(e.warnings, "") == 0);
    CHECK(formats_as(&e, "launcher none: no launcher variables"));
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

/* ---- malformed values: warned about and ignored ---- */

static int test_malformed(void) {
    TESTING("malformed values: ignored, each named in the warnings");
    acx_launch_env_t e = detect((const char *[]){"SLURM_JOB_ID",
                                                 "12",
                                                 "SLURM_STEP_ID",
                                                 "0",
                                                 "SLURM_STEP_NUM_TASKS",
                                                 "abc",
                                                 "SLURM_NTASKS",
                                                 "4",
                                                 "SLURM_PROCID",
                                                 "-1",
                                                 "SLURM_LOCALID",
                                                 "5",
                                                 "SLURM_STEP_TASKS_PER_NODE",
                                                 "2(x2)",
                                                 "SLURM_NODEID",
                                                 "1",
                                                 "SLURM_STEP_NUM_NODES",
                                                 "2",
                                                 "SLURM_STEP_NODELIST",
                                                 "n[1-2]",
                                                 NULL});
    CHECK(e.declared_size == 4 && same(e.size_var, "SLURM_NTASKS"));
    CHECK(e.rank == -1 && e.rank_var == NULL);
    CHECK(e.local_rank == -1 && e.local_rank_var == NULL && e.local_size == 2);
    CHECK(e.node_id == 1 && strcmp(e.node_name, "n2") == 0);
    CHECK(strcmp(e.warnings, "SLURM_STEP_NUM_TASKS='abc' ignored (expected an integer >= 1); "
                             "SLURM_PROCID='-1' ignored (expected an integer >= 0); "
                             "SLURM_LOCALID=5 ignored (not below the local size 2)") == 0);
    CHECK(formats_as(&e, "launcher slurm (job 12, step 0): rank ?/4, local rank ?/2, node 1/2 "
                         "(n2), nodes n[1-2]\nlauncher warnings: SLURM_STEP_NUM_TASKS='abc' "
                         "ignored (expected an integer >= 1); SLURM_PROCID='-1' ignored "
                         "(expected an integer >= 0); SLURM_LOCALID=5 ignored (not below the "
                         "local size 2)"));
    /* A malformed size never makes the singleton check fire... */
    CHECK_OK(acx_launch_env_check(&e, 4));
    /* ...and with no valid size left, it cannot. */
    e = detect(
        (const char *[]){"SLURM_JOB_ID", "12", "SLURM_STEP_ID", "0", "SLURM_NTASKS", "4 ", NULL});
    CHECK(e.declared_size == 0);
    CHECK(strcmp(e.warnings, "SLURM_NTASKS='4 ' ignored (expected an integer >= 1)") == 0);
    CHECK_OK(acx_launch_env_check(&e, 1));

    e = detect((const char *[]){"SLURM_JOB_ID", "x1", "SLURM_STEP_ID", "batch",
                                "SLURM_STEP_NUM_TASKS", "4", "SLURM_PROCID", "9", NULL});
    CHECK(e.in_slurm_job == 1 && e.slurm_job_id == 0 && e.in_slurm_step == 1);
    CHECK(e.slurm_step_id == -1 && e.rank == -1);
    CHECK(strcmp(e.warnings, "SLURM_JOB_ID='x1' ignored (expected an integer >= 1); "
                             "SLURM_STEP_ID='batch' ignored (expected an integer >= 0); "
                             "SLURM_PROCID=9 ignored (not below the world size "
                             "SLURM_STEP_NUM_TASKS=4)") == 0);
    CHECK(strncmp(e.warnings, "SLURM_JOB_ID", 12) == 0);
    char buf[512];
    acx_launch_env_format(&e, buf, sizeof buf);
    static const char head[] = "launcher slurm (job ?, step ?): rank ?/4\nlauncher warnings: ";
    CHECK(strncmp(buf, head, sizeof head - 1) == 0);
    CHECK(strcmp(buf + sizeof head - 1, e.warnings) == 0);
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int test_malformed_nodes(void) {
    TESTING("bad node lists, counts and ids: warned, last error kept");
    acx_error_set_raw(ACX_ERR_IO, "an earlier error");
    acx_launch_env_t e = detect((const char *[]){"SLURM_JOB_ID", "3", "SLURM_STEP_ID", "0",
                                                 "SLURM_STEP_NUM_TASKS", "2", "SLURM_PROCID", "0",
                                                 "SLURM_NODEID", "0", "SLURM_STEP_NUM_NODES", "2",
                                                 "SLURM_STEP_NODELIST", "node[5-3]", NULL});
    CHECK(strcmp(acx_last_error(), "an earlier error") == 0);
    CHECK(e.nodelist == NULL && e.nodelist_var == NULL && strcmp(e.node_name, "") == 0);
    CHECK(e.num_nodes == 2 && e.node_id == 0);
    CHECK(strcmp(e.warnings, "SLURM_STEP_NODELIST ignored: host list \"node[5-3]\", character "
                             "6: reversed range \"5-3\" (expected low <= high)") == 0);
    /* The count disagrees with the list: no node name is guessed. */
    e = detect((const char *[]){"SLURM_JOB_ID", "3", "SLURM_STEP_ID", "0", "SLURM_NODEID", "1",
                                "SLURM_STEP_NUM_NODES", "3", "SLURM_STEP_NODELIST", "n[1-2]",
                                NULL});
    CHECK(e.num_nodes == 3 && e.node_id == 1 && strcmp(e.node_name, "") == 0);
    CHECK(strcmp(e.warnings, "SLURM_STEP_NUM_NODES=3 but SLURM_STEP_NODELIST lists 2 nodes") == 0);
    /* A node id past the node count. */
    e = detect((const char *[]){"SLURM_JOB_ID", "3", "SLURM_STEP_ID", "0", "SLURM_NODEID", "4",
                                "SLURM_STEP_NODELIST", "n[1-4]", NULL});
    CHECK(e.num_nodes == 4 && e.node_id == -1 && strcmp(e.node_name, "") == 0);
    CHECK(strcmp(e.warnings, "SLURM_NODEID=4 ignored (not below the node count 4)") == 0);
    /* Per-node task counts: malformed, and too short for this node. */
    e = detect((const char *[]){"SLURM_JOB_ID", "3", "SLURM_STEP_ID", "0", "SLURM_NODEID", "1",
                                "SLURM_STEP_TASKS_PER_NODE", "2(x", NULL});
    CHECK(e.local_size == -1);
    CHECK(strcmp(e.warnings, "SLURM_STEP_TASKS_PER_NODE='2(x' ignored (expected counts like "
                             "\"2(x3),1\")") == 0);
    e = detect((const char *[]){"SLURM_JOB_ID", "3", "SLURM_STEP_ID", "0", "SLURM_NODEID", "3",
                                "SLURM_STEP_TASKS_PER_NODE", "4(x2),1", NULL});
    CHECK(e.local_size == -1);
    CHECK(strcmp(e.warnings, "SLURM_STEP_TASKS_PER_NODE='4(x2),1' ignored (no entry for node "
                             "3)") == 0);
    e = detect((const char *[]){"SLURM_JOB_ID", "3", "SLURM_STEP_ID", "0", "SLURM_NODEID", "2",
                                "SLURM_STEP_TASKS_PER_NODE", "4(x2),1", NULL});
    CHECK(e.local_size == 1 && strcmp(e.warnings, "") == 0);
    /* srun --mpi=pmix where PMIx and Slurm disagree on the rank. */
    e = detect((const char *[]){"SLURM_JOB_ID", "3", "SLURM_STEP_ID", "0", "SLURM_PROCID", "1",
                                "PMIX_RANK", "0", NULL});
    CHECK(e.rank == 1);
    CHECK(strcmp(e.warnings, "PMIX_RANK=0 disagrees with SLURM_PROCID=1") == 0);
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int test_warnings_overflow(void) {
    TESTING("too many warnings: truncated with '...'");
    const char *v = "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx";
    /* 11 malformed variables of ~100 characters each exceed 1023. */
    acx_launch_env_t e = detect((const char *[]){"SLURM_JOB_ID",
                                                 "1",
                                                 "SLURM_STEP_ID",
                                                 v,
                                                 "SLURM_STEP_NUM_TASKS",
                                                 v,
                                                 "SLURM_NTASKS",
                                                 v,
                                                 "SLURM_NPROCS",
                                                 v,
                                                 "SLURM_PROCID",
                                                 v,
                                                 "SLURM_LOCALID",
                                                 v,
                                                 "SLURM_NODEID",
                                                 v,
                                                 "SLURM_STEP_NUM_NODES",
                                                 v,
                                                 "SLURM_NNODES",
                                                 v,
                                                 "SLURM_STEP_NODELIST",
                                                 v,
                                                 "PMIX_RANK",
                                                 v,
                                                 NULL});
    size_t n = strlen(e.warnings);
    CHECK(n == ACX_LAUNCH_WARNINGS_MAX - 1);
    CHECK(strcmp(e.warnings + n - 3, "...") == 0);
    /* The size variables are read first (they choose the launcher). */
    CHECK(strncmp(e.warnings, "SLURM_STEP_NUM_TASKS='xxxx", 26) == 0);
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

/* ---- the rank cross-check and formatting limits ---- */

static int test_check_rank(void) {
    TESTING("rank cross-check: a warning text, never an error");
    acx_launch_env_t e = detect((const char *[]){"SLURM_JOB_ID", "1", "SLURM_STEP_ID", "0",
                                                 "SLURM_STEP_NUM_TASKS", "4", "SLURM_PROCID", "3",
                                                 "SLURM_LOCALID", "1", "PMIX_RANK", "3", NULL});
    char w[512];
    strcpy(w, "untouched");
    CHECK(acx_launch_env_check_rank(&e, 3, 1, w, sizeof w) == 0);
    CHECK(acx_launch_env_check_rank(&e, 3, -1, w, sizeof w) == 0);
    CHECK(strcmp(w, "untouched") == 0);
    CHECK(acx_launch_env_check_rank(&e, 2, 1, w, sizeof w) == 1);
    CHECK(strcmp(w, "launcher pmix numbers this process differently from MPI: SLURM_PROCID=3 "
                    "but MPI rank 2 (acx uses MPI's numbering; a rankfile or the MPI library "
                    "may have reordered the ranks)") == 0);
    CHECK(acx_launch_env_check_rank(&e, 2, 0, w, sizeof w) == 1);
    CHECK(strcmp(w, "launcher pmix numbers this process differently from MPI: SLURM_PROCID=3 "
                    "but MPI rank 2, SLURM_LOCALID=1 but MPI local rank 0 (acx uses MPI's "
                    "numbering; a rankfile or the MPI library may have reordered the ranks)") == 0);
    e = detect((const char *[]){"OMPI_COMM_WORLD_SIZE", "2", "OMPI_COMM_WORLD_RANK", "1",
                                "OMPI_COMM_WORLD_LOCAL_RANK", "1", NULL});
    CHECK(acx_launch_env_check_rank(&e, 1, 0, w, sizeof w) == 1);
    CHECK(strcmp(w, "launcher openmpi numbers this process differently from MPI: "
                    "OMPI_COMM_WORLD_LOCAL_RANK=1 but MPI local rank 0 (acx uses MPI's "
                    "numbering; a rankfile or the MPI library may have reordered the ranks)") == 0);
    /* Nothing declared: nothing to disagree with. */
    e = detect((const char *[]){NULL});
    strcpy(w, "untouched");
    CHECK(acx_launch_env_check_rank(&e, 5, 2, w, sizeof w) == 0);
    CHECK(strcmp(w, "untouched") == 0);
    CHECK(acx_launch_env_check_rank(NULL, 0, 0, w, sizeof w) == 0);
    /* A small buffer holds a truncated, terminated text. */
    e = detect((const char *[]){"PMI_SIZE", "2", "PMI_RANK", "0", NULL});
    CHECK(acx_launch_env_check_rank(&e, 1, -1, w, 16) == 1);
    CHECK(strcmp(w, "launcher hydra ") == 0);
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int test_format_limits(void) {
    TESTING("format: snprintf-like length, truncation, NULL");
    acx_launch_env_t e = detect((const char *[]){"PMI_SIZE", "5", "PMI_RANK", "4", NULL});
    const char *full = "launcher hydra: rank 4/5";
    char buf[64];
    CHECK(acx_launch_env_format(&e, NULL, 0) == strlen(full));
    memset(buf, 'z', sizeof buf);
    CHECK(acx_launch_env_format(&e, buf, 10) == strlen(full));
    CHECK(strcmp(buf, "launcher ") == 0);
    CHECK(buf[10] == 'z'); /* nothing past size */
    CHECK(acx_launch_env_format(&e, buf, sizeof buf) == strlen(full));
    CHECK(strcmp(buf, full) == 0);
    CHECK(acx_launch_env_format(NULL, buf, sizeof buf) > 0);
    CHECK(strcmp(buf, "launcher unknown (no environment detected)") == 0);
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
    failed += test_srun_pmix_full();
    failed += test_srun_subset();
    failed += test_batch_fields();
    failed += test_mpirun_in_allocation();
    failed += test_hydra_and_pmix_fields();
    failed += test_malformed();
    failed += test_malformed_nodes();
    failed += test_warnings_overflow();
    failed += test_check_rank();
    failed += test_format_limits();
    if (failed) printf("%d launch_env case(s) FAILED\n", failed);
    return failed ? 1 : 0;
}

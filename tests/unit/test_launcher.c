/*
 * tests/unit/test_launcher.c — the command `acx launch` runs and its exit
 * records (launch/command.c), single process.
 *
 * The command is compared word for word with what Open MPI 4.1's mpirun,
 * MPICH's mpiexec and Slurm's srun need (see docs/launch.md): inside and
 * outside an allocation, at and above this machine's CPU count, as root or
 * not, with a host file, with passthrough options. The environment is a
 * fake (never the process's own). The shell quoting is checked by giving the
 * quoted line to /bin/sh and reading back the words it sees.
 */
#include "tests/acx_test.h"

#include <signal.h>

#include "base/error.h"
#include "launch/command.h"
#include "launch/env.h"

/* ---- the fake environment ---- */

#define FAKE_MAX 16
static const char *fake_names[FAKE_MAX], *fake_values[FAKE_MAX];
static int fake_count;

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

/* ---- helpers ---- */

static const char *const prog[] = {"./train", "--epochs", "1"};

static acx_launch_request_t request(void) {
    acx_launch_request_t q;
    memset(&q, 0, sizeof q);
    q.supervisor = "/opt/acx/bin/acx";
    q.status_dir = "/tmp/acx-launch.abc";
    q.n_program_args = 3;
    q.program_args = prog;
    return q;
}

/* argv joined with single blanks (no quoting), for exact comparison. */
static const char *joined(const acx_launch_cmd_t *c) {
    static char buf[4096];
    size_t o = 0;
    buf[0] = '\0';
    for (int i = 0; i < c->argc; i++)
        o += (size_t)snprintf(buf + o, sizeof buf - o, "%s%s", i ? " " : "", c->argv[i]);
    return buf;
}

static const char *joined_env(const acx_launch_cmd_t *c) {
    static char buf[4096];
    size_t o = 0;
    buf[0] = '\0';
    for (int i = 0; i < c->n_env; i++)
        o += (size_t)snprintf(buf + o, sizeof buf - o, "%s%s", i ? " " : "", c->env[i]);
    return buf;
}

static int expect_cmd(const acx_launch_request_t *q, acx_launch_host_t host, const char *const *env,
                      const char *want_argv, const char *want_env) {
    acx_launch_cmd_t *c = NULL;
    fake_set(env);
    acx_status_t st = acx_launch_cmd_build(q, &host, fake_env, &c);
    if (st != ACX_OK) {
        fprintf(stderr, "\nbuild failed: %s\n", acx_last_error());
        return 0;
    }
    int ok = strcmp(joined(c), want_argv) == 0 && strcmp(joined_env(c), want_env) == 0 &&
             c->argv[c->argc] == NULL && (c->n_env == 0 || c->env[c->n_env] == NULL);
    /* the launcher's name alone (`acx env`) is the one the command runs */
    const char *name = acx_launch_launcher_name(&host, fake_env);
    if (strcmp(name, c->launcher) != 0) {
        fprintf(stderr, "\n  acx_launch_launcher_name: %s, the command runs %s\n", name,
                c->launcher);
        ok = 0;
    }
    if (!ok)
        fprintf(stderr, "\n  got argv: %s\n  want:     %s\n  got env:  %s\n  want:     %s\n",
                joined(c), want_argv, joined_env(c), want_env);
    acx_launch_cmd_free(c);
    return ok;
}

static const char *const no_env[] = {NULL};
#define RANK_CMD "/opt/acx/bin/acx launch --rank-supervisor /tmp/acx-launch.abc ./train --epochs 1"

/* ---- mpirun ---- */

static int test_mpirun_basic(void) {
    TESTING("mpirun: -np, root flag, no oversubscription at nproc");
    acx_launch_request_t q = request();
    q.num_processes = 2;
    CHECK(expect_cmd(&q, (acx_launch_host_t){2, 1, ACX_MPI_FLAVOR_OPENMPI}, no_env,
                     "mpirun -np 2 --allow-run-as-root " RANK_CMD, ""));
    CHECK(expect_cmd(&q, (acx_launch_host_t){2, 0, ACX_MPI_FLAVOR_OPENMPI}, no_env,
                     "mpirun -np 2 " RANK_CMD, ""));
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int test_mpirun_oversubscribed(void) {
    TESTING("mpirun: ranks > nproc -> --oversubscribe + yield");
    acx_launch_request_t q = request();
    q.num_processes = 3; /* one more than the 2 CPUs */
    CHECK(expect_cmd(&q, (acx_launch_host_t){2, 1, ACX_MPI_FLAVOR_OPENMPI}, no_env,
                     "mpirun -np 3 --allow-run-as-root --oversubscribe --mca "
                     "mpi_yield_when_idle 1 " RANK_CMD,
                     ""));
    q.num_processes = 4;
    CHECK(expect_cmd(&q, (acx_launch_host_t){4, 0, ACX_MPI_FLAVOR_OPENMPI}, no_env,
                     "mpirun -np 4 " RANK_CMD, ""));
    acx_launch_cmd_t *c = NULL;
    acx_launch_host_t h = {1, 0, ACX_MPI_FLAVOR_OPENMPI};
    CHECK_OK(acx_launch_cmd_build(&q, &h, fake_env, &c));
    CHECK(c->oversubscribed == 1 && c->num_processes == 4 && strcmp(c->launcher, "mpirun") == 0);
    acx_launch_cmd_free(c);
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int test_mpirun_settings(void) {
    TESTING("mpirun: options become ACX_* variables, each -x NAME");
    acx_launch_request_t q = request();
    q.num_processes = 2;
    q.config_file = "run.yaml";
    q.mixed_precision = "bf16";
    q.sharding_strategy = "full_shard";
    q.gradient_accumulation_steps = "4";
    q.debug = 1;
    CHECK(expect_cmd(&q, (acx_launch_host_t){2, 0, ACX_MPI_FLAVOR_OPENMPI}, no_env,
                     "mpirun -np 2 -x ACX_CONFIG_FILE -x ACX_MIXED_PRECISION -x "
                     "ACX_SHARDING_STRATEGY -x ACX_GRADIENT_ACCUMULATION_STEPS -x ACX_LOG_LEVEL "
                     "-x ACX_DEBUG_MODE " RANK_CMD,
                     "ACX_CONFIG_FILE=run.yaml ACX_MIXED_PRECISION=bf16 "
                     "ACX_SHARDING_STRATEGY=full_shard ACX_GRADIENT_ACCUMULATION_STEPS=4 "
                     "ACX_LOG_LEVEL=debug ACX_DEBUG_MODE=1"));
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int test_mpirun_counts(void) {
    TESTING("mpirun: N from -n, else the config file, else 1");
    acx_launch_request_t q = request();
    acx_launch_host_t h = {8, 0, ACX_MPI_FLAVOR_OPENMPI};
    CHECK(expect_cmd(&q, h, no_env, "mpirun -np 1 " RANK_CMD, ""));
    q.config_num_processes = 3;
    CHECK(expect_cmd(&q, h, no_env, "mpirun -np 3 " RANK_CMD, ""));
    q.num_processes = 5;
    CHECK(expect_cmd(&q, h, no_env, "mpirun -np 5 " RANK_CMD, ""));
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int test_mpirun_hostfile_passthrough(void) {
    TESTING("mpirun: hostfile (slots decide), passthrough, no supervisor");
    acx_launch_request_t q = request();
    static const char *const extra[] = {"--bind-to", "core", "--tag-output"};
    q.num_processes = 8; /* > nproc, but the host file's slots decide */
    q.hostfile = "hosts.txt";
    q.n_launcher_args = 3;
    q.launcher_args = extra;
    q.mixed_precision = "fp16";
    CHECK(expect_cmd(&q, (acx_launch_host_t){2, 1, ACX_MPI_FLAVOR_OPENMPI}, no_env,
                     "mpirun -np 8 --allow-run-as-root --hostfile hosts.txt -x ACX_MIXED_PRECISION "
                     "--bind-to core --tag-output " RANK_CMD,
                     "ACX_MIXED_PRECISION=fp16"));
    /* Across nodes, the library path, PATH and thread counts that are set
     * are forwarded by name (mpirun takes their values from its own
     * environment); unset or empty ones are not. */
    static const char *const paths[] = {
        "LD_LIBRARY_PATH", "/opt/acx/lib", "PATH", "/usr/bin", "OMP_NUM_THREADS", "", NULL};
    CHECK(expect_cmd(
        &q, (acx_launch_host_t){2, 1, ACX_MPI_FLAVOR_OPENMPI}, paths,
        "mpirun -np 8 --allow-run-as-root --hostfile hosts.txt -x PATH "
        "-x LD_LIBRARY_PATH -x ACX_MIXED_PRECISION --bind-to core --tag-output " RANK_CMD,
        "ACX_MIXED_PRECISION=fp16"));
    q.supervisor = NULL;
    q.hostfile = NULL;
    q.n_launcher_args = 0;
    q.mixed_precision = NULL;
    q.num_processes = 2;
    CHECK(expect_cmd(&q, (acx_launch_host_t){2, 0, ACX_MPI_FLAVOR_OPENMPI}, no_env,
                     "mpirun -np 2 ./train --epochs 1", ""));
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int test_mpirun_host_list(void) {
    TESTING("mpirun: --host LIST (slots give N, decide oversubscription), errors");
    acx_launch_request_t q = request();
    acx_launch_host_t h = {2, 1, ACX_MPI_FLAVOR_OPENMPI};
    /* no -n: 2 + 1 + 3 slots = 6 ranks, more than the 2 CPUs here, yet no
     * --oversubscribe: the ranks run on those hosts */
    q.hosts = "node1:2,node2,node-3.lab:3";
    static const char *const paths[] = {"LD_LIBRARY_PATH", "/opt/acx/lib", NULL};
    CHECK(expect_cmd(&q, h, paths,
                     "mpirun -np 6 --allow-run-as-root --host node1:2,node2,node-3.lab:3 "
                     "-x LD_LIBRARY_PATH " RANK_CMD,
                     ""));
    q.config_num_processes = 4; /* the config file's count comes before the slots */
    CHECK(expect_cmd(&q, h, no_env,
                     "mpirun -np 4 --allow-run-as-root --host node1:2,node2,node-3.lab:3 " RANK_CMD,
                     ""));
    q.num_processes = 2; /* and -n before both */
    CHECK(expect_cmd(&q, h, no_env,
                     "mpirun -np 2 --allow-run-as-root --host node1:2,node2,node-3.lab:3 " RANK_CMD,
                     ""));
    q = request();
    q.hosts = "a:2,a:1"; /* a name twice counts twice, as mpirun counts it */
    CHECK(expect_cmd(&q, (acx_launch_host_t){2, 0, ACX_MPI_FLAVOR_MPICH}, no_env,
                     "mpiexec -n 3 -hosts a:2,a:1 " RANK_CMD, ""));

    char why[256];
    CHECK(acx_launch_host_slots("n1:2,n2:1", why, sizeof why) == 3);
    CHECK(acx_launch_host_slots("n1", why, sizeof why) == 1);
    CHECK(acx_launch_host_slots("n1:65536", why, sizeof why) == 65536);
    static const struct {
        const char *list, *needle;
    } bad[] = {{"", "empty"},          {"n1:0", "'n1:0'"},    {"n1:", "'n1:'"},
               {"n1:x", "'n1:x'"},     {"n1:65537", "65536"}, {"n1,,n2", "'' in"},
               {"n1,", "ends in ','"}, {":2", "':2'"},        {"n 1", "'n 1'"},
               {"n1:2:3", "'n1:2:3'"}, {"n1:-1", "'n1:-1'"}};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        why[0] = '\0';
        CHECK(acx_launch_host_slots(bad[k].list, why, sizeof why) == -1);
        if (strstr(why, bad[k].needle) == NULL) {
            printf("\n  host list '%s': message '%s' lacks '%s'\n", bad[k].list, why,
                   bad[k].needle);
            TEST_ERROR;
        }
    }
    CHECK(acx_launch_host_slots(NULL, NULL, 0) == -1);

    acx_launch_cmd_t *c = (acx_launch_cmd_t *)&q; /* must stay untouched */
    q = request();
    q.hosts = "n1:2,";
    CHECK_STATUS(acx_launch_cmd_build(&q, &h, fake_env, &c), ACX_ERR_INVALID_ARG, "--host");
    q.hosts = "n1:2";
    q.hostfile = "hosts";
    CHECK_STATUS(acx_launch_cmd_build(&q, &h, fake_env, &c), ACX_ERR_INVALID_ARG,
                 "both --hostfile 'hosts' and --host 'n1:2'");
    q.hostfile = NULL;
    fake_set((const char *[]){"SLURM_JOB_ID", "12", NULL});
    CHECK_STATUS(acx_launch_cmd_build(&q, &h, fake_env, &c), ACX_ERR_INVALID_ARG,
                 "--host 'n1:2' inside a Slurm allocation");
    fake_set(no_env);
    CHECK(c == (acx_launch_cmd_t *)&q);
    PASSED();
    return 0;
error:
    fake_set(no_env);
    FAILED();
    return 1;
}

static int test_mpiexec(void) {
    TESTING("MPICH: mpiexec -n, -f, no root or oversubscribe flags");
    acx_launch_request_t q = request();
    q.num_processes = 4;
    q.hostfile = "hosts";
    q.sharding_strategy = "no_shard";
    CHECK(expect_cmd(&q, (acx_launch_host_t){2, 1, ACX_MPI_FLAVOR_MPICH}, no_env,
                     "mpiexec -n 4 -f hosts " RANK_CMD, "ACX_SHARDING_STRATEGY=no_shard"));
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

/* ---- srun ---- */

static int test_srun(void) {
    TESTING("srun: inside an allocation, its task count, pmix, kill-on-bad-exit");
    acx_launch_request_t q = request();
    q.config_num_processes = 3; /* ignored: the allocation decides */
    const char *const alloc[] = {
        "SLURM_JOB_ID", "4242", "SLURM_NTASKS", "8", "SLURM_JOB_NUM_NODES", "2", NULL};
    /* 4 tasks per node on 4 CPUs: not oversubscribed; no -x, no root flag. */
    CHECK(expect_cmd(&q, (acx_launch_host_t){4, 1, ACX_MPI_FLAVOR_OPENMPI}, alloc,
                     "srun --mpi=pmix --kill-on-bad-exit=1 -n 8 " RANK_CMD, ""));
    q.num_processes = 3; /* -n wins */
    q.mixed_precision = "bf16";
    CHECK(expect_cmd(&q, (acx_launch_host_t){4, 1, ACX_MPI_FLAVOR_OPENMPI}, alloc,
                     "srun --mpi=pmix --kill-on-bad-exit=1 -n 3 " RANK_CMD,
                     "ACX_MIXED_PRECISION=bf16"));
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int test_srun_oversubscribed(void) {
    TESTING("srun: tasks per node > nproc -> OMPI_MCA_mpi_yield_when_idle=1");
    acx_launch_request_t q = request();
    const char *const alloc[] = {"SLURM_JOB_ID", "7", "SLURM_NTASKS", "4", NULL};
    CHECK(expect_cmd(&q, (acx_launch_host_t){2, 0, ACX_MPI_FLAVOR_OPENMPI}, alloc,
                     "srun --mpi=pmix --kill-on-bad-exit=1 -n 4 " RANK_CMD,
                     "OMPI_MCA_mpi_yield_when_idle=1"));
    /* 5 tasks on 2 nodes: ceil(5/2) = 3 > 2 CPUs. */
    const char *const two[] = {"SLURM_JOB_ID", "7", "SLURM_NTASKS", "5", "SLURM_NNODES", "2", NULL};
    CHECK(expect_cmd(&q, (acx_launch_host_t){2, 0, ACX_MPI_FLAVOR_OPENMPI}, two,
                     "srun --mpi=pmix --kill-on-bad-exit=1 -n 5 " RANK_CMD,
                     "OMPI_MCA_mpi_yield_when_idle=1"));
    /* 4 tasks on 2 nodes of 2 CPUs: exactly full. */
    const char *const full[] = {
        "SLURM_JOB_ID", "7", "SLURM_NTASKS", "4", "SLURM_NNODES", "2", NULL};
    CHECK(expect_cmd(&q, (acx_launch_host_t){2, 0, ACX_MPI_FLAVOR_OPENMPI}, full,
                     "srun --mpi=pmix --kill-on-bad-exit=1 -n 4 " RANK_CMD, ""));
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int test_srun_no_count(void) {
    TESTING("srun: no or malformed SLURM_NTASKS -> srun's own default");
    acx_launch_request_t q = request();
    const char *const bare[] = {"SLURM_JOB_ID", "9", NULL};
    CHECK(expect_cmd(&q, (acx_launch_host_t){2, 0, ACX_MPI_FLAVOR_OPENMPI}, bare,
                     "srun --mpi=pmix --kill-on-bad-exit=1 " RANK_CMD, ""));
    const char *const bad[] = {"SLURM_JOB_ID", "9", "SLURM_NTASKS", "4x", NULL};
    CHECK(expect_cmd(&q, (acx_launch_host_t){2, 0, ACX_MPI_FLAVOR_OPENMPI}, bad,
                     "srun --mpi=pmix --kill-on-bad-exit=1 " RANK_CMD, ""));
    const char *const procs[] = {"SLURM_JOB_ID", "9", "SLURM_NPROCS", "2", NULL};
    CHECK(expect_cmd(&q, (acx_launch_host_t){2, 0, ACX_MPI_FLAVOR_OPENMPI}, procs,
                     "srun --mpi=pmix --kill-on-bad-exit=1 -n 2 " RANK_CMD, ""));
    /* An empty SLURM_JOB_ID is no allocation. */
    const char *const empty[] = {"SLURM_JOB_ID", "", "SLURM_NTASKS", "4", NULL};
    CHECK(expect_cmd(&q, (acx_launch_host_t){2, 0, ACX_MPI_FLAVOR_OPENMPI}, empty,
                     "mpirun -np 1 " RANK_CMD, ""));
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

/* The launch command (srun or not) and the launch-environment detection
 * (in_slurm_job) answer "inside an allocation?" by one rule: an empty
 * SLURM_JOB_ID is none, the older SLURM_JOBID alone is one. */
static int test_allocation_rule(void) {
    TESTING("srun and in_slurm_job agree: empty SLURM_JOB_ID, SLURM_JOBID alone");
    static const struct {
        const char *pairs[5];
        int in_job;
    } cases[] = {
        {{"SLURM_JOB_ID", "", NULL}, 0},
        {{"SLURM_JOBID", "9", NULL}, 1},
        {{"SLURM_JOB_ID", "9", NULL}, 1},
        {{"SLURM_JOB_ID", "", "SLURM_JOBID", "9", NULL}, 1},
        {{NULL}, 0},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        fake_set(cases[k].pairs);
        acx_launch_env_t e;
        acx_launch_env_detect(fake_env, &e);
        const char *name =
            acx_launch_launcher_name(&(acx_launch_host_t){2, 0, ACX_MPI_FLAVOR_OPENMPI}, fake_env);
        int srun = name != NULL && strcmp(name, "srun") == 0;
        if (e.in_slurm_job != cases[k].in_job || srun != cases[k].in_job) {
            fprintf(stderr, "\n  case %zu: in_slurm_job %d, launcher %s, expected %s\n", k,
                    e.in_slurm_job, name ? name : "(null)", cases[k].in_job ? "srun" : "not srun");
            goto error;
        }
    }
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int test_errors(void) {
    TESTING("build errors: hostfile in Slurm, no program, bad counts");
    acx_launch_request_t q = request();
    acx_launch_host_t h = {2, 0, ACX_MPI_FLAVOR_OPENMPI};
    acx_launch_cmd_t *c = (acx_launch_cmd_t *)&q; /* must stay untouched */
    q.hostfile = "hosts";
    fake_set((const char *[]){"SLURM_JOB_ID", "12", NULL});
    CHECK_STATUS(acx_launch_cmd_build(&q, &h, fake_env, &c), ACX_ERR_INVALID_ARG, "--hostfile");
    CHECK(c == (acx_launch_cmd_t *)&q);
    fake_set(no_env);
    q = request();
    q.n_program_args = 0;
    CHECK_STATUS(acx_launch_cmd_build(&q, &h, fake_env, &c), ACX_ERR_INVALID_ARG, "PROGRAM");
    q = request();
    q.num_processes = -2;
    CHECK_STATUS(acx_launch_cmd_build(&q, &h, fake_env, &c), ACX_ERR_INVALID_ARG, "-2");
    q = request();
    q.status_dir = NULL;
    CHECK_STATUS(acx_launch_cmd_build(&q, &h, fake_env, &c), ACX_ERR_INVALID_ARG, "status");
    q = request();
    h.nproc = 0;
    CHECK_STATUS(acx_launch_cmd_build(&q, &h, fake_env, &c), ACX_ERR_INVALID_ARG, "nproc");
    CHECK_STATUS(acx_launch_cmd_build(NULL, &h, fake_env, &c), ACX_ERR_INVALID_ARG, "req");
    CHECK(c == (acx_launch_cmd_t *)&q);
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

/* ---- quoting ---- */

static int test_quote(void) {
    TESTING("shell quoting of single words");
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"abc", "abc"},
        {"./a/b-c_d.e:f,g@h%i+j=k", "./a/b-c_d.e:f,g@h%i+j=k"},
        {"", "''"},
        {"a b", "'a b'"},
        {"it's", "'it'\\''s'"},
        {"$HOME", "'$HOME'"},
        {"a*b", "'a*b'"},
        {"tab\there", "'tab\there'"},
        {"'", "''\\'''"},
    };
    char buf[64];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = acx_shell_quote(cases[i].in, buf, sizeof buf);
        if (strcmp(buf, cases[i].out) != 0 || n != strlen(cases[i].out)) {
            fprintf(stderr, "\n  quote(%s) = %s, want %s\n", cases[i].in, buf, cases[i].out);
            TEST_ERROR;
        }
    }
    /* Truncation: NUL-terminated, full length returned. */
    memset(buf, 'z', sizeof buf);
    CHECK(acx_shell_quote("a b", buf, 3) == 5);
    CHECK(strcmp(buf, "'a") == 0);
    CHECK(acx_shell_quote("a b", NULL, 0) == 5);
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int test_format_through_shell(void) {
    TESTING("--dry-run line: /bin/sh reads back every word and variable");
    static const char *const words[] = {"printf", "[%s]\\n", "a b",         "it's", "",
                                        "$HOME",  "x\"y",    "back\\slash", "--",   "*"};
    static char *env[] = {(char *)"ACX_CONFIG_FILE=my conf's.yaml", NULL};
    acx_launch_cmd_t c = {"mpirun", 1, 0, 10, (char **)words, 1, env};
    char *text = NULL;
    CHECK_OK(acx_launch_cmd_format(&c, &text));
    CHECK(strncmp(text, "ACX_CONFIG_FILE='my conf'\\''s.yaml' printf ", 43) == 0);
    /* Run it (popen runs sh -c), then, with the same assignment in front,
     * a second command that prints the variable as the program would see it. */
    char script[2048], out[512] = "";
    snprintf(script, sizeof script, "%s; %.*s sh -c 'printf \"{%%s}\\n\" \"$ACX_CONFIG_FILE\"'",
             text, (int)(strstr(text, " printf") - text), text);
    free(text);
    FILE *f = popen(script, "r");
    CHECK(f != NULL);
    size_t got = fread(out, 1, sizeof out - 1, f);
    out[got] = '\0';
    CHECK(pclose(f) == 0);
    const char *want = "[a b]\n[it's]\n[]\n[$HOME]\n[x\"y]\n[back\\slash]\n[--]\n[*]\n"
                       "{my conf's.yaml}\n";
    if (strcmp(out, want) != 0) {
        fprintf(stderr, "\n  sh printed:\n%s  want:\n%s", out, want);
        TEST_ERROR;
    }
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

/* ---- exit records ---- */

static acx_rank_exit_t record(int rank, int code, int sig, int teardown, long long t) {
    acx_rank_exit_t r;
    memset(&r, 0, sizeof r);
    r.rank = rank;
    snprintf(r.host, sizeof r.host, "node%02d", rank / 2);
    r.pid = 1000 + rank;
    r.exit_code = code;
    r.signal = sig;
    r.teardown = teardown;
    r.time_ns = t;
    r.step_id = -1;
    return r;
}

static int test_record_roundtrip(void) {
    TESTING("exit record: format, parse back, bad lines");
    acx_rank_exit_t r = record(3, -1, 9, 0, 1700000000123456789LL), back;
    r.job_id = 4242;
    r.step_id = 0;
    snprintf(r.why, sizeof r.why, "two\nlines");
    char line[1024];
    size_t n = acx_rank_exit_format(&r, line, sizeof line);
    CHECK(n == strlen(line));
    CHECK(strcmp(line, "acx-rank-exit v1 rank=3 host=node01 pid=1003 code=-1 signal=9 teardown=0 "
                       "time=1700000000123456789 job=4242 step=0 why=two lines\n") == 0);
    CHECK_OK(acx_rank_exit_parse(line, &back));
    CHECK(back.rank == 3 && strcmp(back.host, "node01") == 0 && back.pid == 1003);
    CHECK(back.exit_code == -1 && back.signal == 9 && back.teardown == 0);
    CHECK(back.time_ns == 1700000000123456789LL && back.job_id == 4242 && back.step_id == 0);
    CHECK(strcmp(back.why, "two lines") == 0);

    acx_rank_exit_t untouched = record(7, 7, 0, 1, 7);
    back = untouched;
    CHECK_STATUS(acx_rank_exit_parse("hello", &back), ACX_ERR_FORMAT, "does not start");
    CHECK_STATUS(acx_rank_exit_parse("acx-rank-exit v1 rank=1 host=h pid=2 code=3 signal=9 "
                                     "teardown=0 time=5 job=0 step=-1 why=\n",
                                     &back),
                 ACX_ERR_FORMAT, "code/signal");
    CHECK_STATUS(acx_rank_exit_parse("acx-rank-exit v1 rank=1 host=h pid=2 code=3 signal=0 "
                                     "teardown=2 time=5 job=0 step=-1 why=\n",
                                     &back),
                 ACX_ERR_FORMAT, "teardown");
    CHECK_STATUS(acx_rank_exit_parse("acx-rank-exit v1 rank=1 host=h pid=2 code=3", &back),
                 ACX_ERR_FORMAT, "signal");
    CHECK(memcmp(&back, &untouched, sizeof back) == 0);
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int test_first(void) {
    TESTING("first failure: earliest own failure, teardowns only as fallback");
    acx_rank_exit_t r[4] = {
        record(0, -1, SIGTERM, 1, 100), /* killed by the teardown, earliest of all */
        record(1, -1, SIGKILL, 0, 300), /* the real failure */
        record(2, 1, 0, 0, 500),        /* a later error (its peer died) */
        record(3, -1, SIGTERM, 1, 200),
    };
    CHECK(acx_rank_exit_first(r, 4) == 1);
    CHECK(acx_rank_exit_first(r, 1) == 0); /* only teardowns: the earliest */
    r[1].teardown = 1;
    r[2].teardown = 1;
    CHECK(acx_rank_exit_first(r, 4) == 0);
    /* Same time: the lower rank. */
    acx_rank_exit_t tie[2] = {record(5, 3, 0, 0, 10), record(2, 3, 0, 0, 10)};
    CHECK(acx_rank_exit_first(tie, 2) == 1);
    CHECK(acx_rank_exit_first(tie, 0) == -1);
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int test_first_failure(void) {
    TESTING("the failure that lets acx launch end a lingering mpirun: own, not preempted");
    acx_rank_exit_t r[5] = {
        record(0, 75, 0, 0, 100),       /* preempted: saved, exited on purpose */
        record(1, -1, SIGTERM, 1, 150), /* killed by the teardown */
        record(2, 3, 0, 0, 400),        /* a failure of its own, later */
        record(3, -1, SIGKILL, 0, 300), /* the earliest failure of its own */
        record(4, 75, 0, 1, 50),        /* preempted by a forwarded signal */
    };
    CHECK(acx_rank_exit_first_failure(r, 5) == 3);
    CHECK(acx_rank_exit_first_failure(r, 3) == 2);  /* whatever order the directory gives */
    CHECK(acx_rank_exit_first_failure(r, 2) == -1); /* preempted and teardown: none */
    CHECK(acx_rank_exit_first_failure(&r[4], 1) == -1);
    CHECK(acx_rank_exit_first_failure(r, 0) == -1);
    /* Same time: the lower rank. */
    acx_rank_exit_t tie[2] = {record(5, 3, 0, 0, 10), record(2, 1, 0, 0, 10)};
    CHECK(acx_rank_exit_first_failure(tie, 2) == 1);
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int test_summary(void) {
    TESTING("summary line and exit status");
    char buf[512];
    acx_rank_exit_t k = record(2, -1, SIGKILL, 0, 1);
    acx_rank_exit_summary(&k, buf, sizeof buf);
    CHECK(strcmp(buf, "rank 2 on node01 failed first: killed by signal 9 (SIGKILL) \xe2\x80\x94 "
                      "out of memory?") == 0);
    CHECK(acx_rank_exit_status(&k) == 137);
    k.job_id = 81723;
    k.step_id = 4;
    acx_rank_exit_summary(&k, buf, sizeof buf);
    CHECK(strstr(buf, "out of memory? (Slurm job 81723, step 4)") != NULL);

    acx_rank_exit_t e = record(1, 3, 0, 0, 1);
    acx_rank_exit_summary(&e, buf, sizeof buf);
    CHECK(strcmp(buf, "rank 1 on node00 failed first: exit code 3") == 0);
    CHECK(acx_rank_exit_status(&e) == 3);

    acx_rank_exit_t s = record(0, -1, SIGSEGV, 0, 1);
    acx_rank_exit_describe(&s, buf, sizeof buf);
    CHECK(strcmp(buf, "killed by signal 11 (SIGSEGV)") == 0);
    CHECK(acx_rank_exit_status(&s) == 139);
    acx_rank_exit_t t = record(0, -1, SIGTERM, 1, 1);
    snprintf(t.why, sizeof t.why, "cannot execute 'x': No such file or directory");
    acx_rank_exit_summary(&t, buf, sizeof buf);
    CHECK(strcmp(buf, "rank 0 on node00 was stopped: killed by signal 15 (SIGTERM); cannot "
                      "execute 'x': No such file or directory") == 0);
    acx_rank_exit_t odd = record(-1, -1, 63, 0, 1);
    acx_rank_exit_summary(&odd, buf, sizeof buf);
    CHECK(strcmp(buf, "a rank (pid 999) on node00 failed first: killed by signal 63") == 0);
    CHECK(acx_signal_name(SIGUSR1) != NULL && strcmp(acx_signal_name(SIGUSR1), "SIGUSR1") == 0);
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

int main(void) {
    acx_test_watchdog(60);
    int failed = 0;
    failed += test_mpirun_basic();
    failed += test_mpirun_oversubscribed();
    failed += test_mpirun_settings();
    failed += test_mpirun_counts();
    failed += test_mpirun_hostfile_passthrough();
    failed += test_mpirun_host_list();
    failed += test_mpiexec();
    failed += test_srun();
    failed += test_srun_oversubscribed();
    failed += test_srun_no_count();
    failed += test_allocation_rule();
    failed += test_errors();
    failed += test_quote();
    failed += test_format_through_shell();
    failed += test_record_roundtrip();
    failed += test_first();
    failed += test_first_failure();
    failed += test_summary();
    if (failed) printf("%d launcher case(s) FAILED\n", failed);
    return failed ? 1 : 0;
}

/*
 * launch/env.c — who started this process, and whether MPI agrees.
 *
 * Owns: reading the launchers' environment variables (Slurm, Open MPI's
 * mpirun, PMIx, MPICH's Hydra) into an acx_launch_env_t, and the singleton
 * check that turns "srun without PMIx started N processes that each think
 * they are rank 0 of 1" from a silent N-fold duplicate run into an error.
 * Also: rank, local rank and node of this process as each launcher states
 * them, the Slurm node list (expanded by slurm/hostlist.c), the rank
 * cross-check and the one-line description for the log.
 * Leaves to others: MPI itself (the caller passes MPI's world size and
 * ranks), logging the result (runtime/), generating sbatch scripts
 * (cli/slurm.c) and requeue (runtime/preempt.c). Makes no MPI call and keeps no state.
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
 *
 * Rank, local rank and node come from the launcher that declared the size,
 * never mixed across launchers, for the same reason: under mpirun or Hydra
 * inside an allocation SLURM_PROCID/SLURM_NODEID number the daemons, and
 * on Open MPI 4 the head node runs no daemon at all, so SLURM_NODEID is off
 * by one there. Open MPI's OMPI_COMM_WORLD_NODE_RANK is not a node index
 * (it is a rank among all jobs' processes on the node) and is not used.
 * Slurm's node list is still reported as the allocation's.
 *
 * A malformed value (SLURM_NTASKS=abc) is ignored with a warning rather than
 * an error: once MPI is up its own rank and size are authoritative, and a
 * mangled variable must not stop a run whose MPI works. It can only make the
 * singleton check miss, never fire falsely.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "slurm/hostlist.h"
#include "launch/env.h"

typedef const char *(*env_fn_t)(const char *name);

/* ---- warnings ---- */

/* Append "; <formatted>" to e->warnings; a text that no longer fits ends
 * in "..." so the reader knows more was dropped. */
static void warn(acx_launch_env_t *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void warn(acx_launch_env_t *e, const char *fmt, ...) {
    size_t cap = sizeof e->warnings, n = strlen(e->warnings);
    if (n + 4 >= cap) return; /* already full (and marked) */
    if (n > 0) n += (size_t)snprintf(e->warnings + n, cap - n, "; ");
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(e->warnings + n, cap - n, fmt, ap);
    va_end(ap);
    if (len < 0 || n + (size_t)len >= cap) memcpy(e->warnings + cap - 4, "...", 4);
}

/* ---- parsing ---- */

static const char *env_getenv(const char *name) { return getenv(name); }

const char *acx_launch_slurm_job_var(env_fn_t env, const char **value_p) {
    static const char *const names[] = {"SLURM_JOB_ID", "SLURM_JOBID" /* pre-2.x, still set */};
    if (env == NULL) env = env_getenv;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *v = env(names[i]);
        if (v != NULL && v[0] != '\0') {
            if (value_p != NULL) *value_p = v;
            return names[i];
        }
    }
    if (value_p != NULL) *value_p = NULL;
    return NULL;
}

/* A whole decimal number in [min, max] (min is 0 or 1); anything else
 * (empty, "4x", "-1", " 4", overflow) is rejected so a mangled variable
 * cannot invent a value. */
static int parse_num(const char *text, long min, long max, long *value_p) {
    if (text == NULL || *text < '0' || *text > '9') return 0;
    char *end = NULL;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || v < min || v > max) return 0;
    *value_p = v;
    return 1;
}

/* Variable `name` as an integer >= min into *value_p (returns 1). Returns
 * 0 when it is unset, or malformed (then with a warning naming it). */
static int read_int(env_fn_t env, acx_launch_env_t *e, const char *name, int min, int *value_p) {
    const char *text = env(name);
    long v;
    if (text == NULL) return 0;
    if (!parse_num(text, min, INT_MAX, &v)) {
        warn(e, "%s='%.64s' ignored (expected an integer >= %d)", name, text, min);
        return 0;
    }
    *value_p = (int)v;
    return 1;
}

/* The first variable of names[] holding a positive int: its value into
 * *size_p and its name into *var_p. Malformed ones before it are skipped
 * with a warning. Returns 0 if none does. */
static int first_size(env_fn_t env, acx_launch_env_t *e, const char *const *names, int count,
                      int *size_p, const char **var_p) {
    for (int i = 0; i < count; i++) {
        if (read_int(env, e, names[i], 1, size_p)) {
            *var_p = names[i];
            return 1;
        }
    }
    return 0;
}

/* Tasks on node `node` from Slurm's compressed per-node counts, e.g.
 * "2(x3),1" = 2 tasks on nodes 0-2 and 1 on node 3. Returns 1 with
 * *tasks_p set, 0 if the text is malformed, -1 if it lists fewer nodes. */
static int tasks_on_node(const char *text, int node, int *tasks_p) {
    const char *p = text;
    long seen = 0;
    int found = -1;
    for (;;) {
        long count = 0, rep = 1;
        if (*p < '0' || *p > '9') return 0;
        while (*p >= '0' && *p <= '9' && count <= INT_MAX)
            count = count * 10 + (*p++ - '0');
        if (count < 1 || count > INT_MAX) return 0;
        if (*p == '(') {
            if (p[1] != 'x' || p[2] < '0' || p[2] > '9') return 0;
            p += 2;
            rep = 0;
            while (*p >= '0' && *p <= '9' && rep <= INT_MAX)
                rep = rep * 10 + (*p++ - '0');
            if (*p++ != ')' || rep < 1 || rep > INT_MAX) return 0;
        }
        if (found < 0 && node < seen + rep) {
            *tasks_p = (int)count;
            found = 1;
        }
        seen += rep;
        if (seen > INT_MAX) return 0;
        if (*p == '\0') return found;
        if (*p++ != ',') return 0;
    }
}

/* ---- detection ---- */

/* Pick the launcher and the declared size (see the file comment). */
static void detect_launcher(env_fn_t env, acx_launch_env_t *e) {
    static const char *const ompi_vars[] = {"OMPI_COMM_WORLD_SIZE"};
    static const char *const hydra_vars[] = {"PMI_SIZE"};
    /* Inside a step srun rewrites SLURM_NTASKS/SLURM_NPROCS to the step's
     * count too, but SLURM_STEP_NUM_TASKS is the one meant for it. */
    static const char *const step_vars[] = {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS"};

    const char *job_text = NULL;
    const char *job_var = acx_launch_slurm_job_var(env, &job_text);
    if (job_var != NULL) {
        long job_id;
        e->in_slurm_job = 1;
        if (parse_num(job_text, 1, LONG_MAX, &job_id))
            e->slurm_job_id = job_id;
        else
            warn(e, "%s='%.64s' ignored (expected an integer >= 1)", job_var, job_text);
    }
    const char *step_var = env("SLURM_STEP_ID") != NULL ? "SLURM_STEP_ID" : "SLURM_STEPID";
    int in_step = e->in_slurm_job && env(step_var) != NULL;

    int slurm_size = 0;
    const char *slurm_var = NULL;
    if (in_step) first_size(env, e, step_vars, 3, &slurm_size, &slurm_var);

    int size = 0;
    const char *var = NULL;
    if (first_size(env, e, ompi_vars, 1, &size, &var)) {
        e->launcher = "openmpi";
        e->declared_size = size;
        e->size_var = var;
    } else if (first_size(env, e, hydra_vars, 1, &size, &var)) {
        /* srun --mpi=pmi2 exports PMI_SIZE equal to the step's task count:
         * Slurm launched it, not Hydra. */
        e->launcher = (slurm_var != NULL && slurm_size == size) ? "slurm" : "hydra";
        e->declared_size = size;
        e->size_var = var;
    } else if (env("PMIX_RANK") != NULL) {
        e->launcher = "pmix";
        e->declared_size = slurm_size; /* PMIx puts no size in the environment */
        e->size_var = slurm_var;
    } else if (e->in_slurm_job) {
        e->launcher = "slurm";
        e->declared_size = slurm_size; /* 0 outside a step: see the file comment */
        e->size_var = slurm_var;
    }

    /* Only srun's own tasks belong to the step (see in_slurm_step). */
    if (in_step && (strcmp(e->launcher, "slurm") == 0 || strcmp(e->launcher, "pmix") == 0)) {
        long step_id;
        const char *step_text = env(step_var);
        e->in_slurm_step = 1;
        if (parse_num(step_text, 0, LONG_MAX, &step_id))
            e->slurm_step_id = step_id;
        else
            warn(e, "%s='%.64s' ignored (expected an integer >= 0)", step_var, step_text);
    }
}

/* Rank and local rank from the variables of the launcher that won. */
static void detect_rank(env_fn_t env, acx_launch_env_t *e) {
    const char *rank_var = NULL, *local_var = NULL, *local_size_var = NULL;
    if (strcmp(e->launcher, "openmpi") == 0) {
        rank_var = "OMPI_COMM_WORLD_RANK";
        local_var = "OMPI_COMM_WORLD_LOCAL_RANK";
        local_size_var = "OMPI_COMM_WORLD_LOCAL_SIZE";
    } else if (strcmp(e->launcher, "hydra") == 0) {
        rank_var = "PMI_RANK";
        local_var = "MPI_LOCALRANKID";
        local_size_var = "MPI_LOCALNRANKS";
    } else if (e->in_slurm_step) {
        rank_var = "SLURM_PROCID";
        local_var = "SLURM_LOCALID"; /* local size: from the node's task count below */
    } else if (strcmp(e->launcher, "pmix") == 0) {
        rank_var = "PMIX_RANK";
    }
    if (rank_var != NULL && read_int(env, e, rank_var, 0, &e->rank)) e->rank_var = rank_var;
    if (local_var != NULL && read_int(env, e, local_var, 0, &e->local_rank))
        e->local_rank_var = local_var;
    if (local_size_var != NULL) read_int(env, e, local_size_var, 1, &e->local_size);

    /* srun --mpi=pmix: PMIx's rank is Slurm's task id. */
    int pmix_rank;
    if (e->in_slurm_step && strcmp(e->launcher, "pmix") == 0 && e->rank >= 0 &&
        read_int(env, e, "PMIX_RANK", 0, &pmix_rank) && pmix_rank != e->rank)
        warn(e, "PMIX_RANK=%d disagrees with SLURM_PROCID=%d", pmix_rank, e->rank);
    e->pmix_namespace = env("PMIX_NAMESPACE");
}

/* This node, the node count and the node list (Slurm only). */
static void detect_nodes(env_fn_t env, acx_launch_env_t *e) {
    static const char *const step_count[] = {"SLURM_STEP_NUM_NODES", "SLURM_NNODES"};
    static const char *const job_count[] = {"SLURM_JOB_NUM_NODES", "SLURM_NNODES"};
    static const char *const step_list[] = {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST",
                                            "SLURM_NODELIST"};
    static const char *const job_list[] = {"SLURM_JOB_NODELIST", "SLURM_NODELIST"};
    if (!e->in_slurm_job) return;
    int step = e->in_slurm_step;
    const char *count_var = NULL;
    first_size(env, e, step ? step_count : job_count, 2, &e->num_nodes, &count_var);
    for (int i = 0; i < (step ? 3 : 2) && e->nodelist == NULL; i++) {
        const char *name = step ? step_list[i] : job_list[i];
        if (env(name) != NULL) {
            e->nodelist = env(name);
            e->nodelist_var = name;
        }
    }
    /* SLURM_NODEID numbers srun's tasks' nodes, and the batch script's
     * node (0); under other launchers it numbers their daemons. */
    if (step || strcmp(e->launcher, "slurm") == 0) read_int(env, e, "SLURM_NODEID", 0, &e->node_id);

    int consistent = 1;
    if (e->nodelist != NULL) {
        acx_hostlist_t *hl = NULL;
        if (acx_hostlist_parse(e->nodelist, &hl) != ACX_OK) {
            /* The message without its "file:line: " prefix. */
            const char *why = strstr(acx_last_error(), "host list");
            warn(e, "%s ignored: %s", e->nodelist_var, why != NULL ? why : acx_last_error());
            e->nodelist = NULL;
            e->nodelist_var = NULL;
        } else {
            size_t n = acx_hostlist_count(hl);
            if (e->num_nodes < 0) {
                e->num_nodes = n <= INT_MAX ? (int)n : -1;
            } else if ((size_t)e->num_nodes != n) {
                warn(e, "%s=%d but %s lists %zu nodes", count_var, e->num_nodes, e->nodelist_var,
                     n);
                consistent = 0;
            }
            if (consistent && e->node_id >= 0 && (size_t)e->node_id < n &&
                acx_hostlist_get(hl, (size_t)e->node_id, e->node_name, sizeof e->node_name) !=
                    ACX_OK)
                warn(e, "node %d of %s has a name longer than %d bytes", e->node_id,
                     e->nodelist_var, ACX_LAUNCH_NODE_NAME_MAX - 1);
            acx_hostlist_destroy(hl);
        }
    }
    if (e->node_id >= 0 && e->num_nodes >= 0 && e->node_id >= e->num_nodes) {
        warn(e, "SLURM_NODEID=%d ignored (not below the node count %d)", e->node_id, e->num_nodes);
        e->node_id = -1;
    }

    /* Tasks on this node, for the local size. */
    const char *tpn = step ? env("SLURM_STEP_TASKS_PER_NODE") : NULL;
    if (tpn != NULL && e->node_id >= 0) {
        int r = tasks_on_node(tpn, e->node_id, &e->local_size);
        if (r == 0)
            warn(e,
                 "SLURM_STEP_TASKS_PER_NODE='%.64s' ignored (expected counts like "
                 "\"2(x3),1\")",
                 tpn);
        else if (r < 0)
            warn(e, "SLURM_STEP_TASKS_PER_NODE='%.64s' ignored (no entry for node %d)", tpn,
                 e->node_id);
    }
}

/* Values that contradict each other: the dependent one is dropped. */
static void check_ranges(acx_launch_env_t *e) {
    if (e->rank >= 0 && e->declared_size > 0 && e->rank >= e->declared_size) {
        warn(e, "%s=%d ignored (not below the world size %s=%d)", e->rank_var, e->rank, e->size_var,
             e->declared_size);
        e->rank = -1;
        e->rank_var = NULL;
    }
    if (e->local_size > 0 && e->declared_size > 0 && e->local_size > e->declared_size) {
        warn(e, "local size %d ignored (above the world size %s=%d)", e->local_size, e->size_var,
             e->declared_size);
        e->local_size = -1;
    }
    if (e->local_rank >= 0 && e->local_size > 0 && e->local_rank >= e->local_size) {
        warn(e, "%s=%d ignored (not below the local size %d)", e->local_rank_var, e->local_rank,
             e->local_size);
        e->local_rank = -1;
        e->local_rank_var = NULL;
    }
}

void acx_launch_env_detect(const char *(*env)(const char *name), acx_launch_env_t *out) {
    if (out == NULL) return;
    if (env == NULL) env = env_getenv;
    /* A host list that fails to parse records an error; detection reports
     * it as a warning instead, so the caller's last error is restored. */
    char saved_error[ACX_ERRMSG_MAX];
    snprintf(saved_error, sizeof saved_error, "%s", acx_last_error());

    acx_launch_env_t e;
    memset(&e, 0, sizeof e);
    e.launcher = "none";
    e.slurm_step_id = -1;
    e.rank = e.local_rank = e.local_size = e.node_id = e.num_nodes = -1;

    detect_launcher(env, &e);
    detect_rank(env, &e);
    detect_nodes(env, &e);
    check_ranges(&e);

    acx_error_set_raw(ACX_OK, saved_error);
    *out = e;
}

/* ---- the singleton check ---- */

acx_status_t acx_launch_env_check(const acx_launch_env_t *e, int mpi_world_size) {
    if (e == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_launch_env_check: launch environment is NULL");
    if (mpi_world_size < 1)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "acx_launch_env_check: MPI world size %d, expected >= 1", mpi_world_size);
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

/* ---- the rank cross-check ---- */

int acx_launch_env_check_rank(const acx_launch_env_t *e, int mpi_rank, int mpi_local_rank,
                              char *warning, size_t size) {
    if (e == NULL || warning == NULL || size == 0) return 0;
    int bad_rank = e->rank >= 0 && mpi_rank >= 0 && e->rank != mpi_rank;
    int bad_local = e->local_rank >= 0 && mpi_local_rank >= 0 && e->local_rank != mpi_local_rank;
    if (!bad_rank && !bad_local) return 0;
    char what[160] = "";
    if (bad_rank)
        snprintf(what, sizeof what, "%s=%d but MPI rank %d", e->rank_var, e->rank, mpi_rank);
    if (bad_local) {
        size_t n = strlen(what);
        snprintf(what + n, sizeof what - n, "%s%s=%d but MPI local rank %d", n ? ", " : "",
                 e->local_rank_var, e->local_rank, mpi_local_rank);
    }
    /* Not an error: MPI's numbering is the one acx uses; a launcher that
     * numbers differently only makes its own logs misleading. */
    snprintf(warning, size,
             "launcher %s numbers this process differently from MPI: %s (acx uses MPI's "
             "numbering; a rankfile or the MPI library may have reordered the ranks)",
             e->launcher, what);
    return 1;
}

/* ---- the description ---- */

/* Appends to a buffer of `size` bytes, counting the full length like
 * snprintf does even once the buffer is full. */
typedef struct text {
    char *buf;
    size_t size, len;
} text_t;

static void put(text_t *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text_t *t, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    size_t room = t->len < t->size ? t->size - t->len : 0;
    int n = vsnprintf(room ? t->buf + t->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n > 0) t->len += (size_t)n;
}

/* "3" or "?" for an unknown value (below 0, or for sizes and ids below 1). */
static void put_num(text_t *t, long v, long unknown_below) {
    if (v < unknown_below)
        put(t, "?");
    else
        put(t, "%ld", v);
}

size_t acx_launch_env_format(const acx_launch_env_t *e, char *buf, size_t size) {
    text_t t = {.buf = buf, .size = buf != NULL ? size : 0, .len = 0};
    if (t.size > 0) buf[0] = '\0';
    if (e == NULL) {
        put(&t, "launcher unknown (no environment detected)");
        return t.len;
    }
    put(&t, "launcher %s", e->launcher);
    if (e->in_slurm_step) {
        put(&t, " (job ");
        put_num(&t, e->slurm_job_id, 1);
        put(&t, ", step ");
        put_num(&t, e->slurm_step_id, 0);
        put(&t, ")");
    } else if (e->in_slurm_job) {
        put(&t, strcmp(e->launcher, "slurm") == 0 ? " (job " : " (inside Slurm job ");
        put_num(&t, e->slurm_job_id, 1);
        put(&t, strcmp(e->launcher, "slurm") == 0 ? ", no srun step)" : ")");
    } else if (strcmp(e->launcher, "pmix") == 0 && e->pmix_namespace != NULL) {
        put(&t, " (namespace %.128s)", e->pmix_namespace);
    }
    put(&t, ":");
    int fields = 0;
    if (e->rank >= 0 || e->declared_size > 0) {
        put(&t, " rank ");
        put_num(&t, e->rank, 0);
        put(&t, "/");
        put_num(&t, e->declared_size, 1);
        fields++;
    }
    if (e->local_rank >= 0 || e->local_size > 0) {
        put(&t, "%s local rank ", fields++ ? "," : "");
        put_num(&t, e->local_rank, 0);
        put(&t, "/");
        put_num(&t, e->local_size, 1);
    }
    if (e->node_id >= 0 || e->num_nodes > 0) {
        put(&t, "%s node ", fields++ ? "," : "");
        put_num(&t, e->node_id, 0);
        put(&t, "/");
        put_num(&t, e->num_nodes, 1);
        if (e->node_name[0] != '\0') put(&t, " (%s)", e->node_name);
    }
    if (e->nodelist != NULL)
        put(&t, "%s %s %s", fields++ ? "," : "", e->in_slurm_step ? "nodes" : "allocation",
            e->nodelist);
    if (fields == 0)
        put(&t, " %s",
            strcmp(e->launcher, "none") == 0 ? "no launcher variables" : "no world declared");
    if (e->warnings[0] != '\0') put(&t, "\nlauncher warnings: %s", e->warnings);
    return t.len;
}

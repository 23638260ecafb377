/*
 * launch/command.c — the command `acx launch` runs, and the records its rank
 * supervisors leave when a rank ends badly.
 *
 * Owns: choosing the launcher (srun inside a Slurm allocation, else the
 * mpirun/mpiexec of the MPI acx was built with), its flags for this machine
 * (root, oversubscription and the matching yield setting), the ACX_*
 * variables that carry `acx launch`'s options to the ranks, shell quoting
 * for --dry-run; the one-line exit record format, picking the first failure
 * and wording the summary.
 * Leaves to others: parsing the command line and starting processes
 * (cli/launch.c), what the variables mean (base/settings.c's
 * registry: ACX_MIXED_PRECISION, ...), detecting the environment a rank runs
 * in (launch/env.c). Nothing here reads the real environment or the
 * clock: every input is an argument, so the unit tests can pin the output.
 *
 * Why `-x NAME` and not `-x NAME=VALUE` for mpirun: the value is set in
 * mpirun's own environment as well, so --dry-run prints one line of the
 * form `ACX_X=v mpirun ... -x ACX_X ...` that runs as printed, and srun
 * (which exports the whole environment) needs nothing more.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acx/accelerator.h" /* ACX_EXIT_PREEMPTED */
#include "base/error.h"
#include "base/settings.h"
#include "launch/command.h"
#include "launch/env.h"

/* ---- a growable list of owned strings ---- */

typedef struct strvec {
    char **s;
    int n, cap;
    int failed; /* an allocation failed: the list is incomplete */
} strvec_t;

static void sv_add(strvec_t *v, const char *text) {
    if (v->failed) return;
    if (v->n + 2 > v->cap) { /* room for the terminating NULL */
        int cap = v->cap ? 2 * v->cap : 16;
        char **s = realloc(v->s, (size_t)cap * sizeof *s);
        if (s == NULL) {
            v->failed = 1;
            return;
        }
        v->s = s;
        v->cap = cap;
    }
    char *copy = strdup(text);
    if (copy == NULL) {
        v->failed = 1;
        return;
    }
    v->s[v->n++] = copy;
    v->s[v->n] = NULL;
}

static void sv_addf(strvec_t *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sv_addf(strvec_t *v, const char *fmt, ...) {
    char buf[64 + ACX_LAUNCH_WHY_MAX];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof buf) {
        v->failed = 1;
        return;
    }
    sv_add(v, buf);
}

static void sv_free(strvec_t *v) {
    for (int i = 0; i < v->n; i++)
        free(v->s[i]);
    free(v->s);
    v->s = NULL;
    v->n = v->cap = 0;
}

/* ---- the command ---- */

static const char *lookup(const char *(*env)(const char *), const char *name) {
    const char *v = env != NULL ? env(name) : getenv(name);
    return (v != NULL && v[0] != '\0') ? v : NULL;
}

/* A positive int from a launcher variable, or 0 when unset or malformed
 * (the launcher then decides, as it would without acx). */
static int positive_var(const char *(*env)(const char *), const char *name) {
    const char *v = lookup(env, name);
    if (v == NULL) return 0;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno != 0 || *end != '\0' || x < 1 || x > INT_MAX) return 0;
    return (int)x;
}

/* KEY's variable (the registry's, base/settings.h) = value, if value is set. */
static void add_key(strvec_t *env, const char *key, const char *value) {
    const acx_setting_t *s = acx_config_key(acx_config_key_index(key));
    if (value != NULL && s != NULL) sv_addf(env, "%s=%s", s->env, value);
}

/* The ACX_* variables the ranks get from acx launch's options, in the
 * order of the registry's key table. */
static void add_settings(strvec_t *env, const acx_launch_request_t *req) {
    if (req->config_file != NULL)
        sv_addf(env, "%s=%s", acx_env_name(ACX_ENV_CONFIG_FILE), req->config_file);
    add_key(env, "mixed_precision", req->mixed_precision);
    add_key(env, "sharding_strategy", req->sharding_strategy);
    add_key(env, "gradient_accumulation_steps", req->gradient_accumulation_steps);
    if (req->debug) {
        add_key(env, "log_level", "debug");
        /* cross-rank checks before every collective */
        sv_addf(env, "%s=1", acx_env_name(ACX_ENV_DEBUG_MODE));
    }
}

/* The command every rank runs: the supervisor wrapping PROGRAM, or PROGRAM. */
static void add_rank_command(strvec_t *argv, const acx_launch_request_t *req) {
    if (req->supervisor != NULL) {
        sv_add(argv, req->supervisor);
        sv_add(argv, "launch");
        sv_add(argv, "--rank-supervisor");
        sv_add(argv, req->status_dir);
    }
    for (int i = 0; i < req->n_program_args; i++)
        sv_add(argv, req->program_args[i]);
}

static void add_launcher_args(strvec_t *argv, const acx_launch_request_t *req) {
    for (int i = 0; i < req->n_launcher_args; i++)
        sv_add(argv, req->launcher_args[i]);
}

int acx_launch_host_slots(const char *list, char *why, size_t size) {
    char dummy[1];
    if (why == NULL || size == 0) {
        why = dummy;
        size = sizeof dummy;
    }
    why[0] = '\0';
    if (list == NULL || list[0] == '\0') {
        snprintf(why, size, "an empty host list (expected NAME[:SLOTS],... e.g. node1:2,node2:1)");
        return -1;
    }
    long total = 0;
    for (const char *item = list; *item != '\0';) {
        size_t len = strcspn(item, ",");
        size_t name_len = strcspn(item, ":,");
        int ok = name_len > 0 && name_len <= 255;
        for (size_t i = 0; ok && i < name_len; i++) {
            unsigned char ch = (unsigned char)item[i];
            ok = isalnum(ch) || ch == '.' || ch == '-' || ch == '_';
        }
        long slots = 1;
        if (ok && name_len < len) { /* ":SLOTS" */
            const char *digits = item + name_len + 1;
            size_t nd = len - name_len - 1;
            ok = nd > 0 && nd <= 5;
            slots = 0;
            for (size_t i = 0; ok && i < nd; i++) {
                ok = isdigit((unsigned char)digits[i]);
                slots = slots * 10 + (digits[i] - '0');
            }
            ok = ok && slots >= 1 && slots <= 65536;
        }
        if (!ok) {
            snprintf(why, size,
                     "host list item '%.*s' in '%s' (expected NAME or NAME:SLOTS, NAME a host "
                     "name of letters, digits, '.', '-', '_', SLOTS 1..65536)",
                     (int)len, item, list);
            return -1;
        }
        total += slots;
        if (total > 1000000) {
            snprintf(why, size, "host list '%s' places more than 1000000 ranks", list);
            return -1;
        }
        item += len;
        if (*item == ',') {
            item++;
            if (*item == '\0') {
                snprintf(why, size, "host list '%s' ends in ',' (expected NAME[:SLOTS] after it)",
                         list);
                return -1;
            }
        }
    }
    return (int)total;
}

static acx_status_t check_request(const acx_launch_request_t *req, const acx_launch_host_t *host,
                                  acx_launch_cmd_t **cmd_p) {
    if (req == NULL || host == NULL || cmd_p == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_launch_cmd_build: %s is NULL",
                         req == NULL    ? "req"
                         : host == NULL ? "host"
                                        : "cmd_p");
    if (req->n_program_args < 1 || req->program_args == NULL || req->program_args[0] == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx launch: no PROGRAM to run");
    for (int i = 0; i < req->n_program_args; i++)
        if (req->program_args[i] == NULL)
            return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx launch: program argument %d is NULL", i);
    if (req->n_launcher_args < 0 || (req->n_launcher_args > 0 && req->launcher_args == NULL))
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx launch: launcher arguments missing");
    for (int i = 0; i < req->n_launcher_args; i++)
        if (req->launcher_args[i] == NULL)
            return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx launch: launcher argument %d is NULL", i);
    if (req->num_processes < 0 || req->config_num_processes < 0)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "acx launch: number of processes %d is negative (expected >= 1)",
                         req->num_processes < 0 ? req->num_processes : req->config_num_processes);
    if (req->supervisor != NULL && (req->status_dir == NULL || req->status_dir[0] == '\0'))
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx launch: a supervisor needs a status directory");
    if (host->nproc < 1)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx launch: nproc %ld (expected >= 1)", host->nproc);
    if (req->hosts != NULL) {
        char why[512];
        if (acx_launch_host_slots(req->hosts, why, sizeof why) < 0)
            return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx launch: --host: %s", why);
        if (req->hostfile != NULL)
            return ACX_ERROR(ACX_ERR_INVALID_ARG,
                             "acx launch: both --hostfile '%s' and --host '%s' (give one)",
                             req->hostfile, req->hosts);
    }
    return ACX_OK;
}

/* srun inside an allocation: the allocation gives the nodes (no hostfile),
 * its task count is the default number of ranks, and srun starts ranks as
 * tasks, so PMIx is what lets MPI_Init find the others. */
static acx_status_t build_srun(const acx_launch_request_t *req, const acx_launch_host_t *host,
                               const char *(*env)(const char *), acx_launch_cmd_t *cmd,
                               strvec_t *argv, strvec_t *vars) {
    if (req->hostfile != NULL || req->hosts != NULL) { /* the two ways of naming hosts */
        const char *job = NULL, *job_var = acx_launch_slurm_job_var(env, &job);
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "acx launch: %s '%s' inside a Slurm allocation (%s=%s): "
                         "srun runs on the allocation's nodes; pass srun's own --nodelist after "
                         "'--' instead",
                         req->hostfile != NULL ? "--hostfile" : "--host",
                         req->hostfile != NULL ? req->hostfile : req->hosts,
                         job_var ? job_var : "SLURM_JOB_ID", job ? job : "");
    }
    int n = req->num_processes > 0 ? req->num_processes : positive_var(env, "SLURM_NTASKS");
    if (n == 0) n = positive_var(env, "SLURM_NPROCS");
    int nodes = positive_var(env, "SLURM_JOB_NUM_NODES");
    if (nodes == 0) nodes = positive_var(env, "SLURM_NNODES");
    if (nodes == 0) nodes = 1;

    cmd->launcher = "srun";
    cmd->num_processes = n;
    /* Open MPI under srun polls without yielding, and nothing sets the
     * yield for it (mpirun does so itself when it oversubscribes):
     * measured ~1000x slower small collectives at 4 tasks on 2 cores. */
    cmd->oversubscribed = n > 0 && (long)((n + nodes - 1) / nodes) > host->nproc;

    add_settings(vars, req);
    if (cmd->oversubscribed) sv_add(vars, "OMPI_MCA_mpi_yield_when_idle=1");

    sv_add(argv, "srun");
    sv_add(argv, "--mpi=pmix");
    /* One failed task ends the step: srun kills the other tasks at once
     * instead of waiting for them to hang in a collective. */
    sv_add(argv, "--kill-on-bad-exit=1");
    if (n > 0) {
        sv_add(argv, "-n");
        sv_addf(argv, "%d", n);
    }
    add_launcher_args(argv, req);
    add_rank_command(argv, req);
    return ACX_OK;
}

/* Variables of acx launch's own environment that ranks on other nodes need
 * and Open MPI's mpirun does not carry there by itself (it starts remote
 * daemons with a login-shell environment): where to find libacx, MPI, HDF5
 * and the program, and how many threads BLAS and OpenMP may use. */
static const char *const forwarded_vars[] = {"PATH", "LD_LIBRARY_PATH", "OMP_NUM_THREADS",
                                             "OPENBLAS_NUM_THREADS"};

static void build_mpirun(const acx_launch_request_t *req, const acx_launch_host_t *host,
                         const char *(*env)(const char *), acx_launch_cmd_t *cmd, strvec_t *argv,
                         strvec_t *vars) {
    /* the host list was checked (check_request) */
    int list_slots = req->hosts != NULL ? acx_launch_host_slots(req->hosts, NULL, 0) : 0;
    int n = req->num_processes > 0          ? req->num_processes
            : req->config_num_processes > 0 ? req->config_num_processes
            : list_slots > 0                ? list_slots
                                            : 1;
    cmd->num_processes = n;
    /* With a hostfile or a host list their slots decide, not this machine's
     * CPUs (the ranks run on those hosts). */
    int remote = req->hostfile != NULL || req->hosts != NULL;
    cmd->oversubscribed = !remote && n > host->nproc;
    add_settings(vars, req);

    if (host->mpi_flavor == ACX_MPI_FLAVOR_MPICH) {
        /* Hydra passes the whole environment to every rank, runs as root,
         * and runs more ranks than cores without being told. */
        cmd->launcher = "mpiexec";
        sv_add(argv, "mpiexec");
        sv_add(argv, "-n");
        sv_addf(argv, "%d", n);
        if (req->hostfile != NULL) {
            sv_add(argv, "-f");
            sv_add(argv, req->hostfile);
        }
        if (req->hosts != NULL) {
            sv_add(argv, "-hosts");
            sv_add(argv, req->hosts);
        }
    } else {
        cmd->launcher = "mpirun";
        sv_add(argv, "mpirun");
        sv_add(argv, "-np");
        sv_addf(argv, "%d", n);
        if (host->is_root) sv_add(argv, "--allow-run-as-root");
        if (cmd->oversubscribed) {
            /* More ranks than cores: allowed only when asked, and a rank
             * waiting in a collective must yield its core to the others. */
            sv_add(argv, "--oversubscribe");
            sv_add(argv, "--mca");
            sv_add(argv, "mpi_yield_when_idle");
            sv_add(argv, "1");
        }
        if (req->hostfile != NULL) {
            sv_add(argv, "--hostfile");
            sv_add(argv, req->hostfile);
        }
        if (req->hosts != NULL) {
            sv_add(argv, "--host");
            sv_add(argv, req->hosts);
        }
        if (remote) {
            /* Other nodes: forward the set ones by name (-x NAME, as below). */
            for (size_t i = 0; i < sizeof forwarded_vars / sizeof forwarded_vars[0]; i++)
                if (lookup(env, forwarded_vars[i]) != NULL) {
                    sv_add(argv, "-x");
                    sv_add(argv, forwarded_vars[i]);
                }
        }
        for (int i = 0; i < vars->n; i++) {
            const char *eq = strchr(vars->s[i], '=');
            sv_add(argv, "-x");
            sv_addf(argv, "%.*s", (int)(eq - vars->s[i]), vars->s[i]);
        }
    }
    add_launcher_args(argv, req);
    add_rank_command(argv, req);
}

/* Inside a Slurm allocation: srun launches (acx_launch_cmd_build). */
static int in_allocation(const char *(*env)(const char *)) {
    return acx_launch_slurm_job_var(env, NULL) != NULL;
}

const char *acx_launch_launcher_name(const acx_launch_host_t *host,
                                     const char *(*env)(const char *name)) {
    if (in_allocation(env)) return "srun";
    return host->mpi_flavor == ACX_MPI_FLAVOR_MPICH ? "mpiexec" : "mpirun";
}

acx_status_t acx_launch_cmd_build(const acx_launch_request_t *req, const acx_launch_host_t *host,
                                  const char *(*env)(const char *name), acx_launch_cmd_t **cmd_p) {
    ACX_CHECK(check_request(req, host, cmd_p));
    acx_launch_cmd_t *cmd = acx_calloc(1, sizeof *cmd, "launch command");
    if (cmd == NULL) return ACX_ERR_NO_MEMORY;
    strvec_t argv = {0}, vars = {0};
    acx_status_t status = ACX_OK;

    if (in_allocation(env))
        ACX_CHECK_GOTO(build_srun(req, host, env, cmd, &argv, &vars), status, err);
    else
        build_mpirun(req, host, env, cmd, &argv, &vars);
    if (argv.failed || vars.failed) {
        status = ACX_ERROR(ACX_ERR_NO_MEMORY, "acx launch: cannot allocate the command line");
        goto err;
    }
    if (vars.s == NULL) { /* an empty, NULL-terminated list */
        sv_add(&vars, "");
        if (vars.failed) {
            status = ACX_ERROR(ACX_ERR_NO_MEMORY, "acx launch: cannot allocate the command line");
            goto err;
        }
        free(vars.s[0]);
        vars.s[0] = NULL;
        vars.n = 0;
    }
    cmd->argc = argv.n;
    cmd->argv = argv.s;
    cmd->n_env = vars.n;
    cmd->env = vars.s;
    *cmd_p = cmd;
    return ACX_OK;
err:
    sv_free(&argv);
    sv_free(&vars);
    free(cmd);
    return status;
}

void acx_launch_cmd_free(acx_launch_cmd_t *cmd) {
    if (cmd == NULL) return;
    strvec_t a = {cmd->argv, cmd->argc, 0, 0}, e = {cmd->env, cmd->n_env, 0, 0};
    sv_free(&a);
    sv_free(&e);
    free(cmd);
}

/* ---- shell quoting ---- */

static int shell_safe(const char *w) {
    if (*w == '\0') return 0;
    for (; *w; w++) {
        unsigned char c = (unsigned char)*w;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              strchr("_@%+=:,./-", c) != NULL))
            return 0;
    }
    return 1;
}

size_t acx_shell_quote(const char *word, char *buf, size_t size) {
    size_t len = 0;
#define PUT(ch)                                                                                    \
    do {                                                                                           \
        if (len + 1 < size) buf[len] = (ch);                                                       \
        len++;                                                                                     \
    } while (0)
    if (word == NULL) word = "";
    if (shell_safe(word)) {
        for (const char *p = word; *p; p++)
            PUT(*p);
    } else {
        PUT('\'');
        for (const char *p = word; *p; p++) {
            if (*p == '\'') {
                PUT('\'');
                PUT('\\');
                PUT('\'');
                PUT('\'');
            } else {
                PUT(*p);
            }
        }
        PUT('\'');
    }
#undef PUT
    if (size > 0) buf[len < size ? len : size - 1] = '\0';
    return len;
}

acx_status_t acx_launch_cmd_format(const acx_launch_cmd_t *cmd, char **text_p) {
    if (cmd == NULL || text_p == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_launch_cmd_format: %s is NULL",
                         cmd == NULL ? "cmd" : "text_p");
    /* Two passes: measure, then write. An assignment quotes its value only
     * (NAME='a b'), which the shell reads as the assignment it is. */
    size_t total = 1;
    for (int pass = 0; pass < 2; pass++) {
        char *out = NULL;
        if (pass == 1) {
            out = acx_malloc(total, "dry-run text");
            if (out == NULL) return ACX_ERR_NO_MEMORY;
        }
        size_t o = 0;
        for (int i = 0; i < cmd->n_env + cmd->argc; i++) {
            const char *w = i < cmd->n_env ? cmd->env[i] : cmd->argv[i - cmd->n_env];
            if (i > 0) {
                if (out) out[o] = ' ';
                o++;
            }
            const char *eq = i < cmd->n_env ? strchr(w, '=') : NULL;
            if (eq != NULL) {
                size_t nl = (size_t)(eq - w) + 1;
                if (out) memcpy(out + o, w, nl);
                o += nl;
                w = eq + 1;
            }
            o += acx_shell_quote(w, out ? out + o : NULL, out ? total - o : 0);
        }
        if (out) {
            out[o] = '\0';
            *text_p = out;
        } else {
            total = o + 1;
        }
    }
    return ACX_OK;
}

/* ---- exit records ---- */

static const struct {
    int sig;
    const char *name;
} signal_names[] = {
    {SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},
    {SIGTRAP, "SIGTRAP"}, {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},
    {SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"}, {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"},
    {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"}, {SIGXCPU, "SIGXCPU"},
    {SIGXFSZ, "SIGXFSZ"},
};

const char *acx_signal_name(int sig) {
    for (size_t i = 0; i < sizeof signal_names / sizeof signal_names[0]; i++)
        if (signal_names[i].sig == sig) return signal_names[i].name;
    return NULL;
}

size_t acx_rank_exit_format(const acx_rank_exit_t *r, char *buf, size_t size) {
    char host[ACX_LAUNCH_HOST_MAX], why[ACX_LAUNCH_WHY_MAX];
    /* One record, one line, space-separated: a blank in the host name (there
     * should be none) or a newline in the text would split it. */
    snprintf(host, sizeof host, "%s", r->host[0] ? r->host : "?");
    for (char *p = host; *p; p++)
        if (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') *p = '?';
    snprintf(why, sizeof why, "%s", r->why);
    for (char *p = why; *p; p++)
        if (*p == '\n' || *p == '\r') *p = ' ';
    int n = snprintf(buf, size,
                     "acx-rank-exit v1 rank=%d host=%s pid=%ld code=%d signal=%d teardown=%d "
                     "time=%lld job=%ld step=%ld why=%s\n",
                     r->rank, host, r->pid, r->exit_code, r->signal, r->teardown ? 1 : 0,
                     r->time_ns, r->job_id, r->step_id, why);
    return n < 0 ? 0 : (size_t)n;
}

/* "key=" at *p: parse a long long up to the next blank; advance *p. */
static int take_number(const char **p, const char *key, long long lo, long long hi,
                       long long *out) {
    size_t kl = strlen(key);
    if (strncmp(*p, key, kl) != 0 || (*p)[kl] != '=') return 0;
    const char *s = *p + kl + 1;
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (errno != 0 || end == s || (*end != ' ' && *end != '\0') || x < lo || x > hi) return 0;
    *out = x;
    *p = *end == ' ' ? end + 1 : end;
    return 1;
}

acx_status_t acx_rank_exit_parse(const char *line, acx_rank_exit_t *r_p) {
    static const char magic[] = "acx-rank-exit v1 ";
    if (line == NULL || r_p == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_rank_exit_parse: %s is NULL",
                         line == NULL ? "line" : "r_p");
    if (strncmp(line, magic, sizeof magic - 1) != 0)
        return ACX_ERROR(ACX_ERR_FORMAT, "rank exit record: does not start with '%s'", magic);
    acx_rank_exit_t r;
    memset(&r, 0, sizeof r);
    const char *p = line + sizeof magic - 1;
    long long v;
    const char *field = "rank";
    if (!take_number(&p, "rank", -1, INT_MAX, &v)) goto bad;
    r.rank = (int)v;
    field = "host";
    if (strncmp(p, "host=", 5) != 0) goto bad;
    p += 5;
    size_t hl = strcspn(p, " \n");
    if (hl == 0 || hl >= sizeof r.host || p[hl] != ' ') goto bad;
    memcpy(r.host, p, hl);
    p += hl + 1;
    field = "pid";
    if (!take_number(&p, "pid", -1, LONG_MAX, &v)) goto bad;
    r.pid = (long)v;
    field = "code";
    if (!take_number(&p, "code", -1, 255, &v)) goto bad;
    r.exit_code = (int)v;
    field = "signal";
    if (!take_number(&p, "signal", 0, 255, &v)) goto bad;
    r.signal = (int)v;
    field = "teardown";
    if (!take_number(&p, "teardown", 0, 1, &v)) goto bad;
    r.teardown = (int)v;
    field = "time";
    if (!take_number(&p, "time", 0, LLONG_MAX, &v)) goto bad;
    r.time_ns = v;
    field = "job";
    if (!take_number(&p, "job", 0, LONG_MAX, &v)) goto bad;
    r.job_id = (long)v;
    field = "step";
    if (!take_number(&p, "step", -1, LONG_MAX, &v)) goto bad;
    r.step_id = (long)v;
    field = "why";
    if (strncmp(p, "why=", 4) != 0) goto bad;
    p += 4;
    size_t wl = strcspn(p, "\n");
    if (wl >= sizeof r.why) wl = sizeof r.why - 1;
    memcpy(r.why, p, wl);
    /* Exactly one of an exit code and a signal. */
    field = "code/signal";
    if ((r.exit_code >= 0) == (r.signal > 0)) goto bad;
    *r_p = r;
    return ACX_OK;
bad:
    return ACX_ERROR(ACX_ERR_FORMAT, "rank exit record: field '%s' missing or invalid in '%.200s'",
                     field, line);
}

int acx_rank_exit_first(const acx_rank_exit_t *r, int n) {
    int best = -1;
    for (int i = 0; i < n; i++) {
        if (best < 0) {
            best = i;
            continue;
        }
        /* A failure of its own beats any teardown; then the earliest. */
        if (r[i].teardown != r[best].teardown) {
            if (!r[i].teardown) best = i;
            continue;
        }
        if (r[i].time_ns < r[best].time_ns ||
            (r[i].time_ns == r[best].time_ns && r[i].rank < r[best].rank))
            best = i;
    }
    return best;
}

int acx_rank_exit_first_failure(const acx_rank_exit_t *r, int n) {
    int best = -1;
    for (int i = 0; i < n; i++) {
        if (r[i].teardown || (r[i].signal == 0 && r[i].exit_code == ACX_EXIT_PREEMPTED)) continue;
        if (best < 0 || r[i].time_ns < r[best].time_ns ||
            (r[i].time_ns == r[best].time_ns && r[i].rank < r[best].rank))
            best = i;
    }
    return best;
}

size_t acx_rank_exit_describe(const acx_rank_exit_t *r, char *buf, size_t size) {
    int n;
    if (r->signal > 0) {
        const char *name = acx_signal_name(r->signal);
        /* SIGKILL that nobody in the job sent is most often the kernel's
         * OOM killer (or Slurm's memory limit): say so, as a question. */
        n = snprintf(buf, size, "killed by signal %d%s%s%s%s", r->signal, name ? " (" : "",
                     name ? name : "", name ? ")" : "",
                     r->signal == SIGKILL ? " \xe2\x80\x94 out of memory?" : "");
    } else {
        n = snprintf(buf, size, "exit code %d", r->exit_code);
    }
    return n < 0 ? 0 : (size_t)n;
}

size_t acx_rank_exit_summary(const acx_rank_exit_t *r, char *buf, size_t size) {
    char how[128], rank[32], slurm[96] = "";
    acx_rank_exit_describe(r, how, sizeof how);
    if (r->rank >= 0)
        snprintf(rank, sizeof rank, "rank %d", r->rank);
    else
        snprintf(rank, sizeof rank, "a rank (pid %ld)", r->pid);
    if (r->job_id > 0 && r->step_id >= 0)
        snprintf(slurm, sizeof slurm, " (Slurm job %ld, step %ld)", r->job_id, r->step_id);
    else if (r->job_id > 0)
        snprintf(slurm, sizeof slurm, " (Slurm job %ld)", r->job_id);
    int n = snprintf(buf, size, "%s on %s %s: %s%s%s%s", rank, r->host[0] ? r->host : "?",
                     r->teardown ? "was stopped" : "failed first", how, slurm,
                     r->why[0] ? "; " : "", r->why);
    return n < 0 ? 0 : (size_t)n;
}

int acx_rank_exit_status(const acx_rank_exit_t *r) {
    if (r->signal > 0) return 128 + r->signal;
    if (r->exit_code > 0 && r->exit_code <= 255) return r->exit_code;
    return 1;
}

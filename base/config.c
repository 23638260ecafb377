/*
 * base/config.c — resolving the configuration from built-in
 * defaults, a YAML file, ACX_* environment variables, --acx-KEY=VALUE
 * options and the program's acx_config_t, in that order of precedence.
 *
 * Owns: the key table (every key once: name, environment variable, type,
 * accepted values, default, place in acx_config_t), parsing and checking
 * values from every source, the origin of each resolved value, choosing and
 * reading the config file (libyaml document API), reading an Accelerate
 * default_config.yaml as it is (the Accelerate table: which of its keys map
 * onto acx's, which are launch information, which acx ignores and which it
 * cannot honour), and rendering the result as text/YAML (acx config show).
 * Leaves to others: acting on the values (runtime/), reading the command
 * line (the accelerator passes --config and --acx-* strings in), and
 * ACX_LOG_SUBSYS (log.c).
 *
 * Adding a key is adding a row to key_table: nested YAML sections
 * ("checkpoint.total_limit" under "checkpoint:") follow from the dotted name
 * at any depth, enum rows may list extra spellings of a value ("FULL_SHARD"
 * for full_shard), and a row whose env is NULL is read from files/options
 * only. Adding an Accelerate key is adding a row to accel_table.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <yaml.h>

#include "base/config_resolve.h"
#include "base/error.h"
#include "base/log.h"
#include "base/signal_list.h"

/* ---- the key table ---- */

typedef enum key_type {
    KT_BOOL,   /* int field, 0/1 */
    KT_INT,    /* int field */
    KT_INT64,  /* int64_t field */
    KT_DOUBLE, /* double field */
    KT_ENUM,   /* int field, values from `names` */
    KT_STRING  /* const char * field, text kept in a buffer of acx_resolved_config_t
                * (info rows: a char array of acx_config_info_t) */
} key_type_t;

/* One accepted spelling of an enum value; the first spelling listed for a
 * value is its canonical name (printed, written to YAML). */
typedef struct enum_name {
    const char *name;
    int value;
} enum_name_t;

typedef struct config_key {
    const char *name; /* dotted YAML path */
    const char *env;  /* environment variable, NULL = none */
    key_type_t type;
    const enum_name_t *names;    /* KT_ENUM: NULL-terminated */
    double lo, hi;               /* numeric range; -INFINITY/INFINITY = unbounded */
    int lo_exclusive;            /* value must be > lo rather than >= lo */
    size_t offset, size;         /* the field in acx_config_t (info rows: acx_config_info_t) */
    size_t buf_offset, buf_size; /* KT_STRING: the buffer in acx_resolved_config_t */
    const char *def;             /* default, as text, parsed like any other source */
    /* Values Accelerate accepts for this key that acx cannot honour: in an
     * Accelerate file they go to the warning, anywhere else they are an
     * error. NULL-terminated; NULL = none. */
    const char *const *unhonoured;
    const char *note; /* appended to "expected ..." in messages; NULL = none */
} config_key_t;

static const enum_name_t mp_names[] = {
    {"no", ACX_MP_NO}, {"bf16", ACX_MP_BF16}, {"fp16", ACX_MP_FP16}, {NULL, 0}};
static const enum_name_t shard_names[] = {{"no_shard", ACX_NO_SHARD},
                                          {"shard_grad_op", ACX_SHARD_GRAD_OP},
                                          {"full_shard", ACX_FULL_SHARD},
                                          {"hybrid_shard", ACX_HYBRID_SHARD},
                                          {NULL, 0}};
static const enum_name_t level_names[] = {{"error", ACX_LOG_ERROR},  {"warn", ACX_LOG_WARN},
                                          {"info", ACX_LOG_INFO},    {"debug", ACX_LOG_DEBUG},
                                          {"warning", ACX_LOG_WARN}, {NULL, 0}};
static const enum_name_t backend_names[] = {
    {"auto", ACX_BACKEND_AUTO}, {"mpi", ACX_BACKEND_MPI}, {"nccl", ACX_BACKEND_NCCL}, {NULL, 0}};
static const enum_name_t device_state_names[] = {{"auto", ACX_DEVICE_STATE_AUTO},
                                                 {"host", ACX_DEVICE_STATE_HOST},
                                                 {"cuda", ACX_DEVICE_STATE_CUDA},
                                                 {"emulated", ACX_DEVICE_STATE_EMULATED},
                                                 {NULL, 0}};
static const enum_name_t offload_names[] = {
    {"none", ACX_OFFLOAD_NONE}, {"cpu", ACX_OFFLOAD_CPU}, {NULL, 0}};
static const enum_name_t log_with_names[] = {
    {"none", ACX_LOG_WITH_NONE}, {"jsonl", ACX_LOG_WITH_JSONL}, {NULL, 0}};
/* PyTorch FSDP's BackwardPrefetch names, lower case; BACKWARD_PRE etc. match
 * too, as every enum value matches in any case. */
static const enum_name_t prefetch_names[] = {{"backward_pre", ACX_BACKWARD_PRE},
                                             {"backward_post", ACX_BACKWARD_POST},
                                             {"no_prefetch", ACX_BACKWARD_NONE},
                                             {NULL, 0}};

static const enum_name_t reduce_names[] = {
    {"fp32", ACX_REDUCE_FP32}, {"bf16", ACX_REDUCE_BF16}, {"fp16", ACX_REDUCE_FP16}, {NULL, 0}};
static const enum_name_t resume_names[] = {
    {"no", ACX_RESUME_NO}, {"auto", ACX_RESUME_AUTO}, {NULL, 0}};
static const enum_name_t existing_names[] = {{"refuse", ACX_CHECKPOINT_EXISTING_REFUSE},
                                             {"archive", ACX_CHECKPOINT_EXISTING_ARCHIVE},
                                             {NULL, 0}};

/* Accelerate's values acx has no counterpart for. */
static const char *const mp_unhonoured[] = {"fp8", NULL};
static const char *const trackers[] = {"tensorboard", "wandb",   "comet_ml", "aim", "mlflow",
                                       "clearml",     "dvclive", "all",      NULL};

#define FIELD(f)  offsetof(acx_config_t, f), sizeof(((acx_config_t *)0)->f)
#define NOBUF     0, 0
#define UNBOUNDED -INFINITY, INFINITY, 0
#define PLAIN     NULL, NULL /* no unhonoured values, no note */

/* Rows of one YAML section must stay contiguous (acx_config_to_yaml opens a
 * section once). The order is the order of `acx config show`. */
static const config_key_t key_table[] = {
    {"mixed_precision", "ACX_MIXED_PRECISION", KT_ENUM, mp_names, UNBOUNDED, FIELD(mixed_precision),
     NOBUF, "no", mp_unhonoured, NULL},
    {"sharding_strategy", "ACX_SHARDING_STRATEGY", KT_ENUM, shard_names, UNBOUNDED,
     FIELD(sharding_strategy), NOBUF, "no_shard", PLAIN},
    {"reduce_dtype", "ACX_REDUCE_DTYPE", KT_ENUM, reduce_names, UNBOUNDED, FIELD(reduce_dtype),
     NOBUF, "fp32", NULL, "the dtype gradients are reduced in under mixed precision"},
    {"gradient_accumulation_steps", "ACX_GRADIENT_ACCUMULATION_STEPS", KT_INT, NULL, 1, INFINITY, 0,
     FIELD(gradient_accumulation_steps), NOBUF, "1", PLAIN},
    {"seed", "ACX_SEED", KT_INT64, NULL, UNBOUNDED, FIELD(seed), NOBUF, "42", PLAIN},
    {"project_dir", "ACX_PROJECT_DIR", KT_STRING, NULL, UNBOUNDED, FIELD(project_dir),
     offsetof(acx_resolved_config_t, project_dir), ACX_PATH_MAX, ".", PLAIN},
    {"log_level", "ACX_LOG_LEVEL", KT_ENUM, level_names, UNBOUNDED, FIELD(log_level), NOBUF, "warn",
     PLAIN},
    {"log_with", "ACX_LOG_WITH", KT_ENUM, log_with_names, UNBOUNDED, FIELD(log_with), NOBUF, "none",
     trackers,
     "acx writes metrics as JSONL; Accelerate's trackers (tensorboard, wandb, ...) are "
     "not available"},
    {"collective_timeout", "ACX_COLLECTIVE_TIMEOUT", KT_DOUBLE, NULL, 0, INFINITY, 0,
     FIELD(collective_timeout), NOBUF, "600", NULL, "seconds; 0 = no stall detector"},
    {"bucket_size_mb", "ACX_BUCKET_SIZE_MB", KT_DOUBLE, NULL, 0, INFINITY, 1, FIELD(bucket_size_mb),
     NOBUF, "25", PLAIN},
    {"backend", "ACX_BACKEND", KT_ENUM, backend_names, UNBOUNDED, FIELD(backend), NOBUF, "auto",
     PLAIN},
    {"device_state", "ACX_DEVICE_STATE", KT_ENUM, device_state_names, UNBOUNDED,
     FIELD(device_state), NOBUF, "auto", NULL,
     "auto = cuda with backend nccl, else host; emulated = a CPU test double of the device "
     "path, for testing without a GPU"},
    {"offload_optimizer", "ACX_OFFLOAD_OPTIMIZER", KT_ENUM, offload_names, UNBOUNDED,
     FIELD(offload_optimizer), NOBUF, "none", NULL,
     "cpu = fp32 master weights and optimizer state in host memory, the step on the CPU "
     "(needs device_state cuda or emulated, sharding_strategy no_shard)"},
    {"ranks_per_node", "ACX_RANKS_PER_NODE", KT_INT, NULL, 0, INFINITY, 0, FIELD(ranks_per_node),
     NOBUF, "0", NULL, "0 = the real nodes"},
    {"checkpoint.total_limit", "ACX_CHECKPOINT_TOTAL_LIMIT", KT_INT, NULL, 0, INFINITY, 0,
     FIELD(checkpoint.total_limit), NOBUF, "0", PLAIN},
    {"checkpoint.save_every_steps", "ACX_CHECKPOINT_SAVE_EVERY_STEPS", KT_INT64, NULL, 0, INFINITY,
     0, FIELD(checkpoint.save_every_steps), NOBUF, "0", PLAIN},
    {"checkpoint.allow_unverified", "ACX_CHECKPOINT_ALLOW_UNVERIFIED", KT_BOOL, NULL, UNBOUNDED,
     FIELD(checkpoint_allow_unverified), NOBUF, "false", NULL,
     "true = load checkpoint data that carries no checksum (loudly); false refuses it"},
    {"checkpoint.existing", "ACX_CHECKPOINT_EXISTING", KT_ENUM, existing_names, UNBOUNDED,
     FIELD(checkpoint_existing), NOBUF, "refuse", NULL,
     "what acx_prepare does when project_dir holds checkpoints and the run does not resume: "
     "refuse, or archive them into checkpoints/archived-<time>/"},
    {"checkpoint.timeout", "ACX_CHECKPOINT_TIMEOUT", KT_DOUBLE, NULL, 0, INFINITY, 1,
     FIELD(checkpoint_timeout), NOBUF, "1800", NULL,
     "seconds; the stall detector's limit for a checkpoint save or load, file I/O included "
     "(off with collective_timeout 0)"},
    {"resume", "ACX_RESUME", KT_ENUM, resume_names, UNBOUNDED, FIELD(resume), NOBUF, "no", NULL,
     "auto = load <project_dir>/checkpoints/latest at acx_prepare when it exists"},
    {"resume_from", "ACX_RESUME_FROM", KT_STRING, NULL, UNBOUNDED, FIELD(resume_from),
     offsetof(acx_resolved_config_t, resume_from), ACX_PATH_MAX, "none", NULL,
     "latest, a checkpoint file or directory, loaded at acx_prepare; none = do not"},
    {"preemption.signals", "ACX_PREEMPTION_SIGNALS", KT_STRING, NULL, UNBOUNDED,
     FIELD(preemption.signals), offsetof(acx_resolved_config_t, preemption_signals),
     sizeof(((acx_resolved_config_t *)0)->preemption_signals), "USR1,TERM", NULL,
     "comma-separated signal names (USR1, USR2, TERM, INT, HUP, XCPU), or none"},
    {"preemption.requeue", "ACX_PREEMPTION_REQUEUE", KT_BOOL, NULL, UNBOUNDED,
     FIELD(preemption.requeue), NOBUF, "false", PLAIN},
    {"dataloader.drop_last", "ACX_DATALOADER_DROP_LAST", KT_BOOL, NULL, UNBOUNDED,
     FIELD(dataloader.drop_last), NOBUF, "false", PLAIN},
    {"dataloader.even_batches", "ACX_DATALOADER_EVEN_BATCHES", KT_BOOL, NULL, UNBOUNDED,
     FIELD(dataloader.even_batches), NOBUF, "true", PLAIN},
    {"dataloader.split_batches", "ACX_DATALOADER_SPLIT_BATCHES", KT_BOOL, NULL, UNBOUNDED,
     FIELD(dataloader.split_batches), NOBUF, "false", PLAIN},
    {"dataloader.prefetch", "ACX_DATALOADER_PREFETCH", KT_INT, NULL, 0, INFINITY, 0,
     FIELD(dataloader.prefetch), NOBUF, "1", PLAIN},
    {"fsdp.forward_prefetch", "ACX_FSDP_FORWARD_PREFETCH", KT_BOOL, NULL, UNBOUNDED,
     FIELD(fsdp.forward_prefetch), NOBUF, "false", PLAIN},
    {"fsdp.backward_prefetch", "ACX_FSDP_BACKWARD_PREFETCH", KT_ENUM, prefetch_names, UNBOUNDED,
     FIELD(fsdp.backward_prefetch), NOBUF, "backward_pre", PLAIN},
    /* PyTorch's limit_all_gathers is a bool; acx's is the cap itself, and
     * an Accelerate file's true/false maps onto it (ah_fsdp_limit). */
    {"fsdp.limit_all_gathers", "ACX_FSDP_LIMIT_ALL_GATHERS", KT_INT, NULL, 0, INFINITY, 0,
     FIELD(fsdp.limit_all_gathers), NOBUF, "2", NULL,
     "0 = no cap; PyTorch's limit_all_gathers=True is 2, False is 0"},
    {"loss_scale.init", "ACX_LOSS_SCALE_INIT", KT_DOUBLE, NULL, 0, INFINITY, 1,
     FIELD(loss_scale.init), NOBUF, "65536", PLAIN},
    {"loss_scale.growth_interval", "ACX_LOSS_SCALE_GROWTH_INTERVAL", KT_INT, NULL, 1, INFINITY, 0,
     FIELD(loss_scale.growth_interval), NOBUF, "2000", PLAIN},
    {"loss_scale.min", "ACX_LOSS_SCALE_MIN", KT_DOUBLE, NULL, 0, INFINITY, 0, FIELD(loss_scale.min),
     NOBUF, "1", PLAIN},
    {"loss_scale.max_consecutive_skips", "ACX_LOSS_SCALE_MAX_CONSECUTIVE_SKIPS", KT_INT, NULL, 1,
     INFINITY, 0, FIELD(loss_scale.max_consecutive_skips), NOBUF, "20", PLAIN},
};

#define NUM_KEYS ((int)(sizeof key_table / sizeof key_table[0]))
_Static_assert(sizeof key_table / sizeof key_table[0] <= ACX_CONFIG_MAX_KEYS,
               "raise ACX_CONFIG_MAX_KEYS in config_resolve.h");

/* The launch information: read from a config file only (an Accelerate
 * file's keys of the same names), never from the environment or the
 * program, and never acted on by acx_init. Offsets are into
 * acx_config_info_t; a KT_STRING row's field is a char array there. */
#define INFO(f)        offsetof(acx_config_info_t, f), sizeof(((acx_config_info_t *)0)->f)
#define INFO_STRBUF(f) 0, sizeof(((acx_config_info_t *)0)->f)

static const config_key_t info_table[] = {
    {"num_processes", NULL, KT_INT, NULL, 1, INFINITY, 0, INFO(num_processes), NOBUF, NULL, PLAIN},
    {"num_machines", NULL, KT_INT, NULL, 1, INFINITY, 0, INFO(num_machines), NOBUF, NULL, PLAIN},
    {"machine_rank", NULL, KT_INT, NULL, 0, INFINITY, 0, INFO(machine_rank), NOBUF, NULL, PLAIN},
    {"main_process_ip", NULL, KT_STRING, NULL, UNBOUNDED, INFO(main_process_ip),
     INFO_STRBUF(main_process_ip), NULL, PLAIN},
    {"main_process_port", NULL, KT_INT, NULL, 0, 65535, 0, INFO(main_process_port), NOBUF, NULL,
     PLAIN},
};

#define NUM_INFO ((int)(sizeof info_table / sizeof info_table[0]))
_Static_assert(sizeof info_table / sizeof info_table[0] <= ACX_CONFIG_MAX_INFO,
               "raise ACX_CONFIG_MAX_INFO in config_resolve.h");

int acx_config_num_keys(void) { return NUM_KEYS; }

const char *acx_config_key_name(int i) {
    return (i >= 0 && i < NUM_KEYS) ? key_table[i].name : NULL;
}

int acx_config_num_info(void) { return NUM_INFO; }

const char *acx_config_info_name(int i) {
    return (i >= 0 && i < NUM_INFO) ? info_table[i].name : NULL;
}

static const char *enum_canonical(const enum_name_t *names, int value) {
    for (const enum_name_t *e = names; e->name != NULL; e++)
        if (e->value == value) return e->name;
    return "invalid";
}

const char *acx_sharding_strategy_name(int s) { return enum_canonical(shard_names, s); }
const char *acx_mixed_precision_name(int mp) { return enum_canonical(mp_names, mp); }
const char *acx_backend_name(int b) { return enum_canonical(backend_names, b); }
const char *acx_device_state_name(int d) { return enum_canonical(device_state_names, d); }
const char *acx_offload_optimizer_name(int o) { return enum_canonical(offload_names, o); }
const char *acx_log_with_name(int w) { return enum_canonical(log_with_names, w); }
const char *acx_backward_prefetch_name(int p) { return enum_canonical(prefetch_names, p); }
const char *acx_resume_name(int r) { return enum_canonical(resume_names, r); }

static int find_key(const char *name) {
    for (int i = 0; i < NUM_KEYS; i++)
        if (strcmp(key_table[i].name, name) == 0) return i;
    return -1;
}

static int find_info(const char *name) {
    for (int i = 0; i < NUM_INFO; i++)
        if (strcmp(info_table[i].name, name) == 0) return i;
    return -1;
}

/* Whether `name` is a section: some key is "name.xxx". */
static int is_section(const char *name) {
    size_t n = strlen(name);
    for (int i = 0; i < NUM_KEYS; i++)
        if (strncmp(key_table[i].name, name, n) == 0 && key_table[i].name[n] == '.') return 1;
    return 0;
}

/* Whether text is one of the NULL-terminated list, ignoring case. */
static int in_list(const char *const *list, const char *text) {
    for (; list != NULL && *list != NULL; list++)
        if (strcasecmp(*list, text) == 0) return 1;
    return 0;
}

/* ---- values: parsing, checking, storing ---- */

typedef struct value {
    int64_t i;     /* KT_BOOL, KT_INT, KT_INT64, KT_ENUM */
    double d;      /* KT_DOUBLE */
    const char *s; /* KT_STRING (borrowed until stored) */
} value_t;

/* KT_STRING keys whose text has a syntax of its own, checked with the
 * value so that every source (file, environment, option, program) and
 * `acx config show` refuse a bad one alike; the key's note says what is
 * expected. */
static int signal_list_valid(const char *text) {
    int mask;
    return acx_signal_list_parse(text, &mask, NULL, 0) == 0;
}

static const struct {
    const char *key;
    int (*valid)(const char *text); /* 1 = valid */
} text_checks[] = {{"preemption.signals", signal_list_valid}};

static int (*text_check(const config_key_t *k))(const char *) {
    for (size_t i = 0; i < sizeof text_checks / sizeof text_checks[0]; i++)
        if (strcmp(text_checks[i].key, k->name) == 0) return text_checks[i].valid;
    return NULL;
}

static void describe_accepted_(const config_key_t *k, char *buf, size_t n);

/* What a key accepts, for messages: "one of: no, bf16, fp16", "an integer
 * >= 1", then the row's note if it has one. */
static void describe_accepted(const config_key_t *k, char *buf, size_t n) {
    describe_accepted_(k, buf, n);
    size_t o = strlen(buf);
    if (k->note != NULL && o < n) snprintf(buf + o, n - o, "; %s", k->note);
}

static void describe_accepted_(const config_key_t *k, char *buf, size_t n) {
    size_t o = 0;
    buf[0] = '\0';
    switch (k->type) {
    case KT_BOOL: snprintf(buf, n, "true or false (also yes/no, on/off, 1/0)"); return;
    case KT_STRING:
        if (text_check(k) != NULL && k->note != NULL) /* the note says it all */
            snprintf(buf, n, "a value of %zu bytes at most", k->buf_size - 1);
        else
            snprintf(buf, n, "a non-empty string of at most %zu bytes", k->buf_size - 1);
        return;
    case KT_ENUM:
        o = (size_t)snprintf(buf, n, "one of:");
        for (const enum_name_t *e = k->names; e->name != NULL && o < n; e++)
            if (strcmp(enum_canonical(k->names, e->value), e->name) == 0)
                o += (size_t)snprintf(buf + o, n - o, "%s %s", e == k->names ? "" : ",", e->name);
        return;
    case KT_INT:
    case KT_INT64:
    case KT_DOUBLE: {
        const char *what = k->type == KT_DOUBLE ? "a number" : "an integer";
        int has_lo = isfinite(k->lo), has_hi = isfinite(k->hi);
        if (has_lo && has_hi)
            snprintf(buf, n, "%s between %g and %g", what, k->lo, k->hi);
        else if (has_lo)
            snprintf(buf, n, "%s %s %g", what, k->lo_exclusive ? ">" : ">=", k->lo);
        else if (has_hi)
            snprintf(buf, n, "%s <= %g", what, k->hi);
        else
            snprintf(buf, n, "%s", what);
        return;
    }
    }
}

/* Range and membership checks shared by text and program values. */
static int check_value(const config_key_t *k, const value_t *v) {
    switch (k->type) {
    case KT_BOOL: return v->i == 0 || v->i == 1;
    case KT_ENUM:
        for (const enum_name_t *e = k->names; e->name != NULL; e++)
            if (e->value == v->i) return 1;
        return 0;
    case KT_INT:
        if (v->i < INT_MIN || v->i > INT_MAX) return 0;
        /* fall through */
    case KT_INT64:
        if (k->lo_exclusive ? !((double)v->i > k->lo) : !((double)v->i >= k->lo)) return 0;
        return (double)v->i <= k->hi;
    case KT_DOUBLE:
        if (!isfinite(v->d)) return 0;
        if (k->lo_exclusive ? !(v->d > k->lo) : !(v->d >= k->lo)) return 0;
        return v->d <= k->hi;
    case KT_STRING:
        return v->s != NULL && v->s[0] != '\0' && strlen(v->s) < k->buf_size &&
               (text_check(k) == NULL || text_check(k)(v->s));
    }
    return 0;
}

/* Copy text without surrounding blanks into buf (values from the
 * environment often carry a stray space). Returns 0 if it does not fit. */
static int trim(const char *text, char *buf, size_t n) {
    while (isspace((unsigned char)*text))
        text++;
    size_t len = strlen(text);
    while (len > 0 && isspace((unsigned char)text[len - 1]))
        len--;
    if (len >= n) return 0;
    memcpy(buf, text, len);
    buf[len] = '\0';
    return 1;
}

/* Text -> value, checked. Returns 1 if accepted. v->s points into `text`. */
static int parse_value(const config_key_t *k, const char *text, value_t *v) {
    char *end;
    memset(v, 0, sizeof *v);
    switch (k->type) {
    case KT_BOOL: {
        static const char *const t[] = {"true", "yes", "on", "1"};
        static const char *const f[] = {"false", "no", "off", "0"};
        for (int i = 0; i < 4; i++) {
            if (strcasecmp(text, t[i]) == 0) {
                v->i = 1;
                return 1;
            }
            if (strcasecmp(text, f[i]) == 0) {
                v->i = 0;
                return 1;
            }
        }
        return 0;
    }
    case KT_ENUM:
        for (const enum_name_t *e = k->names; e->name != NULL; e++)
            if (strcasecmp(text, e->name) == 0) {
                v->i = e->value;
                return 1;
            }
        return 0;
    case KT_INT:
    case KT_INT64: {
        if (text[0] == '\0') return 0;
        errno = 0;
        long long x = strtoll(text, &end, 10);
        if (errno != 0 || *end != '\0') return 0;
        v->i = (int64_t)x;
        break;
    }
    case KT_DOUBLE:
        if (text[0] == '\0') return 0;
        errno = 0;
        v->d = strtod(text, &end);
        if (errno == ERANGE || *end != '\0') return 0;
        break;
    case KT_STRING: v->s = text; break;
    }
    return check_value(k, v);
}

static void store_value(acx_resolved_config_t *cfg, const config_key_t *k, const value_t *v) {
    char *field = (char *)&cfg->values + k->offset;
    switch (k->type) {
    case KT_BOOL:
    case KT_INT:
    case KT_ENUM: *(int *)field = (int)v->i; break;
    case KT_INT64: *(int64_t *)field = v->i; break;
    case KT_DOUBLE: *(double *)field = v->d; break;
    case KT_STRING: {
        char *buf = (char *)cfg + k->buf_offset;
        snprintf(buf, k->buf_size, "%s", v->s); /* length checked by check_value */
        *(const char **)field = buf;
        break;
    }
    }
}

/* An info row's value into cfg->info (checked by parse_value). */
static void store_info(acx_resolved_config_t *cfg, const config_key_t *k, const value_t *v) {
    char *field = (char *)&cfg->info + k->offset;
    if (k->type == KT_STRING)
        snprintf(field, k->size, "%s", v->s);
    else
        *(int *)field = (int)v->i;
}

/* where: "run.yaml:3", "ACX_SEED", "--acx-seed", "program" ("" for a
 * default). A where too long for the origin keeps its tail
 * ("...deep/path/run.yaml:3"): the file name and line matter more than the
 * leading directories. */
static void origin_set(acx_config_origin_t *o, acx_config_source_t src, const char *where) {
    char *dst = o->where;
    size_t cap = sizeof o->where, len = strlen(where);
    o->source = src;
    if (len < cap) {
        memcpy(dst, where, len + 1);
    } else {
        memcpy(dst, "...", 3);
        memcpy(dst + 3, where + len - (cap - 4), cap - 4 + 1);
    }
}

static void set_origin(acx_resolved_config_t *cfg, int ki, acx_config_source_t src,
                       const char *where) {
    origin_set(&cfg->origin[ki], src, where);
}

/* ---- YAML nodes ---- */

static int line_of(const yaml_node_t *node) { return (int)node->start_mark.line + 1; }

static const char *node_kind(const yaml_node_t *node) {
    switch (node->type) {
    case YAML_SCALAR_NODE: return "a scalar";
    case YAML_SEQUENCE_NODE: return "a list";
    case YAML_MAPPING_NODE: return "a mapping";
    default: return "nothing";
    }
}

/* A plain empty/~/null scalar: YAML's null, which leaves the key unset. */
static int is_null_scalar(const yaml_node_t *node) {
    if (node->type != YAML_SCALAR_NODE || node->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return 0;
    const char *s = (const char *)node->data.scalar.value;
    return s[0] == '\0' || strcmp(s, "~") == 0 || strcmp(s, "null") == 0 ||
           strcmp(s, "Null") == 0 || strcmp(s, "NULL") == 0;
}

/* The scalar's text, or NULL if it holds a NUL byte (from a "\0" escape). */
static const char *scalar_text(const yaml_node_t *node) {
    const char *s = (const char *)node->data.scalar.value;
    return strlen(s) == node->data.scalar.length ? s : NULL;
}

/* A value as a warning shows it: the scalar (cut at 60 bytes), "[...]" or
 * "{...}" ("[]" and "{}" when empty). */
static void node_value_text(const yaml_node_t *node, char *buf, size_t n) {
    if (node->type == YAML_SEQUENCE_NODE)
        snprintf(buf, n, "%s",
                 node->data.sequence.items.top == node->data.sequence.items.start ? "[]" : "[...]");
    else if (node->type == YAML_MAPPING_NODE)
        snprintf(buf, n, "%s",
                 node->data.mapping.pairs.top == node->data.mapping.pairs.start ? "{}" : "{...}");
    else if (node->type == YAML_SCALAR_NODE && scalar_text(node) != NULL)
        snprintf(buf, n, "%.60s%s", scalar_text(node), strlen(scalar_text(node)) > 60 ? "..." : "");
    else
        snprintf(buf, n, "?");
}

/* Whether a node is null, {} or []. */
static int is_empty_node(const yaml_node_t *node) {
    if (node->type == YAML_SEQUENCE_NODE)
        return node->data.sequence.items.top == node->data.sequence.items.start;
    if (node->type == YAML_MAPPING_NODE)
        return node->data.mapping.pairs.top == node->data.mapping.pairs.start;
    return is_null_scalar(node);
}

/* ---- the Accelerate table ----
 *
 * Every key `accelerate config` writes (Accelerate 0.2x-1.x ClusterConfig,
 * plus the fsdp_config and deepspeed_config sub-keys), and what acx does
 * with it. docs/config.md has the same table with the reasons; keep the
 * two in step. A key is one of:
 *   ignored     meaningless for acx (Accelerate/torch machinery that acx
 *               does its own way, TPU settings, launcher details);
 *   info        launch information, kept read-only (acx_config_info_t);
 *   checked     its valid values are listed; those acx does not honour go
 *               to the warning ("cannot honour");
 *   false-only  a bool whose true acx cannot honour;
 *   empty-only  a mapping acx honours only when empty;
 *   section     fsdp_config / deepspeed_config: read only when
 *               distributed_type selects it, as Accelerate does;
 *   mapped      interpreted by its function onto acx's keys.
 */

typedef enum accel_kind {
    AK_IGNORED,
    AK_INFO,
    AK_CHECK,
    AK_FALSE,
    AK_EMPTY,
    AK_SECTION,
    AK_MAPPED
} accel_kind_t;

struct yaml_ctx;
typedef acx_status_t (*accel_apply_fn)(struct yaml_ctx *ctx, int ai, const char *text);

typedef struct accel_key {
    const char *name; /* "use_cpu", "fsdp_config.fsdp_offload_params" */
    accel_kind_t kind;
    const char *const *valid; /* AK_CHECK, AK_MAPPED: accepted spellings, any case; NULL = any */
    const char *const *fine;  /* AK_CHECK: the valid values acx honours; NULL = all of them */
    const char *target;       /* AK_INFO: the info row; AK_CHECK/FALSE/EMPTY: the warning's note */
    accel_apply_fn apply;     /* AK_MAPPED */
} accel_key_t;

static acx_status_t ah_distributed_type(struct yaml_ctx *ctx, int ai, const char *text);
static acx_status_t ah_use_cpu(struct yaml_ctx *ctx, int ai, const char *text);
static acx_status_t ah_fsdp_strategy(struct yaml_ctx *ctx, int ai, const char *text);
static acx_status_t ah_fsdp_reshard(struct yaml_ctx *ctx, int ai, const char *text);
static acx_status_t ah_zero_stage(struct yaml_ctx *ctx, int ai, const char *text);
static acx_status_t ah_ds_accumulation(struct yaml_ctx *ctx, int ai, const char *text);
static acx_status_t ah_fsdp_backward_prefetch(struct yaml_ctx *ctx, int ai, const char *text);
static acx_status_t ah_fsdp_forward_prefetch(struct yaml_ctx *ctx, int ai, const char *text);
static acx_status_t ah_fsdp_limit(struct yaml_ctx *ctx, int ai, const char *text);
static acx_status_t ah_fsdp_offload(struct yaml_ctx *ctx, int ai, const char *text);
static acx_status_t ah_ds_offload_optimizer(struct yaml_ctx *ctx, int ai, const char *text);

/* distributed_type: data parallel on some device (acx picks the device
 * itself), the two sharded kinds, and what acx cannot run at all. */
/* clang-format off */
static const char *const dt_data_parallel[] = {
    "NO", "MULTI_CPU", "MULTI_GPU", "MULTI_NPU", "MULTI_XPU",
    "MULTI_MLU", "MULTI_MUSA", "MULTI_SDAA", "MULTI_HPU", NULL};
static const char *const dt_unsupported[] = {"TPU", "XLA", "MEGATRON_LM", NULL};
static const char *const dt_valid[] = {
    "NO", "MULTI_CPU", "MULTI_GPU", "MULTI_NPU", "MULTI_XPU",
    "MULTI_MLU", "MULTI_MUSA", "MULTI_SDAA", "MULTI_HPU",
    "FSDP", "DEEPSPEED", "TPU", "XLA", "MEGATRON_LM", NULL};
static const char *const compute_valid[] = {"LOCAL_MACHINE", "AMAZON_SAGEMAKER", NULL};
static const char *const compute_fine[] = {"LOCAL_MACHINE", NULL};
static const char *const all_fine[] = {"all", NULL};
static const char *const none_fine[] = {"none", NULL};
static const char *const offload_valid[] = {"none", "cpu", "nvme", NULL};
static const char *const fsdp_strategy_valid[] = {
    "FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "HYBRID_SHARD_ZERO2",
    "1", "2", "3", "4", "5", NULL};
static const char *const state_dict_valid[] = {
    "FULL_STATE_DICT", "LOCAL_STATE_DICT", "SHARDED_STATE_DICT", "1", "2", "3", NULL};
static const char *const prefetch_valid[] = {"BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH", NULL};
static const char *const zero_stage_valid[] = {"0", "1", "2", "3", NULL};

/* One row of each kind. */
#define AIGN(name)                 {name, AK_IGNORED, NULL, NULL, NULL, NULL}
#define AINFO(name, info, valid)   {name, AK_INFO, valid, NULL, info, NULL}
#define ACHECK(name, v, fine, why) {name, AK_CHECK, v, fine, why, NULL}
#define AFALSE(name, why)          {name, AK_FALSE, NULL, NULL, why, NULL}
#define AEMPTY(name, why)          {name, AK_EMPTY, NULL, NULL, why, NULL}
#define ASECTION(name)             {name, AK_SECTION, NULL, NULL, NULL, NULL}
#define AMAP(name, valid, fn)      {name, AK_MAPPED, valid, NULL, NULL, fn}
/* clang-format on */

#define NO_PARAM_OFFLOAD                                                                           \
    "ignored: acx keeps parameters in device memory (only the optimizer offloads: "                \
    "offload_optimizer)"

/* A section's rows follow each other, after the top-level rows. */
static const accel_key_t accel_table[] = {
    AIGN("command_file"),
    AIGN("commands"),
    ACHECK("compute_environment", compute_valid, compute_fine,
           "ignored: acx runs under mpirun, srun or acx launch"),
    AIGN("debug"),
    ASECTION("deepspeed_config"),
    AMAP("distributed_type", dt_valid, ah_distributed_type),
    AIGN("downcast_bf16"),
    AIGN("dynamo_backend"),
    AIGN("dynamo_config"),
    AIGN("enable_cpu_affinity"),
    AIGN("fp8_config"),
    ASECTION("fsdp_config"),
    ACHECK("gpu_ids", NULL, all_fine, "ignored: acx uses the devices the launcher makes visible"),
    AIGN("ipex_config"),
    AINFO("machine_rank", "machine_rank", NULL),
    AINFO("main_process_ip", "main_process_ip", NULL),
    AINFO("main_process_port", "main_process_port", NULL),
    AIGN("main_training_function"),
    AIGN("megatron_lm_config"),
    AIGN("mpirun_config"),
    AINFO("num_machines", "num_machines", NULL),
    AINFO("num_processes", "num_processes", NULL),
    AIGN("rdzv_backend"),
    AIGN("same_network"),
    AEMPTY("tp_config", "ignored: acx has no tensor parallelism"),
    AIGN("tpu_env"),
    AIGN("tpu_name"),
    AIGN("tpu_use_cluster"),
    AIGN("tpu_use_sudo"),
    AIGN("tpu_vm"),
    AIGN("tpu_zone"),
    AMAP("use_cpu", NULL, ah_use_cpu),

    AFALSE("fsdp_config.fsdp_activation_checkpointing",
           "ignored: the forward pass is the program's own code"),
    AIGN("fsdp_config.fsdp_auto_wrap_policy"),
    AMAP("fsdp_config.fsdp_backward_prefetch", prefetch_valid, ah_fsdp_backward_prefetch),
    AMAP("fsdp_config.fsdp_backward_prefetch_policy", prefetch_valid, ah_fsdp_backward_prefetch),
    AIGN("fsdp_config.fsdp_cpu_ram_efficient_loading"),
    AMAP("fsdp_config.fsdp_forward_prefetch", NULL, ah_fsdp_forward_prefetch),
    AMAP("fsdp_config.fsdp_limit_all_gathers", NULL, ah_fsdp_limit),
    AIGN("fsdp_config.fsdp_min_num_params"),
    AMAP("fsdp_config.fsdp_offload_params", NULL, ah_fsdp_offload),
    AMAP("fsdp_config.fsdp_reshard_after_forward", NULL, ah_fsdp_reshard),
    AMAP("fsdp_config.fsdp_sharding_strategy", fsdp_strategy_valid, ah_fsdp_strategy),
    ACHECK("fsdp_config.fsdp_state_dict_type", state_dict_valid, NULL, NULL),
    AIGN("fsdp_config.fsdp_sync_module_states"),
    AIGN("fsdp_config.fsdp_transformer_layer_cls_to_wrap"),
    AIGN("fsdp_config.fsdp_use_orig_params"),
    AIGN("fsdp_config.fsdp_version"),

    ACHECK("deepspeed_config.deepspeed_config_file", NULL, none_fine,
           "ignored: acx does not read DeepSpeed JSON files"),
    AIGN("deepspeed_config.deepspeed_exclusion_filter"),
    AIGN("deepspeed_config.deepspeed_hostfile"),
    AIGN("deepspeed_config.deepspeed_inclusion_filter"),
    AIGN("deepspeed_config.deepspeed_moe_layer_cls_names"),
    AIGN("deepspeed_config.deepspeed_multinode_launcher"),
    AMAP("deepspeed_config.gradient_accumulation_steps", NULL, ah_ds_accumulation),
    ACHECK("deepspeed_config.gradient_clipping", NULL, none_fine,
           "ignored: the program clips with acx_clip_grad_norm"),
    AMAP("deepspeed_config.offload_optimizer_device", offload_valid, ah_ds_offload_optimizer),
    AIGN("deepspeed_config.offload_optimizer_nvme_path"),
    ACHECK("deepspeed_config.offload_param_device", offload_valid, none_fine, NO_PARAM_OFFLOAD),
    AIGN("deepspeed_config.offload_param_nvme_path"),
    AIGN("deepspeed_config.zero3_init_flag"),
    AIGN("deepspeed_config.zero3_save_16bit_model"),
    AMAP("deepspeed_config.zero_stage", zero_stage_valid, ah_zero_stage),
};

#define NUM_ACCEL ((int)(sizeof accel_table / sizeof accel_table[0]))

static int find_accel(const char *name) {
    for (int i = 0; i < NUM_ACCEL; i++)
        if (strcmp(accel_table[i].name, name) == 0) return i;
    return -1;
}

/* ---- unknown keys: names and suggestions ---- */

/* "bucket_size_mb, mixed_precision, ..." for unknown-key messages. */
static void known_keys(char *buf, size_t n) {
    size_t o = 0;
    buf[0] = '\0';
    for (int i = 0; i < NUM_KEYS && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%s", i ? ", " : "", key_table[i].name);
}

/* Levenshtein distance, capped inputs (keys are short). */
static int edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63) return 1000;
    int row[64];
    for (size_t j = 0; j <= lb; j++)
        row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int up = row[j];
            int best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

/* "; did you mean 'bucket_size_mb'?" or "". Candidates: acx's keys, and
 * with `accelerate` Accelerate's too. A name is close when at most a third
 * of its last component (at least 2 characters) differs, so long dotted
 * names do not attract far-fetched guesses. */
static void suggest_key(const char *name, int accelerate, char *buf, size_t n) {
    const char *best = NULL;
    int best_d = 1000;
    for (int i = 0; i < NUM_KEYS; i++) {
        int d = edit_distance(name, key_table[i].name);
        if (d < best_d) best_d = d, best = key_table[i].name;
    }
    for (int i = 0; accelerate && i < NUM_ACCEL; i++) {
        int d = edit_distance(name, accel_table[i].name);
        if (d < best_d) best_d = d, best = accel_table[i].name;
    }
    const char *tail = strrchr(name, '.');
    int limit = (int)strlen(tail ? tail + 1 : name) / 3;
    if (limit < 2) limit = 2;
    if (best != NULL && best_d <= limit)
        snprintf(buf, n, "; did you mean '%s'?", best);
    else
        buf[0] = '\0';
}

/* where: "run.yaml:3" or "option --acx-foo". accelerate: also suggest
 * Accelerate's key names (files only). */
static acx_status_t unknown_key_error(const char *where, const char *name, int accelerate) {
    char known[1024], hint[160];
    known_keys(known, sizeof known);
    suggest_key(name, accelerate, hint, sizeof hint);
    return ACX_ERROR(ACX_ERR_INVALID_CONFIG, "%s: unknown key '%s' (known keys: %s)%s", where, name,
                     known, hint);
}

/* ---- libyaml errors ---- */

/* libyaml is used only in this file, so its checking macro lives here and
 * not in base/error.h. A libyaml call returns 1 on success and 0 on
 * failure, leaving the reason in the parser: the kind of error, libyaml's
 * problem text, where the problem is and what it was parsing at the time.
 * The message keeps that text, names the libyaml function and records the
 * file:line of the call site (not of yaml_error). */
static acx_status_t yaml_error(const yaml_parser_t *p, const char *path, const char *call,
                               const char *file, int line) {
    /* "yaml_parser_load(&parser, &doc)" -> "yaml_parser_load": the reader
     * of a config error wants libyaml's function, not acx's variables. */
    int name_len = (int)strcspn(call, "( ");
    if (p->error == YAML_MEMORY_ERROR)
        return acx_error_set(ACX_ERR_NO_MEMORY, file, line, "%s: libyaml ran out of memory (%.*s)",
                             path, name_len, call);
    if (p->error == YAML_NO_ERROR) /* not expected: libyaml sets error on every failure */
        return acx_error_set(ACX_ERR_YAML, file, line, "%s: %.*s failed without a libyaml error",
                             path, name_len, call);
    const char *problem = p->problem ? p->problem : "unknown problem";
    if (p->error == YAML_READER_ERROR)
        return acx_error_set(ACX_ERR_YAML, file, line, "%s: YAML read error at byte %zu: %s (%.*s)",
                             path, p->problem_offset, problem, name_len, call);
    char context[160] = "";
    if (p->context)
        snprintf(context, sizeof context, " (%s at line %zu, column %zu)", p->context,
                 p->context_mark.line + 1, p->context_mark.column + 1);
    return acx_error_set(ACX_ERR_YAML, file, line, "%s:%zu:%zu: YAML syntax error: %s%s (%.*s)",
                         path, p->problem_mark.line + 1, p->problem_mark.column + 1, problem,
                         context, name_len, call);
}

/* `parser` is a yaml_parser_t *, `path` the file named in the message. */
#define ACX_YAML_CHECK_GOTO(call, parser, path, status, label)                                     \
    do {                                                                                           \
        if (!(call)) {                                                                             \
            (status) = yaml_error((parser), (path), #call, __FILE__, __LINE__);                    \
            goto label;                                                                            \
        }                                                                                          \
    } while (0)

/* ---- the YAML file ---- */

#define MAX_WARNINGS 32

typedef struct warning_entry {
    int line;
    char text[288]; /* "KEY=VALUE (line N, what acx does instead)" */
} warning_entry_t;

typedef struct yaml_ctx {
    yaml_document_t *doc;
    const char *path; /* as the user gave it, for messages */
    acx_resolved_config_t *cfg;
    int accelerate;    /* the file has compute_environment or distributed_type */
    int strategy_seen; /* an fsdp/deepspeed key decided sharding_strategy (or declined to) */
    yaml_node_t *akey[NUM_ACCEL], *aval[NUM_ACCEL]; /* Accelerate keys met, by table row */
    int n_warnings, n_dropped;
    warning_entry_t warnings[MAX_WARNINGS];
} yaml_ctx_t;

/* Note a setting acx cannot honour; note says what acx does instead. */
static void warn_add(yaml_ctx_t *ctx, const char *name, const yaml_node_t *knode,
                     const yaml_node_t *vnode, const char *note) {
    if (ctx->n_warnings == MAX_WARNINGS) {
        ctx->n_dropped++;
        return;
    }
    warning_entry_t *w = &ctx->warnings[ctx->n_warnings++];
    char value[80];
    node_value_text(vnode, value, sizeof value);
    w->line = line_of(knode);
    snprintf(w->text, sizeof w->text, "%s=%s (line %d, %s)", name, value, w->line,
             note ? note : "ignored");
}

/* The one warning line, entries in file order. */
static void warnings_finish(yaml_ctx_t *ctx) {
    char *buf = ctx->cfg->warning;
    size_t n = sizeof ctx->cfg->warning, o;
    buf[0] = '\0';
    if (ctx->n_warnings == 0) return;
    for (int i = 1; i < ctx->n_warnings; i++) /* insertion sort: stable, few entries */
        for (int j = i; j > 0 && ctx->warnings[j - 1].line > ctx->warnings[j].line; j--) {
            warning_entry_t t = ctx->warnings[j];
            ctx->warnings[j] = ctx->warnings[j - 1];
            ctx->warnings[j - 1] = t;
        }
    o = (size_t)snprintf(buf, n, "%s: settings acx cannot honour:", ctx->path);
    for (int i = 0; i < ctx->n_warnings && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s %s", i ? "," : "", ctx->warnings[i].text);
    if (ctx->n_dropped > 0 && o < n)
        o += (size_t)snprintf(buf + o, n - o, ", and %d more", ctx->n_dropped);
    if (o >= n) memcpy(buf + n - 4, "...", 4); /* cut: say so */
}

/* "run.yaml:7" or "run.yaml:7 (fsdp_config.fsdp_sharding_strategy)". */
static void file_where(const yaml_ctx_t *ctx, const yaml_node_t *node, const char *via, char *buf,
                       size_t n) {
    if (via != NULL)
        snprintf(buf, n, "%s:%d (%s)", ctx->path, line_of(node), via);
    else
        snprintf(buf, n, "%s:%d", ctx->path, line_of(node));
}

/* Set acx key `key` to `text` (a canonical spelling) because the Accelerate
 * key `via` (at vnode) says so. A second setting from the same file is fine
 * when it agrees, an error when it does not. */
static acx_status_t accel_set(yaml_ctx_t *ctx, const char *key, const char *text,
                              const yaml_node_t *vnode, const char *via) {
    int ki = find_key(key);
    value_t v;
    if (ki < 0 || !parse_value(&key_table[ki], text, &v))
        return ACX_ERROR(ACX_ERR_INTERNAL, "Accelerate mapping: %s=%s does not parse", key, text);
    const acx_config_origin_t *o = &ctx->cfg->origin[ki];
    if (o->source == ACX_SRC_FILE) {
        char have[64];
        acx_config_format_value(ctx->cfg, ki, have, sizeof have);
        if (strcmp(have, text) == 0) return ACX_OK;
        return ACX_ERROR(ACX_ERR_INVALID_CONFIG,
                         "%s:%d: key '%s' means %s=%s, but %s already set it to %s", ctx->path,
                         line_of(vnode), via, key, text, o->where, have);
    }
    store_value(ctx->cfg, &key_table[ki], &v);
    char where[ACX_PATH_MAX + 96];
    file_where(ctx, vnode, via, where, sizeof where);
    set_origin(ctx->cfg, ki, ACX_SRC_FILE, where);
    return ACX_OK;
}

/* "one of: A, B, C" from a NULL-terminated list. */
static void describe_list(const char *const *list, char *buf, size_t n) {
    size_t o = (size_t)snprintf(buf, n, "one of:");
    for (int i = 0; list[i] != NULL && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s %s", i ? "," : "", list[i]);
}

static acx_status_t accel_bad_value(const yaml_ctx_t *ctx, const char *name, const yaml_node_t *v,
                                    const char *text, const char *accepted) {
    return ACX_ERROR(ACX_ERR_INVALID_CONFIG,
                     "%s:%d: key '%s': invalid value '%.200s' (expected %s)", ctx->path, line_of(v),
                     name, text ? text : "(contains a NUL byte)", accepted);
}

/* A YAML 1.1 bool (true/false, yes/no, on/off, 1/0), or -1. */
static int parse_bool(const char *text) {
    static const config_key_t b = {"", NULL, KT_BOOL, NULL, UNBOUNDED, 0, 0, NOBUF, NULL, PLAIN};
    value_t v;
    return (text != NULL && parse_value(&b, text, &v)) ? (int)v.i : -1;
}

/* An Accelerate key carrying launch information. */
static acx_status_t info_set(yaml_ctx_t *ctx, int ai, const char *text) {
    const accel_key_t *r = &accel_table[ai];
    yaml_node_t *v = ctx->aval[ai];
    int ii = find_info(r->target);
    if (ii < 0) return ACX_ERROR(ACX_ERR_INTERNAL, "no info row '%s'", r->target);
    const config_key_t *k = &info_table[ii];
    acx_config_origin_t *o = &ctx->cfg->info_origin[ii];
    if (o->source == ACX_SRC_FILE)
        return ACX_ERROR(ACX_ERR_INVALID_CONFIG, "%s:%d: key '%s' sets %s, which %s already set",
                         ctx->path, line_of(ctx->akey[ai]), r->name, k->name, o->where);
    value_t val;
    if (!parse_value(k, text, &val)) {
        char accepted[512];
        describe_accepted(k, accepted, sizeof accepted);
        return accel_bad_value(ctx, r->name, v, text, accepted);
    }
    store_info(ctx->cfg, k, &val);
    char where[ACX_PATH_MAX + 96];
    file_where(ctx, v, strcmp(r->name, k->name) == 0 ? NULL : r->name, where, sizeof where);
    origin_set(o, ACX_SRC_FILE, where);
    return ACX_OK;
}

/* Act on Accelerate row ai if the file has it. */
static acx_status_t accel_row(yaml_ctx_t *ctx, int ai) {
    const accel_key_t *r = &accel_table[ai];
    yaml_node_t *k = ctx->akey[ai], *v = ctx->aval[ai];
    char accepted[512];
    if (k == NULL || r->kind == AK_IGNORED) return ACX_OK;
    if (r->kind == AK_SECTION) {
        if (v->type == YAML_MAPPING_NODE || is_null_scalar(v)) return ACX_OK;
        return ACX_ERROR(ACX_ERR_INVALID_CONFIG,
                         "%s:%d: key '%s' must be a mapping of its sub-keys, got %s", ctx->path,
                         line_of(v), r->name, node_kind(v));
    }
    if (r->kind == AK_EMPTY) {
        if (!is_empty_node(v)) warn_add(ctx, r->name, k, v, r->target);
        return ACX_OK;
    }
    if (is_null_scalar(v)) return ACX_OK;
    const char *text = v->type == YAML_SCALAR_NODE ? scalar_text(v) : NULL;
    if (r->kind == AK_CHECK && r->valid == NULL) { /* free-form: only `fine` is honoured */
        if (text == NULL || !in_list(r->fine, text)) warn_add(ctx, r->name, k, v, r->target);
        return ACX_OK;
    }

    if (r->valid != NULL)
        describe_list(r->valid, accepted, sizeof accepted);
    else if (r->kind == AK_INFO)
        describe_accepted(&info_table[find_info(r->target)], accepted, sizeof accepted);
    else if (r->kind == AK_FALSE)
        snprintf(accepted, sizeof accepted, "true or false");
    else
        snprintf(accepted, sizeof accepted, "a scalar");
    if (v->type != YAML_SCALAR_NODE)
        return ACX_ERROR(ACX_ERR_INVALID_CONFIG, "%s:%d: key '%s': expected %s, got %s", ctx->path,
                         line_of(v), r->name, accepted, node_kind(v));
    if (text == NULL || (r->valid != NULL && !in_list(r->valid, text)))
        return accel_bad_value(ctx, r->name, v, text, accepted);

    switch (r->kind) {
    case AK_CHECK:
        if (r->fine != NULL && !in_list(r->fine, text)) warn_add(ctx, r->name, k, v, r->target);
        return ACX_OK;
    case AK_FALSE: {
        int b = parse_bool(text);
        if (b < 0) return accel_bad_value(ctx, r->name, v, text, accepted);
        if (b) warn_add(ctx, r->name, k, v, r->target);
        return ACX_OK;
    }
    case AK_INFO: return info_set(ctx, ai, text);
    case AK_MAPPED: return r->apply(ctx, ai, text);
    default: return ACX_OK;
    }
}

/* An unknown key of the file (full dotted name). In acx's own files it is
 * an error; an Accelerate file may carry keys of a newer Accelerate, so
 * there it goes to the warning, unless it looks like a typo of a known key. */
static acx_status_t unknown_in_file(yaml_ctx_t *ctx, const char *name, const yaml_node_t *knode,
                                    const yaml_node_t *vnode) {
    char where[ACX_PATH_MAX + 32], hint[160];
    snprintf(where, sizeof where, "%s:%d", ctx->path, line_of(knode));
    if (!ctx->accelerate) return unknown_key_error(where, name, 1);
    suggest_key(name, 1, hint, sizeof hint);
    if (hint[0] != '\0')
        return ACX_ERROR(ACX_ERR_INVALID_CONFIG, "%s: unknown key '%s'%s", where, name, hint);
    warn_add(ctx, name, knode, vnode, "unknown to acx, ignored");
    return ACX_OK;
}

/* Remember Accelerate key ai (read in the second pass, whole-file). */
static acx_status_t accel_record(yaml_ctx_t *ctx, int ai, yaml_node_t *knode, yaml_node_t *vnode) {
    if (ctx->akey[ai] != NULL)
        return ACX_ERROR(ACX_ERR_INVALID_CONFIG, "%s:%d: key '%s' given twice (first at %s:%d)",
                         ctx->path, line_of(knode), accel_table[ai].name, ctx->path,
                         line_of(ctx->akey[ai]));
    ctx->akey[ai] = knode;
    ctx->aval[ai] = vnode;
    return ACX_OK;
}

/* Read the section `name` (fsdp_config, deepspeed_config): record its
 * keys, then act on them in table order. */
static acx_status_t accel_section(yaml_ctx_t *ctx, const char *name) {
    int si = find_accel(name);
    yaml_node_t *map = si >= 0 ? ctx->aval[si] : NULL;
    size_t n = strlen(name);
    if (map != NULL && map->type == YAML_MAPPING_NODE) {
        for (yaml_node_pair_t *pair = map->data.mapping.pairs.start;
             pair < map->data.mapping.pairs.top; pair++) {
            yaml_node_t *knode = yaml_document_get_node(ctx->doc, pair->key);
            yaml_node_t *vnode = yaml_document_get_node(ctx->doc, pair->value);
            const char *ktext =
                knode && knode->type == YAML_SCALAR_NODE ? scalar_text(knode) : NULL;
            if (ktext == NULL || vnode == NULL)
                return ACX_ERROR(ACX_ERR_INVALID_CONFIG, "%s:%d: expected a key name in '%s'",
                                 ctx->path, knode ? line_of(knode) : 0, name);
            char full[300];
            snprintf(full, sizeof full, "%s.%s", name, ktext);
            int ai = find_accel(full);
            if (ai < 0)
                ACX_CHECK(unknown_in_file(ctx, full, knode, vnode));
            else
                ACX_CHECK(accel_record(ctx, ai, knode, vnode));
        }
    } else if (map != NULL && !is_null_scalar(map)) {
        return accel_row(ctx, si); /* the "must be a mapping" error */
    }
    for (int ai = 0; ai < NUM_ACCEL; ai++)
        if (strncmp(accel_table[ai].name, name, n) == 0 && accel_table[ai].name[n] == '.')
            ACX_CHECK(accel_row(ctx, ai));
    return ACX_OK;
}

/* ---- the Accelerate mapping ---- */

static acx_status_t ah_distributed_type(yaml_ctx_t *ctx, int ai, const char *text) {
    yaml_node_t *v = ctx->aval[ai];
    if (in_list(dt_data_parallel, text))
        return accel_set(ctx, "sharding_strategy", "no_shard", v, "distributed_type");
    if (in_list(dt_unsupported, text))
        return ACX_ERROR(ACX_ERR_NOT_SUPPORTED,
                         "%s:%d: key 'distributed_type': acx cannot run '%s' (TPU/XLA and "
                         "Megatron-LM are not supported; acx runs data parallel (NO, MULTI_CPU, "
                         "MULTI_GPU, ...), FSDP and DEEPSPEED configurations)",
                         ctx->path, line_of(v), text);
    if (strcasecmp(text, "FSDP") == 0) {
        ACX_CHECK(accel_section(ctx, "fsdp_config"));
        /* FULL_SHARD is Accelerate's default strategy. */
        if (!ctx->strategy_seen)
            return accel_set(ctx, "sharding_strategy", "full_shard", v, "distributed_type: FSDP");
        return ACX_OK;
    }
    /* DEEPSPEED: zero_stage, else Accelerate's default stage 2, unless a
     * DeepSpeed JSON file (which acx does not read) has the say. */
    ACX_CHECK(accel_section(ctx, "deepspeed_config"));
    int fi = find_accel("deepspeed_config.deepspeed_config_file");
    const yaml_node_t *f = ctx->aval[fi];
    int json =
        f != NULL && !is_null_scalar(f) &&
        !(f->type == YAML_SCALAR_NODE && scalar_text(f) && in_list(none_fine, scalar_text(f)));
    if (!ctx->strategy_seen && !json)
        return accel_set(ctx, "sharding_strategy", "shard_grad_op", v,
                         "distributed_type: DEEPSPEED, ZeRO stage 2 by default");
    return ACX_OK;
}

static acx_status_t ah_use_cpu(yaml_ctx_t *ctx, int ai, const char *text) {
    int b = parse_bool(text);
    if (b < 0) return accel_bad_value(ctx, "use_cpu", ctx->aval[ai], text, "true or false");
    return b ? accel_set(ctx, "backend", "mpi", ctx->aval[ai], "use_cpu") : ACX_OK;
}

/* FSDP's ShardingStrategy by name or by its number (1-5). */
static acx_status_t fsdp_strategy(yaml_ctx_t *ctx, int ai, const char *text) {
    static const struct {
        const char *name, *number, *acx;
    } map[] = {{"FULL_SHARD", "1", "full_shard"},
               {"SHARD_GRAD_OP", "2", "shard_grad_op"},
               {"NO_SHARD", "3", "no_shard"},
               {"HYBRID_SHARD", "4", "hybrid_shard"},
               {"HYBRID_SHARD_ZERO2", "5", NULL}};
    ctx->strategy_seen = 1;
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        if (strcasecmp(text, map[i].name) != 0 && strcmp(text, map[i].number) != 0) continue;
        if (map[i].acx != NULL)
            return accel_set(ctx, "sharding_strategy", map[i].acx, ctx->aval[ai],
                             accel_table[ai].name);
        warn_add(ctx, accel_table[ai].name, ctx->akey[ai], ctx->aval[ai],
                 "ignored: acx has no HYBRID_SHARD_ZERO2; sharding_strategy not set from it");
        return ACX_OK;
    }
    return ACX_ERROR(ACX_ERR_INTERNAL, "fsdp strategy '%s' passed the check", text);
}

static acx_status_t ah_fsdp_strategy(yaml_ctx_t *ctx, int ai, const char *text) {
    return fsdp_strategy(ctx, ai, text);
}

/* FSDP2's bool (true: reshard = FULL_SHARD, false: SHARD_GRAD_OP), or, in
 * Accelerate's FSDP1 spelling, a strategy name. */
static acx_status_t ah_fsdp_reshard(yaml_ctx_t *ctx, int ai, const char *text) {
    if (in_list(fsdp_strategy_valid, text) && parse_bool(text) < 0)
        return fsdp_strategy(ctx, ai, text);
    int b = parse_bool(text);
    if (b < 0)
        return accel_bad_value(ctx, accel_table[ai].name, ctx->aval[ai], text,
                               "true, false, or a sharding strategy: FULL_SHARD, SHARD_GRAD_OP, "
                               "NO_SHARD, HYBRID_SHARD, HYBRID_SHARD_ZERO2");
    ctx->strategy_seen = 1;
    return accel_set(ctx, "sharding_strategy", b ? "full_shard" : "shard_grad_op", ctx->aval[ai],
                     accel_table[ai].name);
}

/* ZeRO stages: 0 = DDP, 2 = gradients and optimizer state sharded, 3 =
 * parameters too. Stage 1 shards the optimizer state only; acx runs it as
 * stage 2, which computes the same update with the same traffic
 * (reduce-scatter + all-gather instead of all-reduce) and less memory. */
static acx_status_t ah_zero_stage(yaml_ctx_t *ctx, int ai, const char *text) {
    static const char *const acx[] = {"no_shard", "shard_grad_op", "shard_grad_op", "full_shard"};
    int stage = text[0] - '0'; /* one of "0".."3" (checked) */
    ctx->strategy_seen = 1;
    if (stage == 1)
        warn_add(ctx, accel_table[ai].name, ctx->akey[ai], ctx->aval[ai],
                 "runs as shard_grad_op (ZeRO-2), the nearest: same update and traffic, less "
                 "memory");
    return accel_set(ctx, "sharding_strategy", acx[stage], ctx->aval[ai], accel_table[ai].name);
}

static acx_status_t ah_ds_accumulation(yaml_ctx_t *ctx, int ai, const char *text) {
    if (strcasecmp(text, "auto") == 0) return ACX_OK; /* "whatever the program says" */
    const config_key_t *k = &key_table[find_key("gradient_accumulation_steps")];
    value_t v;
    if (!parse_value(k, text, &v))
        return accel_bad_value(ctx, accel_table[ai].name, ctx->aval[ai], text,
                               "an integer >= 1, or auto");
    char canon[32];
    snprintf(canon, sizeof canon, "%" PRId64, v.i);
    return accel_set(ctx, "gradient_accumulation_steps", canon, ctx->aval[ai],
                     accel_table[ai].name);
}

/* FSDP's BackwardPrefetch by name (checked against prefetch_valid): the
 * acx enum takes the same names in any case. */
static acx_status_t ah_fsdp_backward_prefetch(yaml_ctx_t *ctx, int ai, const char *text) {
    const config_key_t *k = &key_table[find_key("fsdp.backward_prefetch")];
    value_t v;
    if (!parse_value(k, text, &v))
        return ACX_ERROR(ACX_ERR_INTERNAL, "backward prefetch '%s' passed the check", text);
    return accel_set(ctx, k->name, enum_canonical(k->names, (int)v.i), ctx->aval[ai],
                     accel_table[ai].name);
}

static acx_status_t ah_fsdp_forward_prefetch(yaml_ctx_t *ctx, int ai, const char *text) {
    int b = parse_bool(text);
    if (b < 0)
        return accel_bad_value(ctx, accel_table[ai].name, ctx->aval[ai], text, "true or false");
    return accel_set(ctx, "fsdp.forward_prefetch", b ? "true" : "false", ctx->aval[ai],
                     accel_table[ai].name);
}

/* PyTorch's bool: true caps the units gathered at once (its rate limiter
 * lets two all-gathers run ahead of the frees), false leaves them
 * uncapped; acx's key is the cap itself, so true is 2 and false 0. */
static acx_status_t ah_fsdp_limit(yaml_ctx_t *ctx, int ai, const char *text) {
    int b = parse_bool(text);
    if (b < 0)
        return accel_bad_value(ctx, accel_table[ai].name, ctx->aval[ai], text, "true or false");
    return accel_set(ctx, "fsdp.limit_all_gathers", b ? "2" : "0", ctx->aval[ai],
                     accel_table[ai].name);
}

/* FSDP's CPUOffload(offload_params=True): parameters, gradients and the
 * optimizer step on the CPU. acx's nearest is offload_optimizer: cpu (the
 * fp32 master weights, the optimizer state and the step on the CPU; the
 * compute copy of the parameters and the gradients stay in device memory). */
static acx_status_t ah_fsdp_offload(yaml_ctx_t *ctx, int ai, const char *text) {
    int b = parse_bool(text);
    if (b < 0)
        return accel_bad_value(ctx, accel_table[ai].name, ctx->aval[ai], text, "true or false");
    return b ? accel_set(ctx, "offload_optimizer", "cpu", ctx->aval[ai], accel_table[ai].name)
             : ACX_OK;
}

/* DeepSpeed's ZeRO-Offload: cpu is offload_optimizer: cpu; nvme (ZeRO-
 * Infinity) is not done, and is reported as such. */
static acx_status_t ah_ds_offload_optimizer(yaml_ctx_t *ctx, int ai, const char *text) {
    if (strcasecmp(text, "cpu") == 0)
        return accel_set(ctx, "offload_optimizer", "cpu", ctx->aval[ai], accel_table[ai].name);
    if (strcasecmp(text, "nvme") == 0)
        warn_add(ctx, accel_table[ai].name, ctx->akey[ai], ctx->aval[ai],
                 "ignored: acx does not offload to NVMe (offload_optimizer: cpu is the nearest)");
    return ACX_OK;
}

/* The second pass over an Accelerate file's keys, once all are known
 * (distributed_type decides whether fsdp_config/deepspeed_config count, and
 * Accelerate writes deepspeed_config before distributed_type). */
static acx_status_t accel_apply(yaml_ctx_t *ctx) {
    for (int ai = 0; ai < NUM_ACCEL; ai++)
        if (strchr(accel_table[ai].name, '.') == NULL) ACX_CHECK(accel_row(ctx, ai));
    const acx_config_info_t *in = &ctx->cfg->info;
    if (in->machine_rank != ACX_UNSET && in->num_machines != ACX_UNSET &&
        in->machine_rank >= in->num_machines) {
        yaml_node_t *v = ctx->aval[find_accel("machine_rank")];
        return ACX_ERROR(ACX_ERR_INVALID_CONFIG,
                         "%s:%d: key 'machine_rank': invalid value '%d' (expected an integer "
                         "between 0 and num_machines - 1 = %d)",
                         ctx->path, line_of(v), in->machine_rank, in->num_machines - 1);
    }
    return ACX_OK;
}

/* ---- acx's keys in the file ---- */

static acx_status_t yaml_apply_mapping(yaml_ctx_t *ctx, yaml_node_t *map, const char *prefix);

/* One "key: value" pair whose full dotted name is `name`. */
static acx_status_t yaml_apply_pair(yaml_ctx_t *ctx, const char *name, yaml_node_t *knode,
                                    yaml_node_t *vnode) {
    int ki = find_key(name);
    int section = is_section(name);
    char accepted[512];

    if (vnode->type == YAML_MAPPING_NODE && section) {
        char prefix[304]; /* name is < 300 bytes (yaml_apply_mapping) */
        snprintf(prefix, sizeof prefix, "%s.", name);
        return yaml_apply_mapping(ctx, vnode, prefix);
    }
    if (ki < 0 && section) {
        if (is_null_scalar(vnode)) return ACX_OK; /* "dataloader:" with nothing under it */
        return ACX_ERROR(ACX_ERR_INVALID_CONFIG,
                         "%s:%d: key '%s' must be a mapping of its sub-keys (e.g. %s.<key>: "
                         "value), got %s",
                         ctx->path, line_of(vnode), name, name, node_kind(vnode));
    }
    if (ki < 0) {
        int ai = strchr(name, '.') == NULL ? find_accel(name) : -1; /* top level only */
        if (ai >= 0) return accel_record(ctx, ai, knode, vnode);
        return unknown_in_file(ctx, name, knode, vnode);
    }

    const config_key_t *k = &key_table[ki];
    describe_accepted(k, accepted, sizeof accepted);
    if (vnode->type != YAML_SCALAR_NODE)
        return ACX_ERROR(ACX_ERR_INVALID_CONFIG, "%s:%d: key '%s': expected %s, got %s", ctx->path,
                         line_of(vnode), name, accepted, node_kind(vnode));
    if (is_null_scalar(vnode)) return ACX_OK;
    if (ctx->cfg->origin[ki].source == ACX_SRC_FILE)
        return ACX_ERROR(ACX_ERR_INVALID_CONFIG, "%s:%d: key '%s' given twice (first at %s)",
                         ctx->path, line_of(knode), name, ctx->cfg->origin[ki].where);

    const char *text = scalar_text(vnode);
    value_t v;
    if (text == NULL || !parse_value(k, text, &v)) {
        if (text != NULL && ctx->accelerate && in_list(k->unhonoured, text)) {
            warn_add(ctx, name, knode, vnode, "ignored");
            return ACX_OK;
        }
        return ACX_ERROR(ACX_ERR_INVALID_CONFIG,
                         "%s:%d: key '%s': invalid value '%.200s' (expected %s)", ctx->path,
                         line_of(vnode), name, text ? text : "(contains a NUL byte)", accepted);
    }
    store_value(ctx->cfg, k, &v);
    char where[256];
    snprintf(where, sizeof where, "%s:%d", ctx->path, line_of(vnode));
    set_origin(ctx->cfg, ki, ACX_SRC_FILE, where);
    return ACX_OK;
}

/* Every pair of a mapping, keys prefixed with the section path ("" at the
 * top, "dataloader." inside). Both `dataloader: {drop_last: x}` and the
 * flat `dataloader.drop_last: x` arrive at the same full name. Recursion
 * only enters known sections, so its depth is bounded by the table (even
 * for a YAML alias that points back at an enclosing mapping). */
static acx_status_t yaml_apply_mapping(yaml_ctx_t *ctx, yaml_node_t *map, const char *prefix) {
    for (yaml_node_pair_t *pair = map->data.mapping.pairs.start; pair < map->data.mapping.pairs.top;
         pair++) {
        yaml_node_t *knode = yaml_document_get_node(ctx->doc, pair->key);
        yaml_node_t *vnode = yaml_document_get_node(ctx->doc, pair->value);
        if (knode == NULL || vnode == NULL)
            return ACX_ERROR(ACX_ERR_INTERNAL, "%s: libyaml returned a pair without nodes",
                             ctx->path);
        const char *ktext = knode->type == YAML_SCALAR_NODE ? scalar_text(knode) : NULL;
        if (ktext == NULL)
            return ACX_ERROR(ACX_ERR_INVALID_CONFIG, "%s:%d: expected a key name, got %s%s",
                             ctx->path, line_of(knode), node_kind(knode),
                             knode->type == YAML_SCALAR_NODE ? " with a NUL byte" : "");
        char name[300];
        if ((size_t)snprintf(name, sizeof name, "%s%s", prefix, ktext) >= sizeof name) {
            char where[ACX_PATH_MAX + 32];
            snprintf(where, sizeof where, "%s:%d", ctx->path, line_of(knode));
            return unknown_key_error(where, name, ctx->accelerate);
        }
        ACX_CHECK(yaml_apply_pair(ctx, name, knode, vnode));
    }
    return ACX_OK;
}

/* An Accelerate file: `accelerate config` always writes these two. */
static int is_accelerate_file(yaml_document_t *doc, yaml_node_t *root) {
    for (yaml_node_pair_t *pair = root->data.mapping.pairs.start;
         pair < root->data.mapping.pairs.top; pair++) {
        yaml_node_t *k = yaml_document_get_node(doc, pair->key);
        if (k != NULL && k->type == YAML_SCALAR_NODE && scalar_text(k) != NULL &&
            (strcmp(scalar_text(k), "compute_environment") == 0 ||
             strcmp(scalar_text(k), "distributed_type") == 0))
            return 1;
    }
    return 0;
}

/* The document's top-level mapping: acx's keys as they come (first pass),
 * then, as a whole, the Accelerate keys met on the way (second pass). */
static acx_status_t apply_document(yaml_document_t *doc, yaml_node_t *root, const char *path,
                                   acx_resolved_config_t *cfg) {
    yaml_ctx_t *ctx = acx_calloc(1, sizeof *ctx, "config file reader");
    if (ctx == NULL) return ACX_ERR_NO_MEMORY;
    ctx->doc = doc;
    ctx->path = path;
    ctx->cfg = cfg;
    ctx->accelerate = is_accelerate_file(doc, root);
    acx_status_t status = yaml_apply_mapping(ctx, root, "");
    if (status == ACX_OK) status = accel_apply(ctx);
    if (status == ACX_OK) {
        warnings_finish(ctx);
        cfg->accelerate = ctx->accelerate;
    }
    free(ctx);
    return status;
}

/* Limits of a config file. A config is a few dozen keys two or three
 * levels deep; libyaml's cost grows faster than the nesting (flow
 * mappings nested 10k/30k/100k deep took 2.4 s / 19 s / over 120 s to
 * load), and the whole file is held in memory. Both are checked before
 * the document is built: the size when the file is read, the depth on
 * the parser's events, which stops at the first level too deep. */
#define CONFIG_MAX_BYTES (1 << 20)
#define CONFIG_MAX_DEPTH 32

/* The whole file, at most CONFIG_MAX_BYTES (a FIFO or /dev/stdin has no
 * size to ask for first). *text_p is malloc'd and NUL-terminated. */
static acx_status_t read_config_text(FILE *f, const char *path, char **text_p, size_t *len_p) {
    char *text = acx_malloc(CONFIG_MAX_BYTES + 2, "config file text");
    if (text == NULL) return ACX_ERR_NO_MEMORY;
    size_t len = fread(text, 1, CONFIG_MAX_BYTES + 1, f);
    if (ferror(f)) {
        free(text);
        return ACX_ERROR(ACX_ERR_IO, "reading config file '%s' failed: %s", path, strerror(errno));
    }
    if (len > CONFIG_MAX_BYTES) {
        free(text);
        return ACX_ERROR(ACX_ERR_INVALID_CONFIG,
                         "config file '%s' is larger than %d bytes (1 MiB), the limit of a "
                         "config file",
                         path, CONFIG_MAX_BYTES);
    }
    text[len] = '\0';
    *text_p = text;
    *len_p = len;
    return ACX_OK;
}

/* The nesting of mappings and sequences, from the parser's events, before
 * the document is loaded: ACX_ERR_INVALID_CONFIG "FILE:LINE: ..." at the
 * first level past CONFIG_MAX_DEPTH. Syntax errors are left to the load,
 * which reports them the usual way. */
static acx_status_t check_depth(const char *text, size_t len, const char *path) {
    yaml_parser_t p;
    yaml_event_t ev;
    acx_status_t status = ACX_OK;
    int depth = 0;
    if (!yaml_parser_initialize(&p))
        return yaml_error(&p, path, "yaml_parser_initialize", __FILE__, __LINE__);
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
    for (;;) {
        if (!yaml_parser_parse(&p, &ev)) break; /* the load says why */
        yaml_event_type_t type = ev.type;
        size_t line = ev.start_mark.line + 1;
        yaml_event_delete(&ev);
        if (type == YAML_MAPPING_START_EVENT || type == YAML_SEQUENCE_START_EVENT) {
            if (++depth > CONFIG_MAX_DEPTH) {
                status = ACX_ERROR(ACX_ERR_INVALID_CONFIG,
                                   "%s:%zu: mappings and sequences nested more than %d deep, the "
                                   "limit of a config file",
                                   path, line, CONFIG_MAX_DEPTH);
                break;
            }
        } else if (type == YAML_MAPPING_END_EVENT || type == YAML_SEQUENCE_END_EVENT) {
            depth--;
        } else if (type == YAML_STREAM_END_EVENT) {
            break;
        }
    }
    yaml_parser_delete(&p);
    return status;
}

/* Read `path` into cfg. explicit_: the user named this file, so a missing
 * file is an error; the default file is skipped when absent. */
static acx_status_t read_config_file(const char *path, int explicit_, acx_resolved_config_t *cfg) {
    acx_status_t status = ACX_OK;
    char *text = NULL;
    size_t len = 0;
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        if (!explicit_ && errno == ENOENT) return ACX_OK;
        return ACX_ERROR(ACX_ERR_IO, "cannot open config file '%s': %s", path, strerror(errno));
    }
    struct stat st;
    ACX_SYS_CHECK_GOTO(fstat(fileno(f), &st), status, err_file);
    if (S_ISDIR(st.st_mode)) {
        status = ACX_ERROR(ACX_ERR_IO, "config file '%s' is a directory", path);
        goto err_file;
    }
    if (strlen(path) >= sizeof cfg->config_file) {
        status = ACX_ERROR(ACX_ERR_INVALID_ARG, "config file path too long (%zu bytes, max %d)",
                           strlen(path), ACX_PATH_MAX - 1);
        goto err_file;
    }

    ACX_CHECK_GOTO(read_config_text(f, path, &text, &len), status, err_file);
    ACX_CHECK_GOTO(check_depth(text, len, path), status, err_file);

    yaml_parser_t parser;
    yaml_document_t doc;
    ACX_YAML_CHECK_GOTO(yaml_parser_initialize(&parser), &parser, path, status, err_file);
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    /* libyaml frees doc when the load fails */
    ACX_YAML_CHECK_GOTO(yaml_parser_load(&parser, &doc), &parser, path, status, err_parser);

    /* An empty file (or one with comments only) is an empty config. */
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (root != NULL && !is_null_scalar(root)) {
        if (root->type != YAML_MAPPING_NODE) {
            status = ACX_ERROR(ACX_ERR_INVALID_CONFIG,
                               "%s:%d: expected a mapping of keys (key: value) at the top "
                               "level, got %s",
                               path, line_of(root), node_kind(root));
            goto err_doc;
        }
        status = apply_document(&doc, root, path, cfg);
        if (status != ACX_OK) goto err_doc;
    }

    /* acx reads one document; a second one is more likely a mistake (two
     * configs pasted together) than something to ignore silently. */
    yaml_document_t extra;
    ACX_YAML_CHECK_GOTO(yaml_parser_load(&parser, &extra), &parser, path, status, err_doc);
    yaml_node_t *extra_root = yaml_document_get_root_node(&extra);
    if (extra_root != NULL)
        status = ACX_ERROR(ACX_ERR_INVALID_CONFIG,
                           "%s:%d: a second YAML document; a config file holds one", path,
                           line_of(extra_root));
    yaml_document_delete(&extra);
    if (status != ACX_OK) goto err_doc;

    snprintf(cfg->config_file, sizeof cfg->config_file, "%s", path);
err_doc:
    yaml_document_delete(&doc);
err_parser:
    yaml_parser_delete(&parser);
err_file:
    free(text);
    fclose(f);
    return status;
}

/* ---- the other sources ---- */

static const char *getenv_wrapper(const char *name) { return getenv(name); }

static acx_status_t apply_env(const char *(*env)(const char *), acx_resolved_config_t *cfg) {
    for (int ki = 0; ki < NUM_KEYS; ki++) {
        const config_key_t *k = &key_table[ki];
        if (k->env == NULL) continue;
        const char *raw = env(k->env);
        if (raw == NULL) continue;
        char text[ACX_PATH_MAX];
        int fits = trim(raw, text, sizeof text);
        if (fits && text[0] == '\0') continue; /* ACX_X= counts as unset, as in NCCL */
        value_t v;
        if (!fits || !parse_value(k, text, &v)) {
            char accepted[512];
            describe_accepted(k, accepted, sizeof accepted);
            return ACX_ERROR(ACX_ERR_INVALID_CONFIG,
                             "environment variable %s='%.200s': expected %s", k->env, raw,
                             accepted);
        }
        store_value(cfg, k, &v);
        set_origin(cfg, ki, ACX_SRC_ENV, k->env);
    }
    return ACX_OK;
}

/* Whether an option's key names table key `name`: '-', '_' and '.' are
 * alike and case does not matter (--acx-dataloader-drop-last,
 * --acx-Mixed_Precision). */
static int option_key_equal(const char *name, const char *given) {
    for (;; name++, given++) {
        char a = *name, b = *given;
        if (a == '-' || a == '.') a = '_';
        if (b == '-' || b == '.') b = '_';
        if (tolower((unsigned char)a) != tolower((unsigned char)b)) return 0;
        if (a == '\0') return 1;
    }
}

/* "key=value" from --acx-key=value (also without the --acx- prefix); a
 * bool key alone means true (--acx-dataloader.drop_last). */
static acx_status_t apply_override(const char *opt, acx_resolved_config_t *cfg) {
    if (opt == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "NULL --acx-* option string");
    if (strncmp(opt, "--acx-", 6) == 0) opt += 6;
    const char *eq = strchr(opt, '=');
    size_t klen = eq ? (size_t)(eq - opt) : strlen(opt);
    char given[300], name[300];
    if (klen >= sizeof given) klen = sizeof given - 1;
    memcpy(given, opt, klen);
    given[klen] = '\0';
    for (size_t i = 0; i <= klen; i++)
        name[i] = given[i] == '-' ? '_' : given[i];

    char where[320];
    snprintf(where, sizeof where, "--acx-%s", given);
    int ki = -1;
    for (int i = 0; i < NUM_KEYS && ki < 0; i++)
        if (option_key_equal(key_table[i].name, given)) ki = i;
    if (ki < 0) {
        char option[340];
        snprintf(option, sizeof option, "option %s", where);
        return unknown_key_error(option, name, 0);
    }
    const config_key_t *k = &key_table[ki];
    const char *text = eq ? eq + 1 : NULL;
    if (text == NULL && k->type == KT_BOOL) text = "true";
    char accepted[512];
    describe_accepted(k, accepted, sizeof accepted);
    if (text == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_CONFIG, "option %s: expected %s=VALUE with VALUE %s",
                         where, where, accepted);
    value_t v;
    if (!parse_value(k, text, &v))
        return ACX_ERROR(ACX_ERR_INVALID_CONFIG,
                         "option %s: key '%s': invalid value '%.200s' (expected %s)", where,
                         k->name, text, accepted);
    store_value(cfg, k, &v);
    set_origin(cfg, ki, ACX_SRC_ARGV, where);
    return ACX_OK;
}

/* Whether the program's struct (as large as it says) holds field [off, off+size). */
static int program_has(const acx_config_t *program, size_t off, size_t size) {
    return off + size <= program->size;
}

/* Fields the program set (!= the ACX_CONFIG_DEFAULT sentinel) override everything. */
static acx_status_t apply_program(const acx_config_t *program, acx_resolved_config_t *cfg) {
    for (int ki = 0; ki < NUM_KEYS; ki++) {
        const config_key_t *k = &key_table[ki];
        if (!program_has(program, k->offset, k->size)) continue;
        const char *field = (const char *)program + k->offset;
        value_t v = {0, 0, NULL};
        char shown[64];
        switch (k->type) {
        case KT_BOOL:
        case KT_INT:
        case KT_ENUM: {
            int x;
            memcpy(&x, field, sizeof x);
            if (x == ACX_UNSET) continue;
            v.i = x;
            snprintf(shown, sizeof shown, "%d", x);
            break;
        }
        case KT_INT64: {
            int64_t x;
            memcpy(&x, field, sizeof x);
            if (x == ACX_UNSET_I64) continue;
            v.i = x;
            snprintf(shown, sizeof shown, "%" PRId64, x);
            break;
        }
        case KT_DOUBLE: {
            double x;
            memcpy(&x, field, sizeof x);
            if (x == ACX_UNSET_F) continue;
            v.d = x;
            snprintf(shown, sizeof shown, "%g", x);
            break;
        }
        case KT_STRING: {
            const char *x;
            memcpy(&x, field, sizeof x);
            if (x == NULL) continue;
            v.s = x;
            snprintf(shown, sizeof shown, "\"%.40s%s\"", x, strlen(x) > 40 ? "..." : "");
            break;
        }
        }
        if (!check_value(k, &v)) {
            char accepted[512];
            if (k->type == KT_BOOL)
                snprintf(accepted, sizeof accepted, "0 or 1, or ACX_UNSET");
            else if (k->type == KT_ENUM)
                snprintf(accepted, sizeof accepted, "an acx_*_t enum value, or ACX_UNSET");
            else
                describe_accepted(k, accepted, sizeof accepted);
            return ACX_ERROR(ACX_ERR_INVALID_CONFIG,
                             "acx_config_t field '%s' set by the program: invalid value %s "
                             "(expected %s)",
                             k->name, shown, accepted);
        }
        store_value(cfg, k, &v);
        set_origin(cfg, ki, ACX_SRC_PROGRAM, "program");
    }
    return ACX_OK;
}

/* After the struct was copied into place, re-point string fields at its own
 * buffers. */
static void fix_pointers(acx_resolved_config_t *cfg) {
    for (int ki = 0; ki < NUM_KEYS; ki++) {
        const config_key_t *k = &key_table[ki];
        if (k->type != KT_STRING) continue;
        *(const char **)((char *)&cfg->values + k->offset) = (char *)cfg + k->buf_offset;
    }
    cfg->values.size = sizeof(acx_config_t);
    cfg->values.config_file = cfg->config_file[0] ? cfg->config_file : NULL;
}

/* ---- resolve ---- */

acx_status_t acx_config_resolve(const acx_config_t *program, const char *cli_config_file,
                                int n_overrides, const char *const *overrides,
                                const char *(*env)(const char *name), acx_resolved_config_t *out) {
    acx_status_t status;
    if (out == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_config_resolve: out is NULL");
    if (n_overrides < 0 || (n_overrides > 0 && overrides == NULL))
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_config_resolve: %d overrides but no array",
                         n_overrides);
    if (program != NULL && program->size == 0)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "acx_config_t.size is 0: initialize the struct with "
                         "ACX_CONFIG_DEFAULT so acx can tell which fields you set");
    if (env == NULL) env = getenv_wrapper;

    /* Built into a scratch copy (~17 KB): out is written only on success. */
    acx_resolved_config_t tmp;
    memset(&tmp, 0, sizeof tmp);

    /* 1. defaults; no launch information */
    for (int ii = 0; ii < NUM_INFO; ii++) {
        const config_key_t *k = &info_table[ii];
        if (k->type != KT_STRING) *(int *)((char *)&tmp.info + k->offset) = ACX_UNSET;
    }
    for (int ki = 0; ki < NUM_KEYS; ki++) {
        value_t v;
        if (!parse_value(&key_table[ki], key_table[ki].def, &v))
            return ACX_ERROR(ACX_ERR_INTERNAL, "default '%s' of key '%s' does not parse",
                             key_table[ki].def, key_table[ki].name);
        store_value(&tmp, &key_table[ki], &v);
        set_origin(&tmp, ki, ACX_SRC_DEFAULT, ""); /* source says it all */
    }

    /* 2. the file: the program's choice, then --config, then
     *    $ACX_CONFIG_FILE, then the per-user default if it exists. */
    const char *path = NULL;
    int explicit_ = 1;
    char default_path[ACX_PATH_MAX];
    const char *e;
    if (program != NULL &&
        program_has(program, offsetof(acx_config_t, config_file), sizeof program->config_file) &&
        program->config_file != NULL)
        path = program->config_file;
    else if (cli_config_file != NULL)
        path = cli_config_file;
    else if ((e = env("ACX_CONFIG_FILE")) != NULL && e[0] != '\0')
        path = e;
    else if ((e = env("HOME")) != NULL && e[0] != '\0' &&
             (size_t)snprintf(default_path, sizeof default_path,
                              "%s/.config/acx/default_config.yaml", e) < sizeof default_path) {
        path = default_path;
        explicit_ = 0;
    }
    if (path != NULL) ACX_CHECK(read_config_file(path, explicit_, &tmp));

    /* 3. environment, 4. --acx-* options, 5. the program */
    ACX_CHECK(apply_env(env, &tmp));
    for (int i = 0; i < n_overrides; i++)
        ACX_CHECK(apply_override(overrides[i], &tmp));
    if (program != NULL) {
        status = apply_program(program, &tmp);
        if (status != ACX_OK) return status;
    }

    memcpy(out, &tmp, sizeof *out);
    fix_pointers(out);
    return ACX_OK;
}

/* ---- output ---- */

/* Shortest of %.15g / %.17g that reads back as the same double. */
static void format_double(double d, char *buf, size_t n) {
    snprintf(buf, n, "%.15g", d);
    if (strtod(buf, NULL) != d) snprintf(buf, n, "%.17g", d);
}

void acx_config_format_value(const acx_resolved_config_t *cfg, int i, char *buf, size_t n) {
    if (buf == NULL || n == 0) return;
    buf[0] = '\0';
    if (cfg == NULL || i < 0 || i >= NUM_KEYS) return;
    const config_key_t *k = &key_table[i];
    const char *field = (const char *)&cfg->values + k->offset;
    int x;
    switch (k->type) {
    case KT_BOOL:
        memcpy(&x, field, sizeof x);
        snprintf(buf, n, "%s", x ? "true" : "false");
        break;
    case KT_INT:
        memcpy(&x, field, sizeof x);
        snprintf(buf, n, "%d", x);
        break;
    case KT_ENUM:
        memcpy(&x, field, sizeof x);
        snprintf(buf, n, "%s", enum_canonical(k->names, x));
        break;
    case KT_INT64: {
        int64_t y;
        memcpy(&y, field, sizeof y);
        snprintf(buf, n, "%" PRId64, y);
        break;
    }
    case KT_DOUBLE: {
        double d;
        memcpy(&d, field, sizeof d);
        format_double(d, buf, n);
        break;
    }
    case KT_STRING:
        /* From the buffer, not the pointer: a struct copy keeps its own text. */
        snprintf(buf, n, "%s", (const char *)cfg + k->buf_offset);
        break;
    }
}

/* Plain YAML scalars that a YAML 1.1 reader (PyYAML, Accelerate) would take
 * for a bool or null; written quoted so every reader sees the string. */
static int yaml_needs_quotes(const char *s) {
    static const char *const words[] = {"y",    "n",     "yes",  "no", "on", "off",
                                        "true", "false", "null", "~",  ""};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (strcasecmp(s, words[i]) == 0) return 1;
    return 0;
}

/* Append to buf (size n) at *o, never past the end. */
static void put(char *buf, size_t n, size_t *o, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void put(char *buf, size_t n, size_t *o, const char *fmt, ...) {
    if (*o >= n) return;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(buf + *o, n - *o, fmt, ap);
    va_end(ap);
    if (w > 0) *o = (*o + (size_t)w < n) ? *o + (size_t)w : n - 1;
}

/* A double-quoted YAML string with \" \\ and control characters escaped. */
static void put_quoted(char *buf, size_t n, size_t *o, const char *s) {
    put(buf, n, o, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            put(buf, n, o, "\\%c", *p);
        else if (*p < 0x20 || *p == 0x7f)
            put(buf, n, o, "\\x%02x", *p);
        else
            put(buf, n, o, "%c", *p);
    }
    put(buf, n, o, "\"");
}

/* Length of the section part of a dotted name ("dataloader" in
 * "dataloader.drop_last"), counting components: depth = number of dots. */
static int name_depth(const char *name) {
    int d = 0;
    for (; *name; name++)
        d += *name == '.';
    return d;
}

/* Whether components [0, c] of a and b are equal. */
static int same_components(const char *a, const char *b, int c) {
    for (int seen = 0;; a++, b++) {
        if (*a != *b) return 0;
        if (*a == '\0') return 1;
        if (*a == '.' && seen++ == c) return 1;
    }
}

void acx_config_to_yaml(const acx_resolved_config_t *cfg, char *buf, size_t n) {
    if (buf == NULL || n == 0) return;
    size_t o = 0;
    buf[0] = '\0';
    if (cfg == NULL) return;
    put(buf, n, &o, "# acx configuration (resolved)\n");
    const char *prev = "";
    for (int ki = 0; ki < NUM_KEYS; ki++) {
        const config_key_t *k = &key_table[ki];
        int depth = name_depth(k->name);
        /* Open the sections this key does not share with the previous one. */
        int shared = 0;
        while (shared < depth && shared < name_depth(prev) &&
               same_components(k->name, prev, shared))
            shared++;
        const char *comp = k->name;
        for (int c = 0; c < depth; c++) {
            const char *dot = strchr(comp, '.');
            if (c >= shared) put(buf, n, &o, "%*s%.*s:\n", 2 * c, "", (int)(dot - comp), comp);
            comp = dot + 1;
        }
        char value[ACX_PATH_MAX];
        acx_config_format_value(cfg, ki, value, sizeof value);
        put(buf, n, &o, "%*s%s: ", 2 * depth, "", comp);
        if (k->type == KT_STRING)
            put_quoted(buf, n, &o, value);
        else if (yaml_needs_quotes(value) && k->type != KT_BOOL)
            put(buf, n, &o, "'%s'", value);
        else
            put(buf, n, &o, "%s", value);
        put(buf, n, &o, "\n");
        prev = k->name;
    }
}

/* ---- launch information and warnings ---- */

int acx_config_format_info(const acx_resolved_config_t *cfg, int i, char *buf, size_t n) {
    if (buf == NULL || n == 0) return 0;
    buf[0] = '\0';
    if (cfg == NULL || i < 0 || i >= NUM_INFO) return 0;
    const config_key_t *k = &info_table[i];
    const char *field = (const char *)&cfg->info + k->offset;
    if (k->type == KT_STRING) {
        snprintf(buf, n, "%s", field);
        return field[0] != '\0';
    }
    int x;
    memcpy(&x, field, sizeof x);
    if (x == ACX_UNSET) return 0;
    if (k->type == KT_ENUM)
        snprintf(buf, n, "%s", enum_canonical(k->names, x));
    else
        snprintf(buf, n, "%d", x);
    return 1;
}

void acx_config_log_warnings(const acx_resolved_config_t *cfg, int world_size) {
    if (cfg == NULL) return;
    if (cfg->warning[0] != '\0') ACX_WARN(ACX_SUBSYS_INIT, "%s", cfg->warning);
    int np = cfg->info.num_processes;
    if (world_size > 0 && np != ACX_UNSET && np != world_size)
        ACX_WARN(ACX_SUBSYS_INIT,
                 "num_processes=%d (%s) but the job runs %d ranks: acx uses the launcher's count",
                 np, cfg->info_origin[find_info("num_processes")].where, world_size);
}

/* ---- acx config show ---- */

/* A growing text; `failed` once an allocation failed (then it stays put). */
typedef struct text_buf {
    char *s;
    size_t len, cap;
    int failed;
} text_buf_t;

static void tb_printf(text_buf_t *tb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void tb_printf(text_buf_t *tb, const char *fmt, ...) {
    if (tb->failed) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int w = vsnprintf(tb->s + tb->len, tb->cap - tb->len, fmt, ap);
        va_end(ap);
        if (w < 0) return;
        if ((size_t)w < tb->cap - tb->len) {
            tb->len += (size_t)w;
            return;
        }
        size_t cap = 2 * tb->cap + (size_t)w;
        char *s = realloc(tb->s, cap);
        if (s == NULL) {
            tb->failed = 1;
            return;
        }
        tb->s = s;
        tb->cap = cap;
    }
}

static const char *source_text(const acx_config_origin_t *o) {
    return o->source == ACX_SRC_DEFAULT ? "default" : o->where;
}

/* The rendering of acx_config_describe: a header, KEY VALUE SOURCE lines,
 * the launch information, the warning. */
static void describe(const acx_resolved_config_t *cfg, text_buf_t *tb) {
    char value[ACX_PATH_MAX];
    int kw = 3, vw = 5; /* widths of the KEY and VALUE columns */
    for (int i = 0; i < NUM_KEYS; i++) {
        int l = (int)strlen(key_table[i].name);
        acx_config_format_value(cfg, i, value, sizeof value);
        if (l > kw) kw = l;
        if ((int)strlen(value) > vw) vw = (int)strlen(value);
    }
    for (int i = 0; i < NUM_INFO; i++)
        if (acx_config_format_info(cfg, i, value, sizeof value)) {
            if ((int)strlen(info_table[i].name) > kw) kw = (int)strlen(info_table[i].name);
            if ((int)strlen(value) > vw) vw = (int)strlen(value);
        }
    if (vw > 24) vw = 24; /* a long project_dir pushes its own source right, not every line's */

    if (cfg->config_file[0] != '\0')
        tb_printf(tb, "config file: %s%s\n", cfg->config_file,
                  cfg->accelerate ? " (Accelerate default_config.yaml)" : "");
    else
        tb_printf(tb, "config file: none\n");
    tb_printf(tb, "%-*s  %-*s  %s\n", kw, "KEY", vw, "VALUE", "SOURCE");
    for (int i = 0; i < NUM_KEYS; i++) {
        acx_config_format_value(cfg, i, value, sizeof value);
        tb_printf(tb, "%-*s  %-*s  %s\n", kw, key_table[i].name, vw, value,
                  source_text(&cfg->origin[i]));
    }
    int any = 0;
    for (int i = 0; i < NUM_INFO; i++) {
        if (!acx_config_format_info(cfg, i, value, sizeof value)) continue;
        if (!any++) tb_printf(tb, "\nlaunch information (read-only, not acted on by acx_init):\n");
        tb_printf(tb, "%-*s  %-*s  %s\n", kw, info_table[i].name, vw, value,
                  source_text(&cfg->info_origin[i]));
    }
    if (cfg->warning[0] != '\0') tb_printf(tb, "\nwarning: %s\n", cfg->warning);
}

ACX_API acx_status_t acx_config_describe(const acx_config_t *program, const char *config_file,
                                         int n_options, const char *const *options, char **text_p) {
    if (text_p == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_config_describe: text_p is NULL");
    acx_resolved_config_t *cfg = acx_malloc(sizeof *cfg, "resolved configuration");
    if (cfg == NULL) return ACX_ERR_NO_MEMORY;
    acx_status_t status = acx_config_resolve(program, config_file, n_options, options, NULL, cfg);
    if (status != ACX_OK) goto out;

    text_buf_t tb = {malloc(4096), 0, 4096, 0};
    if (tb.s != NULL) describe(cfg, &tb);
    if (tb.s == NULL || tb.failed) {
        free(tb.s);
        status = ACX_ERROR(ACX_ERR_NO_MEMORY, "cannot allocate the configuration text");
        goto out;
    }
    *text_p = tb.s;
out:
    free(cfg);
    return status;
}

/*
 * base/settings.h — the one registry of everything a user can set:
 * every configuration key and every environment variable acx reads
 * (library-private).
 *
 * Each setting is one row: its name (the dotted config key, or none), its
 * environment variable (or none), its kind (a config key, read-only launch
 * information from a config file, an environment-only setting, or a test
 * hook), its type, accepted values or range, default, one line of
 * documentation and, for a config key, its place in acx_config_t. From the
 * rows follow:
 *   - the configuration resolver (base/config.c): YAML keys, ACX_<KEY>
 *     variables, --acx-<key> options and the program's struct, all parsed
 *     and checked by the row, with messages that say what the row accepts;
 *   - `acx config show` (the keys, in row order) and `acx config doc`, the
 *     tables of docs/config.md (tests/config_doc.test compares them);
 *   - the "did you mean" of an unknown key and the warning about an unknown
 *     ACX_* environment variable;
 *   - every other read of an ACX_* variable in the library, through the
 *     typed getters below (acx_env_text, acx_env_flag, acx_env_int): a
 *     variable's name is spelled only in base/settings.c.
 *
 * Not here: the variables of the launcher and the job (SLURM_*, OMPI_*,
 * PMI_*, PMIX_*, CUDA_VISIBLE_DEVICES, HOME, TMPDIR). They are facts of the
 * environment acx runs in, set by Slurm, mpirun or the system to describe
 * the job, not settings a user chooses for acx; each is read where its
 * meaning lives (launch/env.c detects the launcher, runtime/preempt.c
 * reads the Slurm job, device/device.c explains an empty device list) and
 * an unknown one is no typo of acx's. Nor the Accelerate config file's keys:
 * base/config_accelerate.c maps them onto the keys here.
 */
#ifndef ACX_BASE_SETTINGS_H
#define ACX_BASE_SETTINGS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum acx_setting_kind {
    ACX_SETTING_KEY,  /* a config key: file, ACX_<KEY>, --acx-<key>, the program's struct */
    ACX_SETTING_INFO, /* launch information: read from a config file only, never acted on */
    ACX_SETTING_ENV,  /* an environment variable only (logging, shared memory, ...) */
    ACX_SETTING_TEST  /* a test hook (ACX_TEST_*): registered, not documented */
} acx_setting_kind_t;

typedef enum acx_setting_type {
    ACX_SETTING_BOOL,   /* int field, 0/1; true/false, yes/no, on/off, 1/0 in any case */
    ACX_SETTING_FLAG,   /* 1 or 0, nothing else (environment switches) */
    ACX_SETTING_INT,    /* int field */
    ACX_SETTING_INT64,  /* int64_t field */
    ACX_SETTING_DOUBLE, /* double field */
    ACX_SETTING_ENUM,   /* int field, values from `names` */
    ACX_SETTING_STRING, /* const char * field, the text in a buffer of acx_resolved_config_t
                         * (info rows: a char array of acx_config_info_t) */
    ACX_SETTING_BYTES   /* a byte count, an unsigned integer in [lo, hi], a multiple of
                         * `multiple` when > 0 (environment only) */
} acx_setting_type_t;

/* One accepted spelling of an enum value; the first spelling listed for a
 * value is its canonical name (printed, written to YAML). */
typedef struct acx_enum_name {
    const char *name;
    int value;
} acx_enum_name_t;

typedef struct acx_setting {
    const char *name; /* dotted YAML path ("dataloader.drop_last"); NULL = environment only */
    const char *env;  /* environment variable; NULL = files and options only */
    acx_setting_kind_t kind;
    acx_setting_type_t type;
    const acx_enum_name_t *names; /* ACX_SETTING_ENUM: NULL-terminated */
    double lo, hi;                /* numeric range; -INFINITY/INFINITY = unbounded */
    int lo_exclusive;             /* value must be > lo rather than >= lo */
    unsigned long long multiple;  /* ACX_SETTING_BYTES: a multiple of this; 0 = any */
    size_t offset, size;          /* the field in acx_config_t (info rows: acx_config_info_t) */
    size_t buf_offset, buf_size;  /* ACX_SETTING_STRING: the buffer in acx_resolved_config_t */
    const char *def;              /* default, as text, parsed like any other source; NULL =
                                     none (info rows, environment text that is unset) */
    /* Values Accelerate accepts for this key that acx cannot honour: in an
     * Accelerate file they go to the warning, anywhere else they are an
     * error. NULL-terminated; NULL = none. */
    const char *const *unhonoured;
    const char *note; /* appended to "expected ..." in messages; NULL = none */
    const char *unit; /* "s", "MiB": shown with the type in the docs; NULL = none */
    const char *doc;  /* the docs/config.md line (Markdown) */
} acx_setting_t;

/* ---- config keys and launch information ---- */

/* The config keys, in the order of `acx config show` (rows of one YAML
 * section are contiguous). 0 <= i < acx_config_num_keys(); NULL outside. */
int acx_config_num_keys(void);
const acx_setting_t *acx_config_key(int i);
const char *acx_config_key_name(int i);
/* The index of the key named exactly `name`, or -1. */
int acx_config_key_index(const char *name);
/* Whether `name` is a section: some key is "name.xxx". */
int acx_config_is_section(const char *name);
/* The index of the key an option names: '-', '_' and '.' are alike and
 * case does not matter ("dataloader-drop-last", "Mixed_Precision"); -1. */
int acx_config_option_index(const char *given);

/* The launch information rows (num_processes, ...), like the keys. */
int acx_config_num_info(void);
const acx_setting_t *acx_config_info(int i);
const char *acx_config_info_name(int i);
int acx_config_info_index(const char *name);

/* ---- values: parsing, checking, describing ---- */

typedef struct acx_setting_value {
    int64_t i;     /* BOOL, FLAG, INT, INT64, ENUM, BYTES */
    double d;      /* DOUBLE */
    const char *s; /* STRING (borrowed) */
} acx_setting_value_t;

/* Text -> value, checked against the row's type and range. Returns 1 if
 * accepted; v->s points into `text`. */
int acx_setting_parse(const acx_setting_t *s, const char *text, acx_setting_value_t *v);
/* The range and membership check alone (values from the program's struct). */
int acx_setting_check(const acx_setting_t *s, const acx_setting_value_t *v);
/* What the row accepts, for messages: "one of: no, bf16, fp16", "an
 * integer >= 1", then "; <note>" when the row has one. */
void acx_setting_describe(const acx_setting_t *s, char *buf, size_t n);
/* The canonical name of an enum value, or "invalid". */
const char *acx_setting_enum_name(const acx_enum_name_t *names, int value);
/* Copy text without surrounding blanks into buf (values from the
 * environment often carry a stray space). Returns 0 if it does not fit. */
int acx_setting_trim(const char *text, char *buf, size_t n);

/* Names of enum values ("no_shard", "bf16", "mpi"...), for messages. */
const char *acx_sharding_strategy_name(int s);
const char *acx_mixed_precision_name(int mp);
const char *acx_backend_name(int b);
const char *acx_device_state_name(int d);      /* "auto", "host", "cuda", "emulated" */
const char *acx_offload_optimizer_name(int o); /* "none", "cpu" */
const char *acx_log_with_name(int w);
const char *acx_backward_prefetch_name(int p);
const char *acx_resume_name(int r);

/* ---- environment-only settings and test hooks ---- */

/* Every variable of kind ACX_SETTING_ENV or ACX_SETTING_TEST. The config
 * keys' own variables (ACX_SEED, ...) are read by the resolver. */
typedef enum acx_env {
    ACX_ENV_CONFIG_FILE,
    ACX_ENV_LOG_SUBSYS,
    ACX_ENV_LOG_FILE,
    ACX_ENV_DEBUG_MODE,
    ACX_ENV_SHM_DISABLE,
    ACX_ENV_SHM_SLOT_BYTES,
    ACX_ENV_SHM_MIN_BYTES,
    ACX_ENV_DEVICE_CACHE_DISABLE,
    ACX_ENV_TEST_BUCKETS_MAX_IN_FLIGHT,
    ACX_ENV_TEST_WATCHDOG_NODE_RANKS,
    ACX_ENV_TEST_SHM_NO_ARGS_CHECK,
    ACX_ENV_TEST_CKPT_CRC_BLOCK,
    ACX_ENV_TEST_CKPT_OLD_METADATA,
    ACX_ENV_TEST_PREEMPT_RAISE_AT_INIT,
    ACX_ENV_TEST_FINALIZE_STOP_RANK,
    ACX_ENV_TEST_WATCHDOG_NO_TABLE_RANK,
    ACX_ENV_COUNT
} acx_env_t;

const acx_setting_t *acx_env_setting(acx_env_t id);
/* "ACX_SHM_DISABLE". */
const char *acx_env_name(acx_env_t id);
/* The variable's text (from getenv), NULL when unset or empty. */
const char *acx_env_text(acx_env_t id);
/* A FLAG or BOOL variable. Returns 0 when unset or empty (*on_p = the
 * default), 1 when set to a valid value (*on_p = 0 or 1), -1 when set to
 * something else (*on_p = the default). */
int acx_env_flag(acx_env_t id, int *on_p);
/* An INT, INT64 or BYTES variable, in the row's range. Returns 0, 1 or -1
 * as acx_env_flag (*v_p = the default, or 0 without one, unless 1). */
int acx_env_int(acx_env_t id, int64_t *v_p);

/* ---- unknown names ---- */

/* The closest of the names offered: acx_name_match_offer each candidate,
 * then acx_name_match_result. Levenshtein distance. */
typedef struct acx_name_match {
    const char *best;
    int distance;
} acx_name_match_t;

void acx_name_match_init(acx_name_match_t *m);
void acx_name_match_offer(acx_name_match_t *m, const char *name, const char *candidate);
/* The best candidate when close enough, else NULL: at most a third of the
 * `significant` characters of the name differ (at least 2), so long names
 * do not attract far-fetched guesses. */
const char *acx_name_match_result(const acx_name_match_t *m, size_t significant);
/* Offer every config key name. */
void acx_config_offer_keys(acx_name_match_t *m, const char *name);

/* Whether an environment variable name is an ACX_* variable no row
 * registers (ACX_TEST_* is the test suite's namespace and never unknown).
 * hint: the closest registered variable, or "" (n > 0). */
int acx_env_unknown(const char *name, char *hint, size_t n);
/* The next unknown ACX_* variable of the process environment at or after
 * entry *pos (start at 0; *pos advances): its name into name (n bytes) and
 * the closest registered variable, or "", into hint (hn bytes). Returns 0
 * when there is none left. */
int acx_env_next_unknown(int *pos, char *name, size_t n, char *hint, size_t hn);
/* Log (warn, subsystem init) every unknown ACX_* variable of the process
 * environment, naming the closest registered one. Call on one rank. */
void acx_env_warn_unknown(void);

/* ---- documentation ---- */

/* Write the tables of docs/config.md between its generated-table markers:
 * the config keys, the launch information and the environment-only
 * variables (test hooks left out), as Markdown. Returns 0, or -1 when a
 * write failed. */
int acx_settings_write_doc(FILE *f);

#endif /* ACX_BASE_SETTINGS_H */

/*
 * base/config_resolve.h — resolving the configuration (library-private).
 *
 * The keys are rows of the settings registry (base/settings.h): dotted
 * name ("dataloader.drop_last"), environment variable
 * (ACX_DATALOADER_DROP_LAST), type, accepted values or range, default and
 * where each lives in acx_config_t. Every source — defaults, YAML file,
 * environment, --acx-* options, the program's struct — goes through them, and each resolved value
 * remembers its origin, so `acx config show` and --debug can say where a value came from.
 *
 * An Accelerate default_config.yaml is read as it is: its keys are mapped
 * onto the table's (distributed_type + fsdp_config/deepspeed_config ->
 * sharding_strategy, use_cpu -> backend, ...), its launch settings
 * (num_processes, main_process_ip, ...) are kept as read-only information,
 * and the settings acx cannot honour are collected into one warning.
 */
#ifndef ACX_BASE_CONFIG_RESOLVE_H
#define ACX_BASE_CONFIG_RESOLVE_H

#include "acx/config.h"
#include "acx/status.h"
#include "base/settings.h"

#define ACX_PATH_MAX 4096

typedef enum acx_config_source {
    ACX_SRC_DEFAULT = 0,
    ACX_SRC_FILE = 1,   /* origin: "FILE:LINE" */
    ACX_SRC_ENV = 2,    /* origin: "ACX_XXX" */
    ACX_SRC_ARGV = 3,   /* origin: "--acx-xxx" */
    ACX_SRC_PROGRAM = 4 /* origin: "program" */
} acx_config_source_t;

#define ACX_CONFIG_MAX_KEYS 48

typedef struct acx_config_origin {
    acx_config_source_t source;
    char where[256];
} acx_config_origin_t;

#define ACX_CONFIG_MAX_INFO    8
#define ACX_CONFIG_WARNING_MAX 2048

/* Read-only launch information from the config file (an Accelerate file's
 * num_processes, ...): acx_init does not act on it, `acx launch` may, and
 * `acx config show` prints it. ACX_UNSET / "" = not given. */
typedef struct acx_config_info {
    int num_processes; /* ranks of the whole job, >= 1 */
    int num_machines;  /* nodes, >= 1 */
    int machine_rank;  /* this node's index, 0 <= machine_rank < num_machines */
    char main_process_ip[256];
    int main_process_port; /* 0..65535 */
} acx_config_info_t;

/* The resolved configuration. values' string fields point into the buffers. */
typedef struct acx_resolved_config {
    acx_config_t values;
    char config_file[ACX_PATH_MAX]; /* "" when no file was read */
    char project_dir[ACX_PATH_MAX];
    char preemption_signals[128];
    char resume_from[ACX_PATH_MAX];
    acx_config_origin_t origin[ACX_CONFIG_MAX_KEYS]; /* indexed like the key table */
    int accelerate; /* the file is an Accelerate default_config.yaml */
    acx_config_info_t info;
    acx_config_origin_t info_origin[ACX_CONFIG_MAX_INFO]; /* indexed like the info table */
    /* One line naming every setting of the file acx cannot honour, "" if
     * none: "run.yaml: settings acx cannot honour: KEY=VALUE (line N,
     * ignored), ...". Logged by acx_config_log_warnings, printed by
     * acx_config_describe. */
    char warning[ACX_CONFIG_WARNING_MAX];
} acx_resolved_config_t;

/* Resolve defaults < file < environment (then argv overrides) < program.
 * program: may be NULL. cli_config_file: from --config (NULL if none).
 * overrides: n "key=value" (or "--acx-key=value") strings from --acx-KEY=VALUE
 *   options; '-', '_' and '.' are alike in the key, a bool key alone = true.
 * env: lookup function (getenv, or a fake in tests).
 * Errors: ACX_ERR_INVALID_CONFIG naming file:line (or variable/option), key,
 * bad value and the accepted values; ACX_ERR_IO for an unreadable file given
 * explicitly; ACX_ERR_YAML for a YAML syntax error (with libyaml's text,
 * line and column); ACX_ERR_NOT_SUPPORTED for an Accelerate distributed_type
 * acx cannot run (TPU/XLA, MEGATRON_LM). Settings of an Accelerate file
 * that acx cannot honour are not errors: out->warning names them. */
acx_status_t acx_config_resolve(const acx_config_t *program, const char *cli_config_file,
                                int n_overrides, const char *const *overrides,
                                const char *(*env)(const char *name), acx_resolved_config_t *out);

/* The keys themselves (acx_config_num_keys, acx_config_key_name, ...) are
 * in base/settings.h; origin[] and the functions below index them alike.
 * Format key i's resolved value as text ("bf16", "25", "true"). */
void acx_config_format_value(const acx_resolved_config_t *cfg, int i, char *buf, size_t n);

/* The launch information (acx_config_info_t) as a table: names
 * "num_processes", "num_machines", "machine_rank", "main_process_ip",
 * "main_process_port". format_info writes item i's value ("16",
 * "10.0.0.1") and returns 1, or writes "" and returns 0 when the file did
 * not give it. */
int acx_config_format_info(const acx_resolved_config_t *cfg, int i, char *buf, size_t n);

/* Log, at warn level (subsystem init), the file's cannot-honour warning and
 * a num_processes that differs from world_size (the launcher's count wins;
 * world_size <= 0 skips that check). For acx_init after the configuration
 * is agreed; call it on one rank (the main process) to print it once. */
void acx_config_log_warnings(const acx_resolved_config_t *cfg, int world_size);
/* Render the resolved config as YAML (for logs and, later, checkpoints). */
void acx_config_to_yaml(const acx_resolved_config_t *cfg, char *buf, size_t n);

#endif /* ACX_BASE_CONFIG_RESOLVE_H */

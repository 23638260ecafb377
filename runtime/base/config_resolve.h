/*
 * runtime/base/config_resolve.h — resolving the configuration (library-private).
 *
 * One table lists every key once: its dotted name ("dataloader.drop_last"),
 * environment variable (ACX_DATALOADER_DROP_LAST), type, accepted values or
 * range, default and where it lives in acx_config_t. Every source — defaults,
 * YAML file, environment, --acx-* options, the program's struct — goes
 * through that table, and each resolved value remembers its origin, so
 * `acx config show` and --debug can say where a value came from, and the next
 * sources (Accelerate YAML keys) extend the table instead of replacing it.
 */
#ifndef ACX_BASE_CONFIG_RESOLVE_H
#define ACX_BASE_CONFIG_RESOLVE_H

#include "acx/config.h"
#include "acx/status.h"

#define ACX_PATH_MAX 4096

typedef enum acx_config_source {
    ACX_SRC_DEFAULT = 0,
    ACX_SRC_FILE = 1,    /* origin: "FILE:LINE" */
    ACX_SRC_ENV = 2,     /* origin: "ACX_XXX" */
    ACX_SRC_ARGV = 3,    /* origin: "--acx-xxx" */
    ACX_SRC_PROGRAM = 4  /* origin: "program" */
} acx_config_source_t;

#define ACX_CONFIG_MAX_KEYS 32

typedef struct acx_config_origin {
    acx_config_source_t source;
    char where[256];
} acx_config_origin_t;

/* The resolved configuration. values' string fields point into the buffers. */
typedef struct acx_resolved_config {
    acx_config_t values;
    char config_file[ACX_PATH_MAX]; /* "" when no file was read */
    char project_dir[ACX_PATH_MAX];
    acx_config_origin_t origin[ACX_CONFIG_MAX_KEYS]; /* indexed like the key table */
} acx_resolved_config_t;

/* Resolve defaults < file < environment (then argv overrides) < program.
 * program: may be NULL. cli_config_file: from --config (NULL if none).
 * overrides: n "key=value" strings from --acx-KEY=VALUE options.
 * env: lookup function (getenv, or a fake in tests).
 * Errors: ACX_ERR_INVALID_CONFIG naming file:line (or variable/option), key,
 * bad value and the accepted values; ACX_ERR_IO for an unreadable file given
 * explicitly; ACX_ERR_YAML for a YAML syntax error (with libyaml's text,
 * line and column). */
acx_status_t acx_config_resolve(const acx_config_t *program, const char *cli_config_file,
                                int n_overrides, const char *const *overrides,
                                const char *(*env)(const char *name),
                                acx_resolved_config_t *out);

/* Key table access, for `acx config show` and --debug. */
int acx_config_num_keys(void);
const char *acx_config_key_name(int i);
/* Format key i's resolved value as text ("bf16", "25", "true"). */
void acx_config_format_value(const acx_resolved_config_t *cfg, int i, char *buf, size_t n);
/* Render the resolved config as YAML (for logs and, later, checkpoints). */
void acx_config_to_yaml(const acx_resolved_config_t *cfg, char *buf, size_t n);

/* Names of enum values ("no_shard", "bf16", "mpi"...), for messages. */
const char *acx_sharding_strategy_name(int s);
const char *acx_mixed_precision_name(int mp);
const char *acx_backend_name(int b);

#endif /* ACX_BASE_CONFIG_RESOLVE_H */

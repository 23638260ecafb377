/*
 * base/config_file.h — what the two readers of a config file share
 * (private to base/config.c and base/config_accelerate.c).
 *
 * base/config.c reads the YAML document and acx's own keys in it;
 * base/config_accelerate.c maps the keys of an Accelerate
 * default_config.yaml onto acx's. Both see the document through one
 * reading context, note settings acx cannot honour into one warning, and
 * set acx keys with the file's line as their origin.
 */
#ifndef ACX_BASE_CONFIG_FILE_H
#define ACX_BASE_CONFIG_FILE_H

#include <string.h>
#include <strings.h>
#include <yaml.h>

#include "base/config_resolve.h"
#include "base/settings.h"

/* ---- YAML nodes ---- */

static inline int acx_yaml_line(const yaml_node_t *node) { return (int)node->start_mark.line + 1; }

static inline const char *acx_yaml_kind(const yaml_node_t *node) {
    switch (node->type) {
    case YAML_SCALAR_NODE: return "a scalar";
    case YAML_SEQUENCE_NODE: return "a list";
    case YAML_MAPPING_NODE: return "a mapping";
    default: return "nothing";
    }
}

/* A plain empty/~/null scalar: YAML's null, which leaves the key unset. */
static inline int acx_yaml_is_null(const yaml_node_t *node) {
    if (node->type != YAML_SCALAR_NODE || node->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return 0;
    const char *s = (const char *)node->data.scalar.value;
    return s[0] == '\0' || strcmp(s, "~") == 0 || strcmp(s, "null") == 0 ||
           strcmp(s, "Null") == 0 || strcmp(s, "NULL") == 0;
}

/* The scalar's text, or NULL if it holds a NUL byte (from a "\0" escape). */
static inline const char *acx_yaml_text(const yaml_node_t *node) {
    const char *s = (const char *)node->data.scalar.value;
    return strlen(s) == node->data.scalar.length ? s : NULL;
}

/* Whether text is one of the NULL-terminated list, ignoring case. */
static inline int acx_in_list(const char *const *list, const char *text) {
    for (; list != NULL && *list != NULL; list++)
        if (strcasecmp(*list, text) == 0) return 1;
    return 0;
}

/* ---- the reading context ---- */

#define ACX_ACCEL_MAX_KEYS  80 /* rows of the Accelerate table (config_accelerate.c) */
#define ACX_CONFIG_WARNINGS 32

typedef struct acx_config_warning {
    int line;
    char text[288]; /* "KEY=VALUE (line N, what acx does instead)" */
} acx_config_warning_t;

typedef struct acx_yaml_ctx {
    yaml_document_t *doc;
    const char *path; /* as the user gave it, for messages */
    acx_resolved_config_t *cfg;
    int accelerate;    /* the file has compute_environment or distributed_type */
    int strategy_seen; /* an fsdp/deepspeed key decided sharding_strategy (or declined to) */
    yaml_node_t *akey[ACX_ACCEL_MAX_KEYS], *aval[ACX_ACCEL_MAX_KEYS]; /* Accelerate keys met,
                                                                        by table row */
    int n_warnings, n_dropped;
    acx_config_warning_t warnings[ACX_CONFIG_WARNINGS];
} acx_yaml_ctx_t;

/* ---- base/config.c, for the Accelerate mapping ---- */

/* Note a setting acx cannot honour; note says what acx does instead. */
void acx_config_file_warn(acx_yaml_ctx_t *ctx, const char *name, const yaml_node_t *knode,
                          const yaml_node_t *vnode, const char *note);
/* Set acx key `key` to `text` (a canonical spelling) because the Accelerate
 * key `via` (at vnode) says so. A second setting from the same file is fine
 * when it agrees, ACX_ERR_INVALID_CONFIG when it does not. */
acx_status_t acx_config_file_set(acx_yaml_ctx_t *ctx, const char *key, const char *text,
                                 const yaml_node_t *vnode, const char *via);
/* Set launch information row ii from `text`, given by the file's key `via`
 * at knode/vnode. ACX_ERR_INVALID_CONFIG when the file set it already or
 * the value is not accepted (the message names `via`). */
acx_status_t acx_config_file_set_info(acx_yaml_ctx_t *ctx, int ii, const char *text,
                                      const yaml_node_t *knode, const yaml_node_t *vnode,
                                      const char *via);
/* An unknown key of the file (full dotted name). In acx's own files it is
 * an error; an Accelerate file may carry keys of a newer Accelerate, so
 * there it goes to the warning, unless it looks like a typo of a known key. */
acx_status_t acx_config_file_unknown(acx_yaml_ctx_t *ctx, const char *name,
                                     const yaml_node_t *knode, const yaml_node_t *vnode);
/* ACX_ERR_INVALID_CONFIG "FILE:LINE: key 'NAME': invalid value 'TEXT'
 * (expected ACCEPTED)". */
acx_status_t acx_config_file_bad_value(const acx_yaml_ctx_t *ctx, const char *name,
                                       const yaml_node_t *v, const char *text,
                                       const char *accepted);

/* ---- base/config_accelerate.c, for the reader ---- */

/* The row of a top-level Accelerate key ("use_cpu"), or -1. */
int acx_accel_find(const char *name);
/* Remember Accelerate key ai, read in the second pass. Errors: the key
 * given twice. */
acx_status_t acx_accel_record(acx_yaml_ctx_t *ctx, int ai, yaml_node_t *knode, yaml_node_t *vnode);
/* The second pass over an Accelerate file's keys, once all are known
 * (distributed_type decides whether fsdp_config/deepspeed_config count,
 * and Accelerate writes deepspeed_config before distributed_type). */
acx_status_t acx_accel_apply(acx_yaml_ctx_t *ctx);
/* Offer every Accelerate key name to a "did you mean" search. */
void acx_accel_offer_keys(acx_name_match_t *m, const char *name);

#endif /* ACX_BASE_CONFIG_FILE_H */

/*
 * base/config.c — resolving the configuration from built-in defaults, a
 * YAML file, ACX_* environment variables, --acx-KEY=VALUE options and the
 * program's acx_config_t, in that order of precedence.
 *
 * Owns: storing each key's value into acx_resolved_config_t with its
 * origin, choosing and reading the config file (libyaml document API) and
 * acx's own keys in it, the environment, option and program sources, and
 * rendering the result as text/YAML (acx config show).
 * Leaves to others: the keys themselves — names, variables, types, ranges,
 * defaults, parsing and checking a value (base/settings.c); the keys of an
 * Accelerate default_config.yaml (base/config_accelerate.c); acting on the
 * values (runtime/); reading the command line (the accelerator passes
 * --config and --acx-* strings in).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <yaml.h>

#include "base/config_file.h"
#include "base/config_resolve.h"
#include "base/error.h"
#include "base/log.h"
#include "base/settings.h"

/* ---- storing values ---- */

static void store_value(acx_resolved_config_t *cfg, const acx_setting_t *k,
                        const acx_setting_value_t *v) {
    char *field = (char *)&cfg->values + k->offset;
    switch (k->type) {
    case ACX_SETTING_BOOL:
    case ACX_SETTING_FLAG:
    case ACX_SETTING_INT:
    case ACX_SETTING_ENUM: *(int *)field = (int)v->i; break;
    case ACX_SETTING_INT64:
    case ACX_SETTING_BYTES: *(int64_t *)field = v->i; break;
    case ACX_SETTING_DOUBLE: *(double *)field = v->d; break;
    case ACX_SETTING_STRING: {
        char *buf = (char *)cfg + k->buf_offset;
        snprintf(buf, k->buf_size, "%s", v->s); /* length checked by acx_setting_check */
        *(const char **)field = buf;
        break;
    }
    }
}

/* An info row's value into cfg->info (checked by acx_setting_parse). */
static void store_info(acx_resolved_config_t *cfg, const acx_setting_t *k,
                       const acx_setting_value_t *v) {
    char *field = (char *)&cfg->info + k->offset;
    if (k->type == ACX_SETTING_STRING)
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

/* A value as a warning shows it: the scalar (cut at 60 bytes), "[...]" or
 * "{...}" ("[]" and "{}" when empty). */
static void node_value_text(const yaml_node_t *node, char *buf, size_t n) {
    if (node->type == YAML_SEQUENCE_NODE)
        snprintf(buf, n, "%s",
                 node->data.sequence.items.top == node->data.sequence.items.start ? "[]" : "[...]");
    else if (node->type == YAML_MAPPING_NODE)
        snprintf(buf, n, "%s",
                 node->data.mapping.pairs.top == node->data.mapping.pairs.start ? "{}" : "{...}");
    else if (node->type == YAML_SCALAR_NODE && acx_yaml_text(node) != NULL)
        snprintf(buf, n, "%.60s%s", acx_yaml_text(node),
                 strlen(acx_yaml_text(node)) > 60 ? "..." : "");
    else
        snprintf(buf, n, "?");
}

/* ---- unknown keys: names and suggestions ---- */

/* "bucket_size_mb, mixed_precision, ..." for unknown-key messages. */
static void known_keys(char *buf, size_t n) {
    size_t o = 0;
    buf[0] = '\0';
    for (int i = 0; i < acx_config_num_keys() && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%s", i ? ", " : "", acx_config_key_name(i));
}

/* "; did you mean 'bucket_size_mb'?" or "". Candidates: acx's keys, and
 * with `accelerate` Accelerate's too. A name is close when at most a third
 * of its last component (at least 2 characters) differs, so long dotted
 * names do not attract far-fetched guesses. */
static void suggest_key(const char *name, int accelerate, char *buf, size_t n) {
    acx_name_match_t m;
    acx_name_match_init(&m);
    acx_config_offer_keys(&m, name);
    if (accelerate) acx_accel_offer_keys(&m, name);
    const char *tail = strrchr(name, '.');
    const char *best = acx_name_match_result(&m, strlen(tail ? tail + 1 : name));
    if (best != NULL)
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

void acx_config_file_warn(acx_yaml_ctx_t *ctx, const char *name, const yaml_node_t *knode,
                          const yaml_node_t *vnode, const char *note) {
    if (ctx->n_warnings == ACX_CONFIG_WARNINGS) {
        ctx->n_dropped++;
        return;
    }
    acx_config_warning_t *w = &ctx->warnings[ctx->n_warnings++];
    char value[80];
    node_value_text(vnode, value, sizeof value);
    w->line = acx_yaml_line(knode);
    snprintf(w->text, sizeof w->text, "%s=%s (line %d, %s)", name, value, w->line,
             note ? note : "ignored");
}

/* The one warning line, entries in file order. */
static void warnings_finish(acx_yaml_ctx_t *ctx) {
    char *buf = ctx->cfg->warning;
    size_t n = sizeof ctx->cfg->warning, o;
    buf[0] = '\0';
    if (ctx->n_warnings == 0) return;
    for (int i = 1; i < ctx->n_warnings; i++) /* insertion sort: stable, few entries */
        for (int j = i; j > 0 && ctx->warnings[j - 1].line > ctx->warnings[j].line; j--) {
            acx_config_warning_t t = ctx->warnings[j];
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
static void file_where(const acx_yaml_ctx_t *ctx, const yaml_node_t *node, const char *via,
                       char *buf, size_t n) {
    if (via != NULL)
        snprintf(buf, n, "%s:%d (%s)", ctx->path, acx_yaml_line(node), via);
    else
        snprintf(buf, n, "%s:%d", ctx->path, acx_yaml_line(node));
}

/* Set acx key `key` to `text` (a canonical spelling) because the Accelerate
 * key `via` (at vnode) says so. A second setting from the same file is fine
 * when it agrees, an error when it does not. */
acx_status_t acx_config_file_set(acx_yaml_ctx_t *ctx, const char *key, const char *text,
                                 const yaml_node_t *vnode, const char *via) {
    int ki = acx_config_key_index(key);
    acx_setting_value_t v;
    if (ki < 0 || !acx_setting_parse(acx_config_key(ki), text, &v))
        return ACX_ERROR(ACX_ERR_INTERNAL, "Accelerate mapping: %s=%s does not parse", key, text);
    const acx_config_origin_t *o = &ctx->cfg->origin[ki];
    if (o->source == ACX_SRC_FILE) {
        char have[64];
        acx_config_format_value(ctx->cfg, ki, have, sizeof have);
        if (strcmp(have, text) == 0) return ACX_OK;
        return ACX_ERROR(ACX_ERR_INVALID_CONFIG,
                         "%s:%d: key '%s' means %s=%s, but %s already set it to %s", ctx->path,
                         acx_yaml_line(vnode), via, key, text, o->where, have);
    }
    store_value(ctx->cfg, acx_config_key(ki), &v);
    char where[ACX_PATH_MAX + 96];
    file_where(ctx, vnode, via, where, sizeof where);
    set_origin(ctx->cfg, ki, ACX_SRC_FILE, where);
    return ACX_OK;
}

acx_status_t acx_config_file_bad_value(const acx_yaml_ctx_t *ctx, const char *name,
                                       const yaml_node_t *v, const char *text,
                                       const char *accepted) {
    return ACX_ERROR(ACX_ERR_INVALID_CONFIG,
                     "%s:%d: key '%s': invalid value '%.200s' (expected %s)", ctx->path,
                     acx_yaml_line(v), name, text ? text : "(contains a NUL byte)", accepted);
}

acx_status_t acx_config_file_set_info(acx_yaml_ctx_t *ctx, int ii, const char *text,
                                      const yaml_node_t *knode, const yaml_node_t *vnode,
                                      const char *via) {
    const acx_setting_t *k = acx_config_info(ii);
    acx_config_origin_t *o = &ctx->cfg->info_origin[ii];
    if (o->source == ACX_SRC_FILE)
        return ACX_ERROR(ACX_ERR_INVALID_CONFIG, "%s:%d: key '%s' sets %s, which %s already set",
                         ctx->path, acx_yaml_line(knode), via, k->name, o->where);
    acx_setting_value_t val;
    if (!acx_setting_parse(k, text, &val)) {
        char accepted[512];
        acx_setting_describe(k, accepted, sizeof accepted);
        return acx_config_file_bad_value(ctx, via, vnode, text, accepted);
    }
    store_info(ctx->cfg, k, &val);
    char where[ACX_PATH_MAX + 96];
    file_where(ctx, vnode, strcmp(via, k->name) == 0 ? NULL : via, where, sizeof where);
    origin_set(o, ACX_SRC_FILE, where);
    return ACX_OK;
}

/* An unknown key of the file (full dotted name). In acx's own files it is
 * an error; an Accelerate file may carry keys of a newer Accelerate, so
 * there it goes to the warning, unless it looks like a typo of a known key. */
acx_status_t acx_config_file_unknown(acx_yaml_ctx_t *ctx, const char *name,
                                     const yaml_node_t *knode, const yaml_node_t *vnode) {
    char where[ACX_PATH_MAX + 32], hint[160];
    snprintf(where, sizeof where, "%s:%d", ctx->path, acx_yaml_line(knode));
    if (!ctx->accelerate) return unknown_key_error(where, name, 1);
    suggest_key(name, 1, hint, sizeof hint);
    if (hint[0] != '\0')
        return ACX_ERROR(ACX_ERR_INVALID_CONFIG, "%s: unknown key '%s'%s", where, name, hint);
    acx_config_file_warn(ctx, name, knode, vnode, "unknown to acx, ignored");
    return ACX_OK;
}

/* ---- acx's keys in the file ---- */

static acx_status_t yaml_apply_mapping(acx_yaml_ctx_t *ctx, yaml_node_t *map, const char *prefix);

/* One "key: value" pair whose full dotted name is `name`. */
static acx_status_t yaml_apply_pair(acx_yaml_ctx_t *ctx, const char *name, yaml_node_t *knode,
                                    yaml_node_t *vnode) {
    int ki = acx_config_key_index(name);
    int section = acx_config_is_section(name);
    char accepted[512];

    if (vnode->type == YAML_MAPPING_NODE && section) {
        char prefix[304]; /* name is < 300 bytes (yaml_apply_mapping) */
        snprintf(prefix, sizeof prefix, "%s.", name);
        return yaml_apply_mapping(ctx, vnode, prefix);
    }
    if (ki < 0 && section) {
        if (acx_yaml_is_null(vnode)) return ACX_OK; /* "dataloader:" with nothing under it */
        return ACX_ERROR(ACX_ERR_INVALID_CONFIG,
                         "%s:%d: key '%s' must be a mapping of its sub-keys (e.g. %s.<key>: "
                         "value), got %s",
                         ctx->path, acx_yaml_line(vnode), name, name, acx_yaml_kind(vnode));
    }
    if (ki < 0) {
        int ai = acx_accel_find(name);
        if (ai >= 0) return acx_accel_record(ctx, ai, knode, vnode);
        return acx_config_file_unknown(ctx, name, knode, vnode);
    }

    const acx_setting_t *k = acx_config_key(ki);
    acx_setting_describe(k, accepted, sizeof accepted);
    if (vnode->type != YAML_SCALAR_NODE)
        return ACX_ERROR(ACX_ERR_INVALID_CONFIG, "%s:%d: key '%s': expected %s, got %s", ctx->path,
                         acx_yaml_line(vnode), name, accepted, acx_yaml_kind(vnode));
    if (acx_yaml_is_null(vnode)) return ACX_OK;
    if (ctx->cfg->origin[ki].source == ACX_SRC_FILE)
        return ACX_ERROR(ACX_ERR_INVALID_CONFIG, "%s:%d: key '%s' given twice (first at %s)",
                         ctx->path, acx_yaml_line(knode), name, ctx->cfg->origin[ki].where);

    const char *text = acx_yaml_text(vnode);
    acx_setting_value_t v;
    if (text == NULL || !acx_setting_parse(k, text, &v)) {
        if (text != NULL && ctx->accelerate && acx_in_list(k->unhonoured, text)) {
            acx_config_file_warn(ctx, name, knode, vnode, "ignored");
            return ACX_OK;
        }
        return ACX_ERROR(
            ACX_ERR_INVALID_CONFIG, "%s:%d: key '%s': invalid value '%.200s' (expected %s)",
            ctx->path, acx_yaml_line(vnode), name, text ? text : "(contains a NUL byte)", accepted);
    }
    store_value(ctx->cfg, k, &v);
    char where[256];
    snprintf(where, sizeof where, "%s:%d", ctx->path, acx_yaml_line(vnode));
    set_origin(ctx->cfg, ki, ACX_SRC_FILE, where);
    return ACX_OK;
}

/* Every pair of a mapping, keys prefixed with the section path ("" at the
 * top, "dataloader." inside). Both `dataloader: {drop_last: x}` and the
 * flat `dataloader.drop_last: x` arrive at the same full name. Recursion
 * only enters known sections, so its depth is bounded by the table (even
 * for a YAML alias that points back at an enclosing mapping). */
static acx_status_t yaml_apply_mapping(acx_yaml_ctx_t *ctx, yaml_node_t *map, const char *prefix) {
    for (yaml_node_pair_t *pair = map->data.mapping.pairs.start; pair < map->data.mapping.pairs.top;
         pair++) {
        yaml_node_t *knode = yaml_document_get_node(ctx->doc, pair->key);
        yaml_node_t *vnode = yaml_document_get_node(ctx->doc, pair->value);
        if (knode == NULL || vnode == NULL)
            return ACX_ERROR(ACX_ERR_INTERNAL, "%s: libyaml returned a pair without nodes",
                             ctx->path);
        const char *ktext = knode->type == YAML_SCALAR_NODE ? acx_yaml_text(knode) : NULL;
        if (ktext == NULL)
            return ACX_ERROR(ACX_ERR_INVALID_CONFIG, "%s:%d: expected a key name, got %s%s",
                             ctx->path, acx_yaml_line(knode), acx_yaml_kind(knode),
                             knode->type == YAML_SCALAR_NODE ? " with a NUL byte" : "");
        char name[300];
        if ((size_t)snprintf(name, sizeof name, "%s%s", prefix, ktext) >= sizeof name) {
            char where[ACX_PATH_MAX + 32];
            snprintf(where, sizeof where, "%s:%d", ctx->path, acx_yaml_line(knode));
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
        if (k != NULL && k->type == YAML_SCALAR_NODE && acx_yaml_text(k) != NULL &&
            (strcmp(acx_yaml_text(k), "compute_environment") == 0 ||
             strcmp(acx_yaml_text(k), "distributed_type") == 0))
            return 1;
    }
    return 0;
}

/* The document's top-level mapping: acx's keys as they come (first pass),
 * then, as a whole, the Accelerate keys met on the way (second pass). */
static acx_status_t apply_document(yaml_document_t *doc, yaml_node_t *root, const char *path,
                                   acx_resolved_config_t *cfg) {
    acx_yaml_ctx_t *ctx = acx_calloc(1, sizeof *ctx, "config file reader");
    if (ctx == NULL) return ACX_ERR_NO_MEMORY;
    ctx->doc = doc;
    ctx->path = path;
    ctx->cfg = cfg;
    ctx->accelerate = is_accelerate_file(doc, root);
    acx_status_t status = yaml_apply_mapping(ctx, root, "");
    if (status == ACX_OK) status = acx_accel_apply(ctx);
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
    if (root != NULL && !acx_yaml_is_null(root)) {
        if (root->type != YAML_MAPPING_NODE) {
            status = ACX_ERROR(ACX_ERR_INVALID_CONFIG,
                               "%s:%d: expected a mapping of keys (key: value) at the top "
                               "level, got %s",
                               path, acx_yaml_line(root), acx_yaml_kind(root));
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
                           acx_yaml_line(extra_root));
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
    for (int ki = 0; ki < acx_config_num_keys(); ki++) {
        const acx_setting_t *k = acx_config_key(ki);
        if (k->env == NULL) continue;
        const char *raw = env(k->env);
        if (raw == NULL) continue;
        char text[ACX_PATH_MAX];
        int fits = acx_setting_trim(raw, text, sizeof text);
        if (fits && text[0] == '\0') continue; /* ACX_X= counts as unset, as in NCCL */
        acx_setting_value_t v;
        if (!fits || !acx_setting_parse(k, text, &v)) {
            char accepted[512];
            acx_setting_describe(k, accepted, sizeof accepted);
            return ACX_ERROR(ACX_ERR_INVALID_CONFIG,
                             "environment variable %s='%.200s': expected %s", k->env, raw,
                             accepted);
        }
        store_value(cfg, k, &v);
        set_origin(cfg, ki, ACX_SRC_ENV, k->env);
    }
    return ACX_OK;
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
    int ki = acx_config_option_index(given);
    if (ki < 0) {
        char option[340];
        snprintf(option, sizeof option, "option %s", where);
        return unknown_key_error(option, name, 0);
    }
    const acx_setting_t *k = acx_config_key(ki);
    const char *text = eq ? eq + 1 : NULL;
    if (text == NULL && k->type == ACX_SETTING_BOOL) text = "true";
    char accepted[512];
    acx_setting_describe(k, accepted, sizeof accepted);
    if (text == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_CONFIG, "option %s: expected %s=VALUE with VALUE %s",
                         where, where, accepted);
    acx_setting_value_t v;
    if (!acx_setting_parse(k, text, &v))
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
    for (int ki = 0; ki < acx_config_num_keys(); ki++) {
        const acx_setting_t *k = acx_config_key(ki);
        if (!program_has(program, k->offset, k->size)) continue;
        const char *field = (const char *)program + k->offset;
        acx_setting_value_t v = {0, 0, NULL};
        char shown[64];
        switch (k->type) {
        case ACX_SETTING_BOOL:
        case ACX_SETTING_FLAG:
        case ACX_SETTING_INT:
        case ACX_SETTING_ENUM: {
            int x;
            memcpy(&x, field, sizeof x);
            if (x == ACX_UNSET) continue;
            v.i = x;
            snprintf(shown, sizeof shown, "%d", x);
            break;
        }
        case ACX_SETTING_INT64:
        case ACX_SETTING_BYTES: {
            int64_t x;
            memcpy(&x, field, sizeof x);
            if (x == ACX_UNSET_I64) continue;
            v.i = x;
            snprintf(shown, sizeof shown, "%" PRId64, x);
            break;
        }
        case ACX_SETTING_DOUBLE: {
            double x;
            memcpy(&x, field, sizeof x);
            if (x == ACX_UNSET_F) continue;
            v.d = x;
            snprintf(shown, sizeof shown, "%g", x);
            break;
        }
        case ACX_SETTING_STRING: {
            const char *x;
            memcpy(&x, field, sizeof x);
            if (x == NULL) continue;
            v.s = x;
            snprintf(shown, sizeof shown, "\"%.40s%s\"", x, strlen(x) > 40 ? "..." : "");
            break;
        }
        }
        if (!acx_setting_check(k, &v)) {
            char accepted[512];
            if (k->type == ACX_SETTING_BOOL)
                snprintf(accepted, sizeof accepted, "0 or 1, or ACX_UNSET");
            else if (k->type == ACX_SETTING_ENUM)
                snprintf(accepted, sizeof accepted, "an acx_*_t enum value, or ACX_UNSET");
            else
                acx_setting_describe(k, accepted, sizeof accepted);
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
    for (int ki = 0; ki < acx_config_num_keys(); ki++) {
        const acx_setting_t *k = acx_config_key(ki);
        if (k->type != ACX_SETTING_STRING) continue;
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
    for (int ii = 0; ii < acx_config_num_info(); ii++) {
        const acx_setting_t *k = acx_config_info(ii);
        if (k->type != ACX_SETTING_STRING) *(int *)((char *)&tmp.info + k->offset) = ACX_UNSET;
    }
    for (int ki = 0; ki < acx_config_num_keys(); ki++) {
        acx_setting_value_t v;
        if (!acx_setting_parse(acx_config_key(ki), acx_config_key(ki)->def, &v))
            return ACX_ERROR(ACX_ERR_INTERNAL, "default '%s' of key '%s' does not parse",
                             acx_config_key(ki)->def, acx_config_key(ki)->name);
        store_value(&tmp, acx_config_key(ki), &v);
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
    else if ((e = env(acx_env_name(ACX_ENV_CONFIG_FILE))) != NULL && e[0] != '\0')
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
    if (cfg == NULL || i < 0 || i >= acx_config_num_keys()) return;
    const acx_setting_t *k = acx_config_key(i);
    const char *field = (const char *)&cfg->values + k->offset;
    int x;
    switch (k->type) {
    case ACX_SETTING_BOOL:
        memcpy(&x, field, sizeof x);
        snprintf(buf, n, "%s", x ? "true" : "false");
        break;
    case ACX_SETTING_FLAG:
    case ACX_SETTING_INT:
        memcpy(&x, field, sizeof x);
        snprintf(buf, n, "%d", x);
        break;
    case ACX_SETTING_ENUM:
        memcpy(&x, field, sizeof x);
        snprintf(buf, n, "%s", acx_setting_enum_name(k->names, x));
        break;
    case ACX_SETTING_INT64:
    case ACX_SETTING_BYTES: {
        int64_t y;
        memcpy(&y, field, sizeof y);
        snprintf(buf, n, "%" PRId64, y);
        break;
    }
    case ACX_SETTING_DOUBLE: {
        double d;
        memcpy(&d, field, sizeof d);
        format_double(d, buf, n);
        break;
    }
    case ACX_SETTING_STRING:
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
    for (int ki = 0; ki < acx_config_num_keys(); ki++) {
        const acx_setting_t *k = acx_config_key(ki);
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
        if (k->type == ACX_SETTING_STRING)
            put_quoted(buf, n, &o, value);
        else if (yaml_needs_quotes(value) && k->type != ACX_SETTING_BOOL)
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
    if (cfg == NULL || i < 0 || i >= acx_config_num_info()) return 0;
    const acx_setting_t *k = acx_config_info(i);
    const char *field = (const char *)&cfg->info + k->offset;
    if (k->type == ACX_SETTING_STRING) {
        snprintf(buf, n, "%s", field);
        return field[0] != '\0';
    }
    int x;
    memcpy(&x, field, sizeof x);
    if (x == ACX_UNSET) return 0;
    if (k->type == ACX_SETTING_ENUM)
        snprintf(buf, n, "%s", acx_setting_enum_name(k->names, x));
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
                 np, cfg->info_origin[acx_config_info_index("num_processes")].where, world_size);
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
    for (int i = 0; i < acx_config_num_keys(); i++) {
        int l = (int)strlen(acx_config_key(i)->name);
        acx_config_format_value(cfg, i, value, sizeof value);
        if (l > kw) kw = l;
        if ((int)strlen(value) > vw) vw = (int)strlen(value);
    }
    for (int i = 0; i < acx_config_num_info(); i++)
        if (acx_config_format_info(cfg, i, value, sizeof value)) {
            if ((int)strlen(acx_config_info(i)->name) > kw)
                kw = (int)strlen(acx_config_info(i)->name);
            if ((int)strlen(value) > vw) vw = (int)strlen(value);
        }
    if (vw > 24) vw = 24; /* a long project_dir pushes its own source right, not every line's */

    if (cfg->config_file[0] != '\0')
        tb_printf(tb, "config file: %s%s\n", cfg->config_file,
                  cfg->accelerate ? " (Accelerate default_config.yaml)" : "");
    else
        tb_printf(tb, "config file: none\n");
    tb_printf(tb, "%-*s  %-*s  %s\n", kw, "KEY", vw, "VALUE", "SOURCE");
    for (int i = 0; i < acx_config_num_keys(); i++) {
        acx_config_format_value(cfg, i, value, sizeof value);
        tb_printf(tb, "%-*s  %-*s  %s\n", kw, acx_config_key(i)->name, vw, value,
                  source_text(&cfg->origin[i]));
    }
    int any = 0;
    for (int i = 0; i < acx_config_num_info(); i++) {
        if (!acx_config_format_info(cfg, i, value, sizeof value)) continue;
        if (!any++) tb_printf(tb, "\nlaunch information (read-only, not acted on by acx_init):\n");
        tb_printf(tb, "%-*s  %-*s  %s\n", kw, acx_config_info(i)->name, vw, value,
                  source_text(&cfg->info_origin[i]));
    }
    /* The environment-only settings set here (test hooks left out), then
     * the ACX_* variables no setting registers, as acx_init warns. */
    any = 0;
    for (int id = 0; id < ACX_ENV_COUNT; id++) {
        const acx_setting_t *s = acx_env_setting((acx_env_t)id);
        const char *text = acx_env_text((acx_env_t)id);
        if (s->kind == ACX_SETTING_TEST || text == NULL) continue;
        if (!any++) tb_printf(tb, "\nenvironment (settings that are not config keys):\n");
        tb_printf(tb, "%-*s  %s\n", kw, s->env, text);
    }
    if (cfg->warning[0] != '\0') tb_printf(tb, "\nwarning: %s\n", cfg->warning);
    char name[128], hint[128];
    for (int pos = 0; acx_env_next_unknown(&pos, name, sizeof name, hint, sizeof hint);)
        tb_printf(tb, "%swarning: ignoring environment variable %s: not an acx setting%s%s%s\n",
                  cfg->warning[0] != '\0' ? "" : "\n", name, hint[0] ? " (did you mean " : "", hint,
                  hint[0] ? "?)" : " (see docs/config.md)");
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

/*
 * runtime/base/config.c — resolving the configuration from built-in
 * defaults, a YAML file, ACX_* environment variables, --acx-KEY=VALUE
 * options and the program's acx_config_t, in that order of precedence.
 *
 * Owns: the key table (every key once: name, environment variable, type,
 * accepted values, default, place in acx_config_t), parsing and checking
 * values from every source, the origin of each resolved value, choosing and
 * reading the config file (libyaml document API), and rendering the result
 * as text/YAML. Leaves to others: acting on the values (runtime/), reading
 * the command line (the accelerator passes --config and --acx-* strings in),
 * and ACX_LOG_SUBSYS (log.c).
 *
 * Adding a key is adding a row to key_table: nested YAML sections
 * ("checkpoint.total_limit" under "checkpoint:") follow from the dotted name
 * at any depth, enum rows may list extra spellings of a value (a later
 * Accelerate-compatible row can accept "FULL_SHARD" or "1"), and a row
 * whose env is NULL is read from files/options only.
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

#include "runtime/base/config_resolve.h"
#include "runtime/base/error.h"

/* ---- the key table ---- */

typedef enum key_type {
    KT_BOOL,   /* int field, 0/1 */
    KT_INT,    /* int field */
    KT_INT64,  /* int64_t field */
    KT_DOUBLE, /* double field */
    KT_ENUM,   /* int field, values from `names` */
    KT_STRING  /* const char * field, text kept in a buffer of acx_resolved_config_t */
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
    size_t offset, size;         /* the field in acx_config_t */
    size_t buf_offset, buf_size; /* KT_STRING: the buffer in acx_resolved_config_t */
    const char *def;             /* default, as text, parsed like any other source */
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

#define FIELD(f)  offsetof(acx_config_t, f), sizeof(((acx_config_t *)0)->f)
#define NOBUF     0, 0
#define UNBOUNDED -INFINITY, INFINITY, 0

/* Rows of one YAML section must stay contiguous (acx_config_to_yaml opens a
 * section once). */
static const config_key_t key_table[] = {
    {"mixed_precision", "ACX_MIXED_PRECISION", KT_ENUM, mp_names, UNBOUNDED, FIELD(mixed_precision),
     NOBUF, "no"},
    {"sharding_strategy", "ACX_SHARDING_STRATEGY", KT_ENUM, shard_names, UNBOUNDED,
     FIELD(sharding_strategy), NOBUF, "no_shard"},
    {"gradient_accumulation_steps", "ACX_GRADIENT_ACCUMULATION_STEPS", KT_INT, NULL, 1, INFINITY, 0,
     FIELD(gradient_accumulation_steps), NOBUF, "1"},
    {"seed", "ACX_SEED", KT_INT64, NULL, UNBOUNDED, FIELD(seed), NOBUF, "42"},
    {"project_dir", "ACX_PROJECT_DIR", KT_STRING, NULL, UNBOUNDED, FIELD(project_dir),
     offsetof(acx_resolved_config_t, project_dir), ACX_PATH_MAX, "."},
    {"log_level", "ACX_LOG_LEVEL", KT_ENUM, level_names, UNBOUNDED, FIELD(log_level), NOBUF,
     "warn"},
    {"collective_timeout", "ACX_COLLECTIVE_TIMEOUT", KT_DOUBLE, NULL, 0, INFINITY, 1,
     FIELD(collective_timeout), NOBUF, "600"},
    {"bucket_size_mb", "ACX_BUCKET_SIZE_MB", KT_DOUBLE, NULL, 0, INFINITY, 1, FIELD(bucket_size_mb),
     NOBUF, "25"},
    {"backend", "ACX_BACKEND", KT_ENUM, backend_names, UNBOUNDED, FIELD(backend), NOBUF, "auto"},
    {"dataloader.drop_last", "ACX_DATALOADER_DROP_LAST", KT_BOOL, NULL, UNBOUNDED,
     FIELD(dataloader.drop_last), NOBUF, "false"},
    {"dataloader.even_batches", "ACX_DATALOADER_EVEN_BATCHES", KT_BOOL, NULL, UNBOUNDED,
     FIELD(dataloader.even_batches), NOBUF, "true"},
    {"dataloader.split_batches", "ACX_DATALOADER_SPLIT_BATCHES", KT_BOOL, NULL, UNBOUNDED,
     FIELD(dataloader.split_batches), NOBUF, "false"},
    {"dataloader.prefetch", "ACX_DATALOADER_PREFETCH", KT_INT, NULL, 0, INFINITY, 0,
     FIELD(dataloader.prefetch), NOBUF, "1"},
};

#define NUM_KEYS ((int)(sizeof key_table / sizeof key_table[0]))
_Static_assert(sizeof key_table / sizeof key_table[0] <= ACX_CONFIG_MAX_KEYS,
               "raise ACX_CONFIG_MAX_KEYS in config_resolve.h");

int acx_config_num_keys(void) { return NUM_KEYS; }

const char *acx_config_key_name(int i) {
    return (i >= 0 && i < NUM_KEYS) ? key_table[i].name : NULL;
}

static const char *enum_canonical(const enum_name_t *names, int value) {
    for (const enum_name_t *e = names; e->name != NULL; e++)
        if (e->value == value) return e->name;
    return "invalid";
}

const char *acx_sharding_strategy_name(int s) { return enum_canonical(shard_names, s); }
const char *acx_mixed_precision_name(int mp) { return enum_canonical(mp_names, mp); }
const char *acx_backend_name(int b) { return enum_canonical(backend_names, b); }

static int find_key(const char *name) {
    for (int i = 0; i < NUM_KEYS; i++)
        if (strcmp(key_table[i].name, name) == 0) return i;
    return -1;
}

/* Whether `name` is a section: some key is "name.xxx". */
static int is_section(const char *name) {
    size_t n = strlen(name);
    for (int i = 0; i < NUM_KEYS; i++)
        if (strncmp(key_table[i].name, name, n) == 0 && key_table[i].name[n] == '.') return 1;
    return 0;
}

/* ---- values: parsing, checking, storing ---- */

typedef struct value {
    int64_t i;     /* KT_BOOL, KT_INT, KT_INT64, KT_ENUM */
    double d;      /* KT_DOUBLE */
    const char *s; /* KT_STRING (borrowed until stored) */
} value_t;

/* What a key accepts, for messages: "one of: no, bf16, fp16", "an integer >= 1". */
static void describe_accepted(const config_key_t *k, char *buf, size_t n) {
    size_t o = 0;
    buf[0] = '\0';
    switch (k->type) {
    case KT_BOOL: snprintf(buf, n, "true or false (also yes/no, on/off, 1/0)"); return;
    case KT_STRING:
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
    case KT_STRING: return v->s != NULL && v->s[0] != '\0' && strlen(v->s) < k->buf_size;
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

/* where: "run.yaml:3", "ACX_SEED", "--acx-seed", "program" ("" for a
 * default). A where too long for the origin keeps its tail
 * ("...deep/path/run.yaml:3"): the file name and line matter more than the
 * leading directories. */
static void set_origin(acx_resolved_config_t *cfg, int ki, acx_config_source_t src,
                       const char *where) {
    char *dst = cfg->origin[ki].where;
    size_t cap = sizeof cfg->origin[ki].where, len = strlen(where);
    cfg->origin[ki].source = src;
    if (len < cap) {
        memcpy(dst, where, len + 1);
    } else {
        memcpy(dst, "...", 3);
        memcpy(dst + 3, where + len - (cap - 4), cap - 4 + 1);
    }
}

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

/* "; did you mean 'bucket_size_mb'?" or "" */
static void suggest_key(const char *name, char *buf, size_t n) {
    int best = -1, best_d = 1000;
    for (int i = 0; i < NUM_KEYS; i++) {
        int d = edit_distance(name, key_table[i].name);
        if (d < best_d) best_d = d, best = i;
    }
    int limit = (int)strlen(name) / 3;
    if (limit < 2) limit = 2;
    if (best >= 0 && best_d <= limit)
        snprintf(buf, n, "; did you mean '%s'?", key_table[best].name);
    else
        buf[0] = '\0';
}

static acx_status_t unknown_key_error(const char *where, const char *name) {
    char known[1024], hint[160];
    known_keys(known, sizeof known);
    suggest_key(name, hint, sizeof hint);
    return ACX_ERROR(ACX_ERR_INVALID_CONFIG, "%s: unknown key '%s' (known keys: %s)%s", where, name,
                     known, hint);
}

/* ---- the YAML file ---- */

typedef struct yaml_ctx {
    yaml_document_t *doc;
    const char *path; /* as the user gave it, for messages */
    acx_resolved_config_t *cfg;
} yaml_ctx_t;

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
        char where[ACX_PATH_MAX + 32];
        snprintf(where, sizeof where, "%s:%d", ctx->path, line_of(knode));
        return unknown_key_error(where, name);
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
    if (text == NULL || !parse_value(k, text, &v))
        return ACX_ERROR(ACX_ERR_INVALID_CONFIG,
                         "%s:%d: key '%s': invalid value '%.200s' (expected %s)", ctx->path,
                         line_of(vnode), name, text ? text : "(contains a NUL byte)", accepted);
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
            return unknown_key_error(where, name);
        }
        ACX_CHECK(yaml_apply_pair(ctx, name, knode, vnode));
    }
    return ACX_OK;
}

static acx_status_t yaml_syntax_error(const yaml_parser_t *p, const char *path) {
    if (p->error == YAML_MEMORY_ERROR)
        return ACX_ERROR(ACX_ERR_NO_MEMORY, "%s: libyaml ran out of memory", path);
    const char *problem = p->problem ? p->problem : "unknown problem";
    if (p->error == YAML_READER_ERROR)
        return ACX_ERROR(ACX_ERR_YAML, "%s: YAML read error at byte %zu: %s", path,
                         p->problem_offset, problem);
    char context[160] = "";
    if (p->context)
        snprintf(context, sizeof context, " (%s at line %zu, column %zu)", p->context,
                 p->context_mark.line + 1, p->context_mark.column + 1);
    return ACX_ERROR(ACX_ERR_YAML, "%s:%zu:%zu: YAML syntax error: %s%s", path,
                     p->problem_mark.line + 1, p->problem_mark.column + 1, problem, context);
}

/* Read `path` into cfg. explicit_: the user named this file, so a missing
 * file is an error; the default file is skipped when absent. */
static acx_status_t read_config_file(const char *path, int explicit_, acx_resolved_config_t *cfg) {
    acx_status_t status = ACX_OK;
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        if (!explicit_ && errno == ENOENT) return ACX_OK;
        return ACX_ERROR(ACX_ERR_IO, "cannot open config file '%s': %s", path, strerror(errno));
    }
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        status = ACX_ERROR(ACX_ERR_IO, "config file '%s' is a directory", path);
        goto err_file;
    }
    if (strlen(path) >= sizeof cfg->config_file) {
        status = ACX_ERROR(ACX_ERR_INVALID_ARG, "config file path too long (%zu bytes, max %d)",
                           strlen(path), ACX_PATH_MAX - 1);
        goto err_file;
    }

    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser)) {
        status = ACX_ERROR(ACX_ERR_NO_MEMORY, "yaml_parser_initialize failed for '%s'", path);
        goto err_file;
    }
    yaml_parser_set_input_file(&parser, f);
    if (!yaml_parser_load(&parser, &doc)) { /* libyaml frees doc on failure */
        status = yaml_syntax_error(&parser, path);
        goto err_parser;
    }

    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (root != NULL && !is_null_scalar(root)) {
        if (root->type != YAML_MAPPING_NODE) {
            status = ACX_ERROR(ACX_ERR_INVALID_CONFIG,
                               "%s:%d: expected a mapping of keys (key: value) at the top "
                               "level, got %s",
                               path, line_of(root), node_kind(root));
            goto err_doc;
        }
        yaml_ctx_t ctx = {&doc, path, cfg};
        status = yaml_apply_mapping(&ctx, root, "");
        if (status != ACX_OK) goto err_doc;
    }

    /* acx reads one document; a second one is more likely a mistake (two
     * configs pasted together) than something to ignore silently. */
    yaml_document_t extra;
    if (!yaml_parser_load(&parser, &extra)) {
        status = yaml_syntax_error(&parser, path);
        goto err_doc;
    }
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

/* "key=value" from --acx-key=value. '-' and '_' are the same in the key
 * (--acx-mixed-precision=bf16); a bool key alone means true
 * (--acx-dataloader.drop_last). */
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
    int ki = find_key(name);
    if (ki < 0) {
        char option[340];
        snprintf(option, sizeof option, "option %s", where);
        return unknown_key_error(option, name);
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

    /* 1. defaults */
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

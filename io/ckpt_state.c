/*
 * io/ckpt_state.c — a checkpoint's scalar state (io/ckpt_format.h
 * acx_ckpt_state_t) to and from the file's attributes: the list of
 * attributes a save hands to the writer (acx_ckpt_state_attrs), and the
 * read of every attribute with its range check (acx_ckpt_state_read), the
 * same for a load (runtime/checkpoint.c) and for `acx ckpt verify`
 * (io/ckpt_tools.c), so a value a load would refuse fails verify too.
 *
 * The checks are those a file can be held to by itself: every counter in
 * 0..2^53 (ACX_CKPT_COUNT_MAX) and consistent with the others (micro_step
 * at least step, the optimizer's steps at most the root's), learning rates
 * finite in [0, ACX_OPTIM_LR_MAX], a world size whose /rng rows the file
 * can hold, a loss scale whose reciprocal is a float, loader fields that
 * agree with each other (num_batches from num_samples and global_batch,
 * position at most num_batches, samples_consumed = position x
 * global_batch), parameter groups with unique names, weight_decay finite
 * >= 0 and lr_scale in (0, ACX_OPTIM_LR_SCALE_MAX]
 * (acx_ckpt_read_param_groups, also used by `acx ckpt info`). What
 * depends on the program loading the file (a model mismatch, another data
 * set, another global batch, other parameter groups) is the runtime's.
 * Every refusal is ACX_ERR_FORMAT naming the file, the attribute, the
 * value and the accepted range, "(damaged or edited?)".
 */
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/checkpoint.h"
#include "io/ckpt_pkg.h"
#include "base/error.h"
#include "base/optim_kernels.h" /* ACX_OPTIM_LR_MAX */

/* ---- save: the attributes ---- */

/* The attributes of a save, in the order the writer creates them. Names
 * made up here (a parameter group's "param_group.<k>.name") live in
 * `pool`, at name_off[i] for attribute i (-1: a constant name); the
 * result is one block, the array followed by the pool. */
typedef struct attr_list {
    acx_ckpt_attr_t *a;
    int n, cap, failed;
    long *name_off;
    char *pool;
    size_t pool_len, pool_cap;
} attr_list_t;

static void add(attr_list_t *l, const char *object, const char *name, acx_ckpt_attr_type_t type,
                int64_t i64, double f64, const char *str) {
    if (l->failed) return;
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 48;
        acx_ckpt_attr_t *a = realloc(l->a, (size_t)cap * sizeof *a);
        if (a != NULL) l->a = a;
        long *off = realloc(l->name_off, (size_t)cap * sizeof *off);
        if (off != NULL) l->name_off = off;
        if (a == NULL || off == NULL) {
            l->failed = 1;
            return;
        }
        l->cap = cap;
    }
    l->name_off[l->n] = -1;
    l->a[l->n++] = (acx_ckpt_attr_t){
        .object = object, .name = name, .type = type, .i64 = i64, .f64 = f64, .str = str};
}

/* The next attribute's name, "param_group.<k>.<field>" in the pool (after
 * the add, the caller calls name_last). */
static long pool_name(attr_list_t *l, int k, const char *field) {
    if (l->failed) return -1;
    char buf[96];
    int len = snprintf(buf, sizeof buf, ACX_CKPT_PARAM_GROUP_PREFIX "%d.%s", k, field);
    if (l->pool_len + (size_t)len + 1 > l->pool_cap) {
        size_t cap = l->pool_cap ? 2 * l->pool_cap : 1024;
        while (cap < l->pool_len + (size_t)len + 1)
            cap *= 2;
        char *p = realloc(l->pool, cap);
        if (p == NULL) {
            l->failed = 1;
            return -1;
        }
        l->pool = p;
        l->pool_cap = cap;
    }
    long off = (long)l->pool_len;
    memcpy(l->pool + off, buf, (size_t)len + 1);
    l->pool_len += (size_t)len + 1;
    return off;
}

/* The attribute just added is named by pool offset off. */
static void name_last(attr_list_t *l, long off) {
    if (!l->failed && off >= 0) l->name_off[l->n - 1] = off;
}

/* /optimizer's parameter groups (io/ckpt_format.h). */
static void add_param_groups(attr_list_t *l, const acx_ckpt_state_t *s) {
    add(l, ACX_CKPT_GROUP_OPTIMIZER, ACX_CKPT_ATTR_PARAM_GROUPS, ACX_CKPT_I64, s->num_param_groups,
        0.0, NULL);
    for (int k = 0; k < s->num_param_groups; k++) {
        const acx_ckpt_param_group_t *g = &s->param_groups[k];
        long off = pool_name(l, k, "name");
        add(l, ACX_CKPT_GROUP_OPTIMIZER, "", ACX_CKPT_STR, 0, 0.0, g->name);
        name_last(l, off);
        off = pool_name(l, k, "weight_decay");
        add(l, ACX_CKPT_GROUP_OPTIMIZER, "", ACX_CKPT_F64, 0, g->weight_decay, NULL);
        name_last(l, off);
        off = pool_name(l, k, "lr_scale");
        add(l, ACX_CKPT_GROUP_OPTIMIZER, "", ACX_CKPT_F64, 0, g->lr_scale, NULL);
        name_last(l, off);
        off = pool_name(l, k, "num_params");
        add(l, ACX_CKPT_GROUP_OPTIMIZER, "", ACX_CKPT_I64, g->num_params, 0.0, NULL);
        name_last(l, off);
        for (int j = 0; j < g->num_params; j++) {
            char field[32];
            snprintf(field, sizeof field, "param.%d", j);
            off = pool_name(l, k, field);
            add(l, ACX_CKPT_GROUP_OPTIMIZER, "", ACX_CKPT_STR, 0, 0.0, g->params[j]);
            name_last(l, off);
        }
    }
}

/* The list as one malloc'd block: the attributes, then the pool their
 * made-up names point into. NULL on failure (l freed either way). */
static acx_ckpt_attr_t *attr_block(attr_list_t *l) {
    acx_ckpt_attr_t *out = NULL;
    if (!l->failed) {
        size_t head = (size_t)l->n * sizeof *out;
        out = malloc(head + l->pool_len + 1);
        if (out != NULL) {
            memcpy(out, l->a, head);
            char *pool = (char *)out + head;
            if (l->pool_len > 0) memcpy(pool, l->pool, l->pool_len);
            for (int i = 0; i < l->n; i++)
                if (l->name_off[i] >= 0) out[i].name = pool + l->name_off[i];
        }
    }
    free(l->a);
    free(l->name_off);
    free(l->pool);
    return out;
}

static void add_i64(attr_list_t *l, const char *object, const char *name, int64_t v) {
    add(l, object, name, ACX_CKPT_I64, v, 0.0, NULL);
}
static void add_f64(attr_list_t *l, const char *object, const char *name, double v) {
    add(l, object, name, ACX_CKPT_F64, 0, v, NULL);
}
static void add_str(attr_list_t *l, const char *object, const char *name, const char *v) {
    add(l, object, name, ACX_CKPT_STR, 0, 0.0, v);
}

acx_status_t acx_ckpt_state_attrs(const acx_ckpt_state_t *s, acx_ckpt_attr_t **attrs_p,
                                  int *num_p) {
    if (s == NULL || attrs_p == NULL || num_p == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_ckpt_state_attrs: NULL argument");
    attr_list_t l = {0};

    /* root: the reader checks format and format_version when it opens a file */
    add_str(&l, "/", ACX_CKPT_ATTR_FORMAT, ACX_CKPT_FORMAT);
    add_i64(&l, "/", ACX_CKPT_ATTR_FORMAT_VERSION, ACX_CKPT_FORMAT_VERSION);
    add_i64(&l, "/", ACX_CKPT_ATTR_STEP, s->step);
    add_i64(&l, "/", ACX_CKPT_ATTR_MICRO_STEP, s->micro_step);
    add_i64(&l, "/", ACX_CKPT_ATTR_EPOCH, s->epoch);
    add_i64(&l, "/", ACX_CKPT_ATTR_WORLD_SIZE, s->world_size);
    add_str(&l, "/", ACX_CKPT_ATTR_SHARDING_STRATEGY, s->sharding_strategy);
    add_str(&l, "/", ACX_CKPT_ATTR_MIXED_PRECISION, s->mixed_precision);
    add_str(&l, "/", ACX_CKPT_ATTR_ACX_VERSION, s->acx_version);
    add_str(&l, "/", ACX_CKPT_ATTR_CREATED, s->created);
    add_str(&l, "/", ACX_CKPT_ATTR_RUN_ID, s->run_id);

    /* optimizer and schedule */
    if (s->has_optimizer) {
        add_str(&l, ACX_CKPT_GROUP_OPTIMIZER, "type", s->optimizer_type);
        add_i64(&l, ACX_CKPT_GROUP_OPTIMIZER, "step", s->optimizer_step);
        add_f64(&l, ACX_CKPT_GROUP_OPTIMIZER, "lr", s->lr);
        for (int h = 0; h < s->num_hparams && h < ACX_CKPT_MAX_HPARAMS; h++)
            add_f64(&l, ACX_CKPT_GROUP_OPTIMIZER, s->hparam_names[h], s->hparam_values[h]);
        add_param_groups(&l, s);
        if (s->has_scheduler) {
            add_str(&l, ACX_CKPT_GROUP_SCHEDULER, "kind", s->scheduler_kind);
            add_i64(&l, ACX_CKPT_GROUP_SCHEDULER, "warmup_steps", s->warmup_steps);
            add_i64(&l, ACX_CKPT_GROUP_SCHEDULER, "total_steps", s->total_steps);
            add_f64(&l, ACX_CKPT_GROUP_SCHEDULER, "num_cycles", s->num_cycles);
            add_f64(&l, ACX_CKPT_GROUP_SCHEDULER, "base_lr", s->base_lr);
            add_i64(&l, ACX_CKPT_GROUP_SCHEDULER, "step", s->scheduler_step);
        } else {
            add_str(&l, ACX_CKPT_GROUP_SCHEDULER, "kind", "none");
        }
    }

    /* fp16 loss scaler (torch GradScaler's state_dict: scale, growth tracker) */
    if (s->has_scaler) {
        add_str(&l, ACX_CKPT_GROUP_SCALER, "kind", "dynamic");
        add_f64(&l, ACX_CKPT_GROUP_SCALER, "scale", s->scale);
        add_i64(&l, ACX_CKPT_GROUP_SCALER, "growth_tracker", s->growth_tracker);
        add_i64(&l, ACX_CKPT_GROUP_SCALER, "growth_interval", s->growth_interval);
        add_i64(&l, ACX_CKPT_GROUP_SCALER, "consecutive_skips", s->consecutive_skips);
    } else {
        add_str(&l, ACX_CKPT_GROUP_SCALER, "kind", "none");
    }

    /* data loader: the data order is fixed by (seed, epoch, global batch) */
    if (s->has_loader) {
        add_i64(&l, ACX_CKPT_GROUP_DATALOADER, "epoch", s->loader_epoch);
        add_i64(&l, ACX_CKPT_GROUP_DATALOADER, "position", s->position);
        add_i64(&l, ACX_CKPT_GROUP_DATALOADER, "seed", s->seed);
        add_i64(&l, ACX_CKPT_GROUP_DATALOADER, "global_batch", s->global_batch);
        add_i64(&l, ACX_CKPT_GROUP_DATALOADER, "samples_consumed", s->samples_consumed);
        add_i64(&l, ACX_CKPT_GROUP_DATALOADER, "num_batches", s->num_batches);
        add_i64(&l, ACX_CKPT_GROUP_DATALOADER, "num_samples", s->num_samples);
    }

    add_str(&l, ACX_CKPT_GROUP_CONFIG, ACX_CKPT_ATTR_CONFIG_YAML,
            s->config_yaml != NULL ? s->config_yaml : "");
    int n = l.n;
    acx_ckpt_attr_t *attrs = attr_block(&l);
    if (attrs == NULL)
        return ACX_ERROR(ACX_ERR_NO_MEMORY, "out of memory describing the checkpoint");
    *attrs_p = attrs;
    *num_p = n;
    return ACX_OK;
}

/* ---- read: values range-checked before any use ---- */

/* v, the integer attribute object/name of the file, in [lo, hi]:
 * ACX_ERR_FORMAT naming the file, the attribute, the value and the range
 * otherwise. why: what the range means ("" for nothing). */
static acx_status_t check_i64_in(const char *file, const char *object, const char *name, int64_t v,
                                 int64_t lo, int64_t hi, const char *why) {
    if (v >= lo && v <= hi) return ACX_OK;
    return ACX_ERROR(ACX_ERR_FORMAT,
                     "checkpoint '%s': %s%s%s = %lld is out of range: expected %lld..%lld%s%s "
                     "(damaged or edited?)",
                     file, object, strcmp(object, "/") == 0 ? "" : "/", name, (long long)v,
                     (long long)lo, (long long)hi, why[0] ? ": " : "", why);
}

/* The attribute read and checked as above (a missing attribute is the
 * reader's ACX_ERR_FORMAT naming it). *v_p is written only when it is in
 * range. */
static acx_status_t get_i64_in(acx_ckpt_file_t *f, const char *object, const char *name, int64_t lo,
                               int64_t hi, const char *why, int64_t *v_p) {
    int64_t v;
    ACX_CHECK(acx_ckpt_get_i64(f, object, name, &v));
    ACX_CHECK(check_i64_in(f->path, object, name, v, lo, hi, why));
    *v_p = v;
    return ACX_OK;
}

/* A learning rate read from the file (optimizer lr, schedule base_lr):
 * finite and in [0, ACX_OPTIM_LR_MAX], the range acx_*_create and
 * acx_optimizer_set_lr accept, so every checkpoint acx writes loads. */
static acx_status_t get_lr(acx_ckpt_file_t *f, const char *object, const char *name, double *v_p) {
    double v;
    ACX_CHECK(acx_ckpt_get_f64(f, object, name, &v));
    if (!(v >= 0.0 && v <= ACX_OPTIM_LR_MAX))
        return ACX_ERROR(ACX_ERR_FORMAT,
                         "checkpoint '%s': %s/%s = %g is out of range: expected a finite learning "
                         "rate in [0, %g] (damaged or edited?)",
                         f->path, object, name, v, ACX_OPTIM_LR_MAX);
    *v_p = v;
    return ACX_OK;
}

/* /rng holds world_size rows of ACX_CKPT_RNG_ROW_BYTES: a world size whose
 * rows the file cannot hold is refused before anything is sized from it
 * (an edited world_size of 2^26 would otherwise describe a 2 GiB dataset).
 * The bound is the file's size: every row of a dataset acx wrote is stored
 * in the file. */
static acx_status_t check_rng_size(const char *file, int64_t world) {
    struct stat st;
    if (stat(file, &st) != 0)
        return ACX_ERROR(ACX_ERR_IO, "checkpoint '%s': stat failed: %s", file, strerror(errno));
    if ((uint64_t)world > (uint64_t)st.st_size / ACX_CKPT_RNG_ROW_BYTES)
        return ACX_ERROR(
            ACX_ERR_FORMAT,
            "checkpoint '%s': world_size = %lld is out of range: its /rng would need "
            "%lld x %d bytes but the file has %lld bytes (expected at most %lld ranks; "
            "damaged or edited?)",
            file, (long long)world, (long long)world, ACX_CKPT_RNG_ROW_BYTES, (long long)st.st_size,
            (long long)(st.st_size / ACX_CKPT_RNG_ROW_BYTES));
    return ACX_OK;
}

static acx_status_t read_root(acx_ckpt_file_t *f, acx_ckpt_state_t *s) {
    ACX_CHECK(get_i64_in(f, "/", ACX_CKPT_ATTR_STEP, 0, ACX_CKPT_COUNT_MAX, "", &s->step));
    /* micro_step and epoch are absent from early files: step stands in */
    s->has_micro_step =
        acx_ckpt_get_i64(f, "/", ACX_CKPT_ATTR_MICRO_STEP, &s->micro_step) == ACX_OK;
    if (s->has_micro_step)
        ACX_CHECK(check_i64_in(f->path, "/", ACX_CKPT_ATTR_MICRO_STEP, s->micro_step, s->step,
                               ACX_CKPT_COUNT_MAX,
                               "at least the step (every step has a micro-step)"));
    else
        s->micro_step = s->step;
    s->has_epoch = acx_ckpt_get_i64(f, "/", ACX_CKPT_ATTR_EPOCH, &s->epoch) == ACX_OK;
    if (s->has_epoch)
        ACX_CHECK(
            check_i64_in(f->path, "/", ACX_CKPT_ATTR_EPOCH, s->epoch, 0, ACX_CKPT_COUNT_MAX, ""));
    else
        s->epoch = 0;
    ACX_CHECK(get_i64_in(f, "/", ACX_CKPT_ATTR_WORLD_SIZE, 1, INT_MAX, "MPI ranks are ints",
                         &s->world_size));
    ACX_CHECK(check_rng_size(f->path, s->world_size));
    /* descriptive strings: optional (run_id is absent from early files) */
    static const struct {
        const char *name;
        size_t off;
    } strs[] = {{ACX_CKPT_ATTR_SHARDING_STRATEGY, offsetof(acx_ckpt_state_t, sharding_strategy)},
                {ACX_CKPT_ATTR_MIXED_PRECISION, offsetof(acx_ckpt_state_t, mixed_precision)},
                {ACX_CKPT_ATTR_ACX_VERSION, offsetof(acx_ckpt_state_t, acx_version)},
                {ACX_CKPT_ATTR_CREATED, offsetof(acx_ckpt_state_t, created)},
                {ACX_CKPT_ATTR_RUN_ID, offsetof(acx_ckpt_state_t, run_id)}};
    for (size_t k = 0; k < sizeof strs / sizeof strs[0]; k++) {
        char *buf = (char *)s + strs[k].off;
        if (acx_ckpt_get_str(f, "/", strs[k].name, buf, ACX_CKPT_NAME_MAX) != ACX_OK) buf[0] = '\0';
    }
    return ACX_OK;
}

/* Optimizer step and lr; the schedule's position. */
static acx_status_t read_optimizer(acx_ckpt_file_t *f, acx_ckpt_state_t *s) {
    if (!acx_ckpt_exists(f, ACX_CKPT_GROUP_OPTIMIZER) ||
        acx_ckpt_get_str(f, ACX_CKPT_GROUP_OPTIMIZER, "type", s->optimizer_type,
                         sizeof s->optimizer_type) != ACX_OK)
        return ACX_OK;
    /* an optimizer step is taken at a boundary, at most one per step of
     * the run (fp16 skips take none): 0..root step */
    ACX_CHECK(get_i64_in(f, ACX_CKPT_GROUP_OPTIMIZER, "step", 0, s->step,
                         "the optimizer steps taken, at most the root's step", &s->optimizer_step));
    ACX_CHECK(get_lr(f, ACX_CKPT_GROUP_OPTIMIZER, "lr", &s->lr));
    ACX_CHECK(acx_ckpt_read_param_groups(f, &s->has_param_groups, &s->num_param_groups,
                                         &s->param_groups));
    s->has_optimizer = 1;

    snprintf(s->scheduler_kind, sizeof s->scheduler_kind, "none");
    if (acx_ckpt_exists(f, ACX_CKPT_GROUP_SCHEDULER))
        (void)acx_ckpt_get_str(f, ACX_CKPT_GROUP_SCHEDULER, "kind", s->scheduler_kind,
                               sizeof s->scheduler_kind);
    if (strcmp(s->scheduler_kind, "none") == 0) return ACX_OK;
    /* (the program decides how often it steps the schedule: no relation
     * to the root's step is assumed) */
    ACX_CHECK(get_lr(f, ACX_CKPT_GROUP_SCHEDULER, "base_lr", &s->base_lr));
    ACX_CHECK(get_i64_in(f, ACX_CKPT_GROUP_SCHEDULER, "step", 0, ACX_CKPT_COUNT_MAX, "",
                         &s->scheduler_step));
    ACX_CHECK(get_i64_in(f, ACX_CKPT_GROUP_SCHEDULER, "warmup_steps", 0, ACX_CKPT_COUNT_MAX, "",
                         &s->warmup_steps));
    ACX_CHECK(get_i64_in(f, ACX_CKPT_GROUP_SCHEDULER, "total_steps", 0, ACX_CKPT_COUNT_MAX, "",
                         &s->total_steps));
    if (acx_ckpt_get_f64(f, ACX_CKPT_GROUP_SCHEDULER, "num_cycles", &s->num_cycles) != ACX_OK)
        s->num_cycles = 0.0; /* informational: the program's schedule keeps its own */
    s->has_scheduler = 1;
    return ACX_OK;
}

/* ---- parameter groups ---- */

void acx_ckpt_free_param_groups(acx_ckpt_param_group_t *groups, int num) {
    if (groups == NULL) return;
    for (int k = 0; k < num; k++) {
        if (groups[k].params == NULL) continue;
        for (int j = 0; j < groups[k].num_params; j++)
            free((char *)groups[k].params[j]);
        free((void *)groups[k].params);
    }
    free(groups);
}

void acx_ckpt_state_free(acx_ckpt_state_t *s) {
    if (s == NULL) return;
    acx_ckpt_free_param_groups(s->param_groups, s->num_param_groups);
    s->param_groups = NULL;
    s->num_param_groups = 0;
}

/* Group k's members, read one by one into g (num_params set as they are
 * read, so a failure frees exactly those). */
static acx_status_t read_group_params(acx_ckpt_file_t *f, int k, int64_t count,
                                      acx_ckpt_param_group_t *g) {
    const char *obj = ACX_CKPT_GROUP_OPTIMIZER;
    char attr[96], name[ACX_CKPT_GROUP_NAME_MAX];
    char **names = NULL;
    int64_t cap = 0;
    g->num_params = 0;
    for (int64_t j = 0; j < count; j++) {
        snprintf(attr, sizeof attr, ACX_CKPT_PARAM_GROUP_PREFIX "%d.param.%lld", k, (long long)j);
        acx_status_t status = acx_ckpt_get_str(f, obj, attr, name, sizeof name);
        if (status == ACX_OK && name[0] == '\0')
            status = ACX_ERROR(ACX_ERR_FORMAT,
                               "checkpoint '%s': %s/%s is empty: expected a parameter name "
                               "(damaged or edited?)",
                               f->path, obj, attr);
        if (status == ACX_OK && j == cap) {
            cap = cap ? 2 * cap : 16;
            char **grown = realloc(names, (size_t)cap * sizeof *names);
            if (grown == NULL)
                status = ACX_ERROR(ACX_ERR_NO_MEMORY, "out of memory reading '%s'", f->path);
            else
                names = grown;
        }
        char *copy = status == ACX_OK ? strdup(name) : NULL;
        if (status == ACX_OK && copy == NULL)
            status = ACX_ERROR(ACX_ERR_NO_MEMORY, "out of memory reading '%s'", f->path);
        if (status != ACX_OK) {
            g->params = (const char *const *)names;
            return status;
        }
        names[j] = copy;
        g->num_params = (int)(j + 1);
    }
    g->params = (const char *const *)names;
    return ACX_OK;
}

/* Group k's name and hyperparameters into g, checked. */
static acx_status_t read_group(acx_ckpt_file_t *f, int k, acx_ckpt_param_group_t *g,
                               int64_t *count_p) {
    const char *obj = ACX_CKPT_GROUP_OPTIMIZER;
    char attr[96];
    snprintf(attr, sizeof attr, ACX_CKPT_PARAM_GROUP_PREFIX "%d.name", k);
    acx_status_t status = acx_ckpt_get_str(f, obj, attr, g->name, sizeof g->name);
    if (status == ACX_ERR_INVALID_ARG) /* longer than the buffer */
        return ACX_ERROR(ACX_ERR_FORMAT,
                         "checkpoint '%s': %s/%s is longer than %d bytes (damaged or edited?)",
                         f->path, obj, attr, ACX_CKPT_GROUP_NAME_MAX - 1);
    ACX_CHECK(status);
    if (g->name[0] == '\0')
        return ACX_ERROR(ACX_ERR_FORMAT,
                         "checkpoint '%s': %s/%s is empty: expected a group name (damaged or "
                         "edited?)",
                         f->path, obj, attr);
    snprintf(attr, sizeof attr, ACX_CKPT_PARAM_GROUP_PREFIX "%d.weight_decay", k);
    ACX_CHECK(acx_ckpt_get_f64(f, obj, attr, &g->weight_decay));
    if (!(g->weight_decay >= 0.0 && g->weight_decay <= DBL_MAX))
        return ACX_ERROR(ACX_ERR_FORMAT,
                         "checkpoint '%s': %s/%s = %g (group '%s') is out of range: expected a "
                         "finite value >= 0 (damaged or edited?)",
                         f->path, obj, attr, g->weight_decay, g->name);
    snprintf(attr, sizeof attr, ACX_CKPT_PARAM_GROUP_PREFIX "%d.lr_scale", k);
    ACX_CHECK(acx_ckpt_get_f64(f, obj, attr, &g->lr_scale));
    if (!(g->lr_scale > 0.0 && g->lr_scale <= ACX_OPTIM_LR_SCALE_MAX))
        return ACX_ERROR(ACX_ERR_FORMAT,
                         "checkpoint '%s': %s/%s = %g (group '%s') is out of range: expected a "
                         "finite value in (0, %g] (damaged or edited?)",
                         f->path, obj, attr, g->lr_scale, g->name, ACX_OPTIM_LR_SCALE_MAX);
    snprintf(attr, sizeof attr, ACX_CKPT_PARAM_GROUP_PREFIX "%d.num_params", k);
    return get_i64_in(f, obj, attr, 1, INT_MAX, "a group has at least one parameter", count_p);
}

acx_status_t acx_ckpt_read_param_groups(acx_ckpt_file_t *f, int *has_p, int *num_p,
                                        acx_ckpt_param_group_t **groups_p) {
    const char *obj = ACX_CKPT_GROUP_OPTIMIZER;
    *has_p = 0;
    *num_p = 0;
    *groups_p = NULL;
    int64_t n;
    if (!acx_ckpt_exists(f, obj) ||
        acx_ckpt_get_i64(f, obj, ACX_CKPT_ATTR_PARAM_GROUPS, &n) != ACX_OK) {
        /* absent (an older file), unless the question failed on damage */
        return acx_ckpt_damage(f);
    }
    ACX_CHECK(check_i64_in(f->path, obj, ACX_CKPT_ATTR_PARAM_GROUPS, n, 0,
                           ACX_CKPT_MAX_PARAM_GROUPS, "the number of parameter groups"));
    acx_ckpt_param_group_t *groups = calloc(n > 0 ? (size_t)n : 1, sizeof *groups);
    if (groups == NULL) return ACX_ERROR(ACX_ERR_NO_MEMORY, "out of memory reading '%s'", f->path);
    acx_status_t status = ACX_OK;
    int k;
    for (k = 0; k < (int)n && status == ACX_OK; k++) {
        int64_t count = 0;
        status = read_group(f, k, &groups[k], &count);
        for (int j = 0; j < k && status == ACX_OK; j++)
            if (strcmp(groups[j].name, groups[k].name) == 0)
                status = ACX_ERROR(ACX_ERR_FORMAT,
                                   "checkpoint '%s': parameter groups %d and %d are both named "
                                   "'%s' (damaged or edited?)",
                                   f->path, j, k, groups[k].name);
        if (status == ACX_OK) status = read_group_params(f, k, count, &groups[k]);
    }
    if (status != ACX_OK) {
        acx_ckpt_free_param_groups(groups, k);
        return status;
    }
    *has_p = 1;
    *num_p = (int)n;
    *groups_p = groups;
    return ACX_OK;
}

/* The fp16 loss scaler's state. */
static acx_status_t read_scaler(acx_ckpt_file_t *f, acx_ckpt_state_t *s) {
    char kind[32] = "none";
    if (acx_ckpt_exists(f, ACX_CKPT_GROUP_SCALER))
        (void)acx_ckpt_get_str(f, ACX_CKPT_GROUP_SCALER, "kind", kind, sizeof kind);
    if (strcmp(kind, "dynamic") != 0) return ACX_OK;
    ACX_CHECK(acx_ckpt_get_f64(f, ACX_CKPT_GROUP_SCALER, "scale", &s->scale));
    ACX_CHECK(acx_ckpt_get_i64(f, ACX_CKPT_GROUP_SCALER, "growth_tracker", &s->growth_tracker));
    ACX_CHECK(
        acx_ckpt_get_i64(f, ACX_CKPT_GROUP_SCALER, "consecutive_skips", &s->consecutive_skips));
    if (acx_ckpt_get_i64(f, ACX_CKPT_GROUP_SCALER, "growth_interval", &s->growth_interval) !=
        ACX_OK)
        s->growth_interval = 0; /* informational: the program's scaler keeps its own */
    /* the counters are ints in the scaler; a scale whose reciprocal
     * overflows float32 would unscale every gradient to inf/NaN, and one
     * above FLT_MAX makes the float32 loss seed infinite on every step */
    if (!(s->scale >= 1.0 / FLT_MAX && s->scale <= FLT_MAX) || s->growth_tracker < 0 ||
        s->growth_tracker > INT_MAX || s->consecutive_skips < 0 || s->consecutive_skips > INT_MAX)
        return ACX_ERROR(ACX_ERR_FORMAT,
                         "checkpoint '%s': /scaler scale %g, growth_tracker %lld, "
                         "consecutive_skips %lld: expected a finite scale in [1/FLT_MAX, FLT_MAX] "
                         "([%g, %g]) and counters in 0..INT_MAX (damaged or edited?)",
                         f->path, s->scale, (long long)s->growth_tracker,
                         (long long)s->consecutive_skips, 1.0 / FLT_MAX, (double)FLT_MAX);
    s->has_scaler = 1;
    return ACX_OK;
}

/* The loader fields, read; checked against each other by
 * acx_ckpt_state_check_loader with the file's num_samples when it has one
 * (files without it are checked by the runtime against its own data set).
 * Every field is checked before a position is computed from them: an
 * edited field must not move the data position silently. */
static acx_status_t read_loader(acx_ckpt_file_t *f, acx_ckpt_state_t *s) {
    if (!acx_ckpt_exists(f, ACX_CKPT_GROUP_DATALOADER)) return ACX_OK;
    s->has_loader = 1;
    ACX_CHECK(get_i64_in(f, ACX_CKPT_GROUP_DATALOADER, "epoch", 0, ACX_CKPT_COUNT_MAX, "",
                         &s->loader_epoch));
    ACX_CHECK(acx_ckpt_get_i64(f, ACX_CKPT_GROUP_DATALOADER, "seed", &s->seed)); /* any 64 bits */
    s->has_num_samples =
        acx_ckpt_get_i64(f, ACX_CKPT_GROUP_DATALOADER, "num_samples", &s->num_samples) == ACX_OK;
    ACX_CHECK(acx_ckpt_get_i64(f, ACX_CKPT_GROUP_DATALOADER, "global_batch", &s->global_batch));
    ACX_CHECK(acx_ckpt_get_i64(f, ACX_CKPT_GROUP_DATALOADER, "num_batches", &s->num_batches));
    ACX_CHECK(acx_ckpt_get_i64(f, ACX_CKPT_GROUP_DATALOADER, "position", &s->position));
    s->has_samples_consumed = acx_ckpt_get_i64(f, ACX_CKPT_GROUP_DATALOADER, "samples_consumed",
                                               &s->samples_consumed) == ACX_OK;
    if (s->has_num_samples && s->num_samples >= 1)
        ACX_CHECK(acx_ckpt_state_check_loader(f->path, s, s->num_samples));
    return ACX_OK;
}

acx_status_t acx_ckpt_state_check_loader(const char *file, const acx_ckpt_state_t *s,
                                         int64_t num_samples) {
    int64_t ns = num_samples > 0 ? num_samples : 1;
    ACX_CHECK(check_i64_in(file, ACX_CKPT_GROUP_DATALOADER, "global_batch", s->global_batch, 1,
                           ACX_CKPT_COUNT_MAX / ns,
                           "a global batch of at least one sample, at most 2^53 / num_samples"));
    /* batches per epoch at that global batch: floor(N/G) with drop_last,
     * ceil(N/G) otherwise, never 0 on rank 0 (io/sampler.c) */
    int64_t gb = s->global_batch, nb_lo = ns / gb, nb_hi = (ns + gb - 1) / gb;
    ACX_CHECK(check_i64_in(file, ACX_CKPT_GROUP_DATALOADER, "num_batches", s->num_batches,
                           nb_lo > 0 ? nb_lo : 1, nb_hi,
                           "the batches per epoch of num_samples in global_batch"));
    ACX_CHECK(check_i64_in(file, ACX_CKPT_GROUP_DATALOADER, "position", s->position, 0,
                           s->num_batches, "batches consumed in the epoch, at most num_batches"));
    if (s->has_samples_consumed && s->samples_consumed != s->position * gb)
        return ACX_ERROR(ACX_ERR_FORMAT,
                         "checkpoint '%s': /dataloader/samples_consumed = %lld, but position %lld "
                         "x global_batch %lld = %lld (damaged or edited?)",
                         file, (long long)s->samples_consumed, (long long)s->position,
                         (long long)gb, (long long)(s->position * gb));
    return ACX_OK;
}

acx_status_t acx_ckpt_state_read(acx_ckpt_file_t *f, acx_ckpt_state_t *s) {
    if (f == NULL || s == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_ckpt_state_read: NULL argument");
    memset(s, 0, sizeof *s);
    acx_status_t status = read_root(f, s);
    if (status == ACX_OK) status = read_optimizer(f, s);
    if (status == ACX_OK) status = read_scaler(f, s);
    if (status == ACX_OK) status = read_loader(f, s);
    /* an optional group or attribute that "is absent" because its header
     * failed a checksum is damage, not absence (io/ckpt_read.c) */
    if (status == ACX_OK && acx_ckpt_damage(f) != ACX_OK) status = acx_ckpt_damage(f);
    if (status != ACX_OK) acx_ckpt_state_free(s);
    return status;
}

/*
 * runtime/checkpoint.c — the runtime side of checkpoints: what the training
 * state is (model, optimizer and schedule, loader position, per-rank random
 * streams, config, registered program state), where checkpoints go (the
 * project's checkpoints/ directory, its `latest` pointer and retention), and
 * how a loaded checkpoint is checked against and put back into the running
 * program, under any world size. Also the program's registered state (the
 * random streams themselves are runtime/rng.c's). The project
 * directory itself — its lock, automatic names, `latest`, retention and
 * which files are this run's — is runtime/project.c's.
 *
 * Device-resident state (device_state cuda/emulated): io/ is host-only, so
 * the master weights and optimizer state are copied device -> host mirrors
 * before a save is described, and a load reads into mirrors that are copied
 * host -> device once the read succeeded (host_view below). The format is
 * the same either way: a checkpoint saved from device state loads on host
 * state and the reverse.
 *
 * What it leaves to others: the file itself — HDF5, collective I/O, the
 * temporary file, fsync and rename, checksums — is io/ckpt_write.c's and
 * io/ckpt_read.c's; this file describes the state to them as tensors (a
 * global shape, the rows of the local buffer, the rows to write or read)
 * and its scalar state. Inspection, verification and export are
 * io/ckpt_tools.c's; the layout is documented in docs/checkpoint-format.md.
 *
 * The layout (io/ckpt_format.h) is io's: this file fills io's description
 * of the scalar state (acx_ckpt_state_t) and the list of tensors from the
 * accelerator, and on load gets them back — every value already
 * range-checked by io (io/ckpt_state.c, the checks `acx ckpt verify` also
 * runs) — checks them against the program and applies them.
 *
 * Who writes which rows. Each rank writes the rows of every parameter and
 * optimizer state it is responsible for under the dim-0 rule (c =
 * ceil(R/N), rank r writes [r*c, min(R,(r+1)*c))): under the sharded
 * strategies those are the rows it owns; under NO_SHARD, where every rank
 * holds all rows, it still writes only that slice, so the I/O is spread over
 * the ranks. On load each rank needs exactly the rows it holds — a
 * different world size is only a different selection — and ranks on
 * different nodes that hold the same rows (NO_SHARD, HYBRID_SHARD) read one
 * part each and all-gather the parts (load_rows).
 * The rows of /rng are one per rank; /user is written by rank 0 (the objects
 * are identical on every rank) and read by all.
 *
 * Exact resume. Everything a step depends on is restored: parameters,
 * optimizer state and step (Adam's bias correction, SGD's first-step
 * momentum), the lr and the schedule's position, the loader's epoch and
 * position (the data order is a function of seed, epoch and global batch
 * only), the random counters and the accelerator's step counters. Saving
 * is allowed only between optimizer steps, so no gradients are pending.
 */
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <limits.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "acx/checkpoint.h"
#include "collectives/watchdog.h"
#include "io/checkpoint.h"
#include "io/loader.h"
#include "runtime/accelerator.h"
#include "base/error.h"
#include "base/log.h"
#include "base/memstat.h"
#include "runtime/optim_state.h"
#include "runtime/project.h"
#include "runtime/rng.h"
#include "sharding/model.h"

#define CKPT_PATH_MAX      4096
#define CKPT_YAML_MAX      (64 * 1024)
#define CKPT_USER_NAME_MAX 128
#define CKPT_LIST_MAX      2048 /* the warning that lists what a non-strict load skipped */

/* io's description of the hyperparameters holds every optimizer's */
_Static_assert(ACX_CKPT_MAX_HPARAMS >= ACX_OPTIM_MAX_HPARAMS, "checkpoint hyperparameter room");

/* One registered object (acx_register_for_checkpointing). */
struct acx_ckpt_entry {
    char name[CKPT_USER_NAME_MAX];
    acx_dtype_t dtype;
    void *data;
    int64_t count;
};

/* ---- registered program state ---- */

static int user_name_ok(const char *name) {
    size_t n = strlen(name);
    if (n == 0 || n >= CKPT_USER_NAME_MAX) return 0;
    for (const char *c = name; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '_' || *c == '.' || *c == '-'))
            return 0;
    return 1;
}

ACX_API acx_status_t acx_register_for_checkpointing(acx_accelerator_t *acc, const char *name,
                                                    acx_dtype_t dtype, void *data, int64_t count) {
    if (acc == NULL || name == NULL || data == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "acx_register_for_checkpointing: acc, name and data must not be NULL");
    if (!user_name_ok(name))
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "acx_register_for_checkpointing: invalid name '%.64s': expected 1 to %d "
                         "characters of [A-Za-z0-9_.-]",
                         name, CKPT_USER_NAME_MAX - 1);
    if (acx_dtype_size(dtype) == 0)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "acx_register_for_checkpointing: '%s': invalid dtype %d", name,
                         (int)dtype);
    if (count < 1)
        return ACX_ERROR(
            ACX_ERR_INVALID_ARG,
            "acx_register_for_checkpointing: '%s': count %lld: expected >= 1 (a scalar "
            "is count 1)",
            name, (long long)count);
    for (int i = 0; i < acc->num_ckpt_user; i++)
        if (strcmp(acc->ckpt_user[i].name, name) == 0)
            return ACX_ERROR(ACX_ERR_INVALID_ARG,
                             "acx_register_for_checkpointing: '%s' is already registered", name);
    if (acc->num_ckpt_user == acc->cap_ckpt_user) {
        int nc = acc->cap_ckpt_user ? 2 * acc->cap_ckpt_user : 8;
        struct acx_ckpt_entry *e = realloc(acc->ckpt_user, (size_t)nc * sizeof *e);
        if (e == NULL)
            return ACX_ERROR(ACX_ERR_NO_MEMORY,
                             "cannot grow the list of registered checkpoint state");
        acc->ckpt_user = e;
        acc->cap_ckpt_user = nc;
    }
    struct acx_ckpt_entry *e = &acc->ckpt_user[acc->num_ckpt_user++];
    snprintf(e->name, sizeof e->name, "%s", name);
    e->dtype = dtype;
    e->data = data;
    e->count = count;
    return ACX_OK;
}

void acx_checkpoint_free(acx_accelerator_t *acc) {
    free(acc->ckpt_user);
    acc->ckpt_user = NULL;
    acc->num_ckpt_user = acc->cap_ckpt_user = 0;
}

/* ---- the save plan: tensors and scalar state handed to io ---- */

/* The tensors acx_ckpt_save writes or acx_ckpt_read reads, with the
 * strings they point to (the scalar state is io's acx_ckpt_state_t).
 * Adding never fails loudly: the first allocation failure sets `failed`,
 * checked once before the save or read. */
typedef struct plan {
    acx_ckpt_tensor_t *t;
    int nt, cap_t;
    char **strs;
    int ns, cap_s;
    int failed;
} plan_t;

static int grow(void **arr, int *cap, int n, size_t elem) {
    if (n < *cap) return 0;
    int nc = *cap ? 2 * *cap : 32;
    void *p = realloc(*arr, (size_t)nc * elem);
    if (p == NULL) return -1;
    *arr = p;
    *cap = nc;
    return 0;
}

/* A formatted string owned by the plan (NULL after a failure). */
static const char *plan_str(plan_t *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static const char *plan_str(plan_t *p, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (s == NULL || grow((void **)&p->strs, &p->cap_s, p->ns, sizeof *p->strs) != 0) {
        free(s);
        p->failed = 1;
        return NULL;
    }
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    p->strs[p->ns++] = s;
    return s;
}

static void plan_tensor(plan_t *p, const acx_ckpt_tensor_t *t) {
    if (t->path == NULL || grow((void **)&p->t, &p->cap_t, p->nt, sizeof *p->t) != 0) {
        p->failed = 1;
        return;
    }
    p->t[p->nt++] = *t;
}

static void plan_free(plan_t *p) {
    for (int i = 0; i < p->ns; i++)
        free(p->strs[i]);
    free(p->strs);
    free(p->t);
}

/* A tensor laid out like model->master (a parameter or one optimizer state
 * of it): the local buffer holds the parameter's rows [row_begin, row_end)
 * at shard_offset of `base`. */
static acx_ckpt_tensor_t shard_tensor(const char *path, const acx_param_t *p, float *base) {
    acx_ckpt_tensor_t t = {.path = path,
                           .dtype = ACX_DTYPE_FLOAT32,
                           .ndim = p->ndim,
                           .buf = base + p->shard_offset,
                           .buf_row0 = p->row_begin,
                           .buf_rows = p->row_end - p->row_begin};
    for (int d = 0; d < p->ndim; d++)
        t.shape[d] = p->shape[d];
    return t;
}

/* Rows this rank writes: its owned rows, split among the ranks that hold
 * the same rows (NO_SHARD: the whole world; HYBRID_SHARD: the nodes), so
 * every row is written exactly once and the work is spread. */
static void save_rows(const acx_accelerator_t *acc, acx_ckpt_tensor_t *t, const acx_param_t *p) {
    (void)acc;
    acx_param_save_rows(p, &t->io_begin, &t->io_end);
}

/* Rows this rank reads on load: every row it holds, except that replicas
 * on different nodes (the plan's read group) read one part each and
 * all-gather the parts (io's share group): a replicated tensor is read from
 * storage once per job, not once per node. */
static void load_rows(const acx_accelerator_t *acc, acx_ckpt_tensor_t *t, const acx_param_t *p) {
    acx_param_load_rows(p, &t->io_begin, &t->io_end);
    t->share = acc->model->plan.read_group;
}

/* ---- save ---- */

static acx_status_t check_between_steps(const acx_accelerator_t *acc, const char *fn) {
    if (acc->model == NULL) return ACX_ERROR(ACX_ERR_STATE, "%s before acx_prepare", fn);
    if (acc->in_micro_step || acc->micro_since_sync != 0)
        return ACX_ERROR(
            ACX_ERR_STATE,
            "%s inside a gradient accumulation window (micro-step %lld, %d micro-step(s) "
            "of gradients pending): call it between optimizer steps",
            fn, (long long)acc->micro_step, acc->micro_since_sync);
    return ACX_OK;
}

/* Text that must be the same on every rank (the attribute list is): rank
 * 0's creation time and config YAML. Collective. */
static acx_status_t shared_text(acx_accelerator_t *acc, char created[32], char *yaml) {
    if (acc->rank == 0) {
        time_t now = time(NULL);
        struct tm tm;
        gmtime_r(&now, &tm);
        strftime(created, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
        acx_config_to_yaml(&acc->config, yaml, CKPT_YAML_MAX);
    }
    ACX_MPI_CHECK(MPI_Bcast(created, 32, MPI_CHAR, 0, acc->world->mpi));
    ACX_MPI_CHECK(MPI_Bcast(yaml, CKPT_YAML_MAX, MPI_CHAR, 0, acc->world->mpi));
    created[31] = yaml[CKPT_YAML_MAX - 1] = '\0';
    return ACX_OK;
}

/* ---- device-resident state: host mirrors around io/ ---- */

/* The arrays a checkpoint reads or writes, in host memory: the model's
 * master weights and the optimizer's state arrays themselves with host
 * state; host copies of them (ACX_MEM_TRANSIENT, [shard_numel] floats each)
 * with device state. Whole arrays, not one tensor at a time: simpler, and
 * bounded by 3x the local shard's fp32 bytes of host memory for the
 * duration of a save or load. */
typedef struct host_view {
    float *master;
    float *state[2];
    int num_state;
    size_t bytes; /* of each mirror; 0 = no mirrors (host state) */
} host_view_t;

static void host_view_close(host_view_t *v) {
    if (v->bytes > 0) {
        acx_mem_free(ACX_MEM_TRANSIENT, v->master, v->bytes);
        for (int s = 0; s < v->num_state; s++)
            acx_mem_free(ACX_MEM_TRANSIENT, v->state[s], v->bytes);
    }
    memset(v, 0, sizeof *v);
}

/* Fill v: with device state, mirrors holding a copy of the current device
 * values (a load keeps what the file does not replace). Not collective. */
static acx_status_t host_view_open(acx_accelerator_t *acc, host_view_t *v) {
    acx_model_t *m = acc->model;
    acx_optimizer_t *opt = acc->optimizer;
    const acx_devops_t *d = m->shard_dev; /* NULL: host state, or CPU offload */
    memset(v, 0, sizeof *v);
    v->num_state = opt != NULL ? acx_optimizer_num_state(opt) : 0;
    if (v->num_state > 2)
        return ACX_ERROR(ACX_ERR_INTERNAL, "checkpoint: %d optimizer state arrays", v->num_state);
    if (d == NULL) {
        v->master = m->master;
        for (int s = 0; s < v->num_state; s++)
            v->state[s] = acx_optimizer_state(opt, s);
        return ACX_OK;
    }
    v->bytes = m->shard_numel * sizeof(float);
    int n = v->num_state;
    v->num_state = 0;
    v->master = acx_mem_alloc_raw(ACX_MEM_TRANSIENT, v->bytes,
                                  "checkpoint host copy of the master weights");
    if (v->master == NULL) goto err_mem;
    for (int s = 0; s < n; s++) {
        v->state[s] = acx_mem_alloc_raw(ACX_MEM_TRANSIENT, v->bytes,
                                        "checkpoint host copy of optimizer state");
        if (v->state[s] == NULL) goto err_mem;
        v->num_state++;
    }
    acx_status_t status = d->to_host(v->master, m->master, v->bytes, m->ctx.stream);
    for (int s = 0; s < n && status == ACX_OK; s++)
        status = d->to_host(v->state[s], acx_optimizer_state(opt, s), v->bytes, m->ctx.stream);
    if (status != ACX_OK) host_view_close(v);
    return status;

err_mem:
    host_view_close(v);
    return ACX_ERR_NO_MEMORY;
}

/* After a load: the mirrors back into device memory (nothing with host state). */
static acx_status_t host_view_commit(acx_accelerator_t *acc, const host_view_t *v) {
    acx_model_t *m = acc->model;
    const acx_devops_t *d = m->shard_dev;
    if (d == NULL || v->bytes == 0) return ACX_OK;
    ACX_CHECK(d->to_device(m->master, v->master, v->bytes, m->ctx.stream));
    for (int s = 0; s < v->num_state; s++)
        ACX_CHECK(d->to_device(acx_optimizer_state(acc->optimizer, s), v->state[s], v->bytes,
                               m->ctx.stream));
    return ACX_OK;
}

/* The loader position is one per job: the sampler's order is global
 * (global batch g covers stream positions [g*G, (g+1)*G) and rank r reads
 * its slice of each, io/sampler.c), so "position p" means every rank has
 * consumed its slice of global batches 0..p-1, and only then can a
 * checkpoint be resumed under another world size or global batch. Ranks at
 * different positions (a program that calls acx_dataloader_next a
 * different number of times on different ranks) have no such position: a
 * checkpoint that kept one rank's would repeat or skip batches on the
 * others without a word. So the save refuses, on every rank, naming each
 * rank's position. The end of an epoch counts as one position even when
 * the ranks' batch counts differ (neither drop_last nor even_batches: the
 * last global batch can leave a rank without a batch): each rank then
 * stands at its own num_batches. Collective: one all-gather of 3 int64 per
 * rank. */
static acx_status_t check_loader_agrees(acx_accelerator_t *acc) {
    acx_dataloader_t *l = acc->loader;
    int n = acc->world_size;
    if (l == NULL || n == 1) return ACX_OK; /* the same on every rank (acx_prepare) */
    int64_t mine[3] = {acx_dataloader_epoch(l), acx_dataloader_position(l),
                       acx_dataloader_position(l) == acx_dataloader_num_batches(l)};
    int64_t *all = acx_malloc((size_t)n * sizeof mine, "loader positions");
    acx_status_t status = acx_coll_agree(acc->world, all != NULL ? ACX_OK : ACX_ERR_NO_MEMORY);
    if (status != ACX_OK) {
        free(all);
        return status;
    }
    int ret =
        ACX_WATCHED("checkpoint loader positions",
                    MPI_Allgather(mine, 3, MPI_INT64_T, all, 3, MPI_INT64_T, acc->world->mpi));
    if (ret != MPI_SUCCESS) {
        free(all);
        ACX_MPI_CHECK(ret);
    }
    int same = 1;
    for (int r = 1; r < n && same; r++)
        same = all[3 * r] == all[0] && (all[3 * r + 1] == all[1] || (all[3 * r + 2] && all[2]));
    if (!same) {
        char list[1024];
        size_t used = 0;
        for (int r = 0; r < n && used + 64 < sizeof list; r++)
            used += (size_t)snprintf(list + used, sizeof list - used,
                                     "%srank %d: epoch %lld batch %lld%s", r ? ", " : "", r,
                                     (long long)all[3 * r], (long long)all[3 * r + 1],
                                     all[3 * r + 2] ? " (end)" : "");
        if (used + 64 >= sizeof list) snprintf(list + used, sizeof list - used, ", ...");
        status =
            ACX_ERROR(ACX_ERR_STATE,
                      "cannot save the checkpoint: the ranks' data loaders stand at different "
                      "positions (%s); a checkpoint holds one position for the job (the data "
                      "order is global), so every rank must have consumed the same number of "
                      "batches of the epoch: call acx_dataloader_next the same number of times "
                      "on every rank",
                      list);
    }
    free(all);
    return status;
}

/* Copy a name into one of the state's fixed fields. */
static void set_name(char dst[ACX_CKPT_NAME_MAX], const char *src) {
    snprintf(dst, ACX_CKPT_NAME_MAX, "%s", src != NULL ? src : "");
}

/* Describe the whole state: the tensors into p, the scalars into st (io's
 * description, which it turns into the file's attributes). rng_row: this
 * rank's /rng row, and yaml: kept alive by the caller. */
static acx_status_t build_plan(acx_accelerator_t *acc, plan_t *p, acx_ckpt_state_t *st,
                               const char *created, const char *yaml, int64_t rng_row[4],
                               const host_view_t *view) {
    acx_model_t *m = acc->model;
    acx_optimizer_t *opt = acc->optimizer;
    acx_dataloader_t *l = acc->loader;
    const acx_config_t *c = &acc->config.values;

    for (int i = 0; i < m->num_params; i++)
        if (strchr(m->params[i]->name, '/') != NULL)
            return ACX_ERROR(ACX_ERR_INVALID_ARG,
                             "cannot checkpoint parameter '%s': '/' separates HDF5 groups, so a "
                             "parameter name in a checkpoint cannot contain it",
                             m->params[i]->name);

    /* root (io adds format and format_version) */
    memset(st, 0, sizeof *st);
    st->step = acc->step;
    st->micro_step = acc->micro_step;
    st->epoch = l != NULL ? acx_dataloader_epoch(l) : 0;
    st->world_size = acc->world_size;
    set_name(st->sharding_strategy, acx_sharding_strategy_name(c->sharding_strategy));
    set_name(st->mixed_precision, acx_mixed_precision_name(c->mixed_precision));
    set_name(st->acx_version, acx_version());
    set_name(st->created, created);
    set_name(st->run_id, acx_project_run_id(acc));

    /* model */
    for (int i = 0; i < m->num_params; i++) {
        acx_param_t *prm = m->params[i];
        acx_ckpt_tensor_t t =
            shard_tensor(plan_str(p, ACX_CKPT_GROUP_MODEL "/%s", prm->name), prm, view->master);
        save_rows(acc, &t, prm);
        plan_tensor(p, &t);
    }

    /* optimizer and schedule */
    if (opt != NULL) {
        st->has_optimizer = 1;
        set_name(st->optimizer_type, acx_optimizer_kind_name(opt));
        st->optimizer_step = acx_optimizer_num_steps(opt);
        st->lr = acx_optimizer_lr(opt);
        int nh =
            acx_optimizer_hparams(opt, st->hparam_names, st->hparam_values, ACX_CKPT_MAX_HPARAMS);
        st->num_hparams = nh < ACX_CKPT_MAX_HPARAMS ? nh : ACX_CKPT_MAX_HPARAMS;
        /* parameter groups: the names point into the optimizer and the
         * model; the array is freed by save_state */
        int ng = acx_optimizer_num_groups(opt);
        if (ng > 0) {
            st->param_groups =
                acx_calloc((size_t)ng, sizeof *st->param_groups, "checkpoint parameter groups");
            if (st->param_groups == NULL) return ACX_ERR_NO_MEMORY;
            for (int k = 0; k < ng; k++) {
                acx_ckpt_param_group_t *g = &st->param_groups[k];
                const char *gname;
                acx_optimizer_group(opt, k, &gname, &g->weight_decay, &g->lr_scale, &g->num_params,
                                    &g->params);
                snprintf(g->name, sizeof g->name, "%s", gname);
            }
        }
        st->num_param_groups = ng;
        for (int s = 0; s < acx_optimizer_num_state(opt); s++) {
            const char *sname = acx_optimizer_state_name(opt, s);
            for (int i = 0; i < m->num_params; i++) {
                acx_param_t *prm = m->params[i];
                acx_ckpt_tensor_t t =
                    shard_tensor(plan_str(p, ACX_CKPT_GROUP_OPTIMIZER "/%s/%s", sname, prm->name),
                                 prm, view->state[s]);
                save_rows(acc, &t, prm);
                plan_tensor(p, &t);
            }
        }
        acx_scheduler_t *sched = acx_optimizer_scheduler(opt);
        if (sched != NULL) {
            acx_scheduler_state_t ss;
            acx_scheduler_get_state(sched, &ss);
            st->has_scheduler = 1;
            set_name(st->scheduler_kind, acx_schedule_kind_name(ss.kind));
            st->warmup_steps = ss.warmup_steps;
            st->total_steps = ss.total_steps;
            st->num_cycles = ss.num_cycles;
            st->base_lr = ss.base_lr;
            st->scheduler_step = ss.step;
        }
    }

    /* fp16 loss scaler (torch GradScaler's state_dict: scale, growth tracker) */
    if (acc->scaler.enabled) {
        st->has_scaler = 1;
        st->scale = acc->scaler.scale;
        st->growth_tracker = acc->scaler.growth_tracker;
        st->growth_interval = acc->scaler.growth_interval;
        st->consecutive_skips = acc->scaler.consecutive_skips;
    }

    /* data loader: the data order is fixed by (seed, epoch, global batch) */
    if (l != NULL) {
        int64_t pos = acx_dataloader_position(l), g = acx_loader_global_batch(l);
        st->has_loader = 1;
        st->loader_epoch = acx_dataloader_epoch(l);
        st->position = pos;
        st->seed = (int64_t)acx_loader_seed(l);
        st->global_batch = g;
        st->samples_consumed = pos * g;
        st->num_batches = acx_dataloader_num_batches(l);
        st->num_samples = acx_dataloader_num_samples(l);
        if (acx_loader_start(l) != 0) {
            /* an epoch resumed inside a global batch (a token loader under
             * another world size): its position is a count of samples,
             * which the format holds exactly as batches of one sample */
            int64_t consumed = acx_loader_samples_consumed(l);
            if (pos >= acx_dataloader_num_batches(l) || consumed > st->num_samples)
                consumed = st->num_samples; /* the end of the epoch (padding past N) */
            st->global_batch = 1;
            st->position = consumed;
            st->samples_consumed = consumed;
            st->num_batches = st->num_samples;
        }
    }

    /* random streams: row r is rank r's (seed, rank, counter, reserved) */
    uint64_t rng_seed, rng_counter;
    acx_random_get_position(acc, &rng_seed, &rng_counter);
    rng_row[0] = (int64_t)rng_seed;
    rng_row[1] = acc->rank;
    rng_row[2] = (int64_t)rng_counter;
    rng_row[3] = 0;
    plan_tensor(p, &(acx_ckpt_tensor_t){.path = ACX_CKPT_DATASET_RNG,
                                        .dtype = ACX_DTYPE_INT64,
                                        .ndim = 2,
                                        .shape = {acc->world_size, 4},
                                        .buf = rng_row,
                                        .buf_row0 = acc->rank,
                                        .buf_rows = 1,
                                        .io_begin = acc->rank,
                                        .io_end = acc->rank + 1});

    st->config_yaml = yaml;

    /* registered state: identical on every rank, written by rank 0 */
    for (int i = 0; i < acc->num_ckpt_user; i++) {
        struct acx_ckpt_entry *e = &acc->ckpt_user[i];
        plan_tensor(p, &(acx_ckpt_tensor_t){.path = plan_str(p, ACX_CKPT_GROUP_USER "/%s", e->name),
                                            .dtype = e->dtype,
                                            .ndim = 1,
                                            .shape = {e->count},
                                            .buf = e->data,
                                            .buf_row0 = 0,
                                            .buf_rows = e->count,
                                            .io_begin = 0,
                                            .io_end = acc->rank == 0 ? e->count : 0});
    }
    if (p->failed) return ACX_ERROR(ACX_ERR_NO_MEMORY, "out of memory describing the checkpoint");
    return ACX_OK;
}

static acx_status_t save_state(acx_accelerator_t *acc, const char *path);
static acx_status_t load_state(acx_accelerator_t *acc, const char *path, int strict);

/* The whole save or load is one watch with checkpoint.timeout: its waits
 * follow file I/O of any length on some rank, and every collective inside
 * (agreements, HDF5's collective metadata and MPI-IO) is covered by it, so a
 * rank stopped or dead mid-save ends the job, named, instead of hanging it. */
ACX_API acx_status_t acx_save_state(acx_accelerator_t *acc, const char *path) {
    acx_watch_enter_io("checkpoint save");
    acx_status_t status = save_state(acc, path);
    acx_watch_exit();
    return status;
}

ACX_API acx_status_t acx_load_state(acx_accelerator_t *acc, const char *path, int strict) {
    acx_watch_enter_io("checkpoint load");
    acx_status_t status = load_state(acc, path, strict);
    acx_watch_exit();
    return status;
}

static acx_status_t save_state(acx_accelerator_t *acc, const char *path) {
    if (acc == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_save_state: acc is NULL");
    ACX_CHECK(check_between_steps(acc, "acx_save_state"));
    acx_status_t status = ACX_OK;
    plan_t plan = {0};
    char created[32] = "", dir[CKPT_PATH_MAX] = "", name[64] = "", file[CKPT_PATH_MAX];
    char *yaml = acx_calloc(1, CKPT_YAML_MAX, "checkpoint config text");
    int64_t rng_row[4];
    host_view_t view = {0};
    acx_ckpt_state_t *st = acx_calloc(1, sizeof *st, "checkpoint state");
    acx_ckpt_attr_t *attrs = NULL;
    int num_attrs = 0;

    /* every rank's part of the description, then the agreed outcome */
    if (yaml == NULL || st == NULL) status = ACX_ERR_NO_MEMORY;
    ACX_CHECK_GOTO(acx_coll_agree(acc->world, status), status, out);
    /* automatic naming: the project directory checks it may be written */
    if (path == NULL)
        ACX_CHECK_GOTO(acx_project_for_save(acc, acc->step, dir, sizeof dir, name, sizeof name),
                       status, out);
    snprintf(file, sizeof file, "%s%s%s", path != NULL ? path : dir, path != NULL ? "" : "/", name);
    ACX_CHECK_GOTO(shared_text(acc, created, yaml), status, out);
    ACX_CHECK_GOTO(check_loader_agrees(acc), status, out);
    status = host_view_open(acc, &view);
    if (status == ACX_OK) status = build_plan(acc, &plan, st, created, yaml, rng_row, &view);
    if (status == ACX_OK) status = acx_ckpt_state_attrs(st, &attrs, &num_attrs);
    ACX_CHECK_GOTO(acx_coll_agree(acc->world, status), status, out);

    double t0 = MPI_Wtime();
    ACX_CHECK_GOTO(acx_ckpt_save(acc->world, file, plan.t, plan.nt, attrs, num_attrs), status, out);
    double seconds = MPI_Wtime() - t0;

    /* auto naming: the pointer, then retention, only once the file is complete */
    char removed[512] = "";
    if (path == NULL && acc->rank == 0)
        status = acx_project_saved(acc, dir, name, acc->step, removed, sizeof removed);
    if (path == NULL) ACX_CHECK_GOTO(acx_coll_agree(acc->world, status), status, out);
    /* Said by default (a NOTE), so a user sees where the state went and
     * what retention took, without raising the log level. */
    if (acc->rank == 0) {
        struct stat fst;
        double mb = stat(file, &fst) == 0 ? (double)fst.st_size / 1e6 : 0.0;
        acx_log_note(ACX_SUBSYS_IO, "saved checkpoint '%s' (step %lld, %.3g MB, %.2f s)%s%s%s",
                     file, (long long)acc->step, mb, seconds,
                     removed[0] ? "; checkpoint.total_limit " : "", removed[0] ? "removed " : "",
                     removed);
    }
out:
    host_view_close(&view);
    plan_free(&plan);
    free(attrs);
    if (st != NULL) free(st->param_groups); /* the names in it are borrowed */
    free(st);
    free(yaml);
    return status;
}

acx_status_t acx_checkpoint_step_end(acx_accelerator_t *acc) {
    int64_t every = acc->config.values.checkpoint.save_every_steps;
    if (every <= 0 || acc->model == NULL || acc->step % every != 0) return ACX_OK;
    return acx_save_state(acc, NULL);
}

/* ---- load: which file ---- */

/* dir/latest names the newest complete checkpoint (a file name in dir). */
static acx_status_t read_latest(const char *dir, char *file, size_t n) {
    char lpath[CKPT_PATH_MAX], line[CKPT_PATH_MAX];
    snprintf(lpath, sizeof lpath, "%s/latest", dir);
    FILE *f = fopen(lpath, "r");
    if (f == NULL)
        return ACX_ERROR(ACX_ERR_IO,
                         "no checkpoint to load in '%s': cannot open '%s' (%s; nothing saved there "
                         "yet?)",
                         dir, lpath, strerror(errno));
    char *got = fgets(line, sizeof line, f);
    fclose(f);
    size_t len = got != NULL ? strcspn(line, "\r\n") : 0;
    line[len] = '\0';
    if (len == 0)
        return ACX_ERROR(ACX_ERR_FORMAT, "'%s' is empty: expected the name of a checkpoint file",
                         lpath);
    if (line[0] == '/')
        snprintf(file, n, "%s", line);
    else
        snprintf(file, n, "%s/%s", dir, line);
    return ACX_OK;
}

/* The checkpoint file `path` means (rank 0 decides; every rank gets its
 * answer). Collective. */
static acx_status_t resolve_load_path(acx_accelerator_t *acc, const char *path,
                                      char file[CKPT_PATH_MAX]) {
    acx_status_t status = ACX_OK;
    if (acc->rank == 0) {
        struct stat st;
        if (path == NULL || strcmp(path, "latest") == 0) {
            char dir[CKPT_PATH_MAX];
            snprintf(dir, sizeof dir, "%s/checkpoints", acc->config.values.project_dir);
            status = read_latest(dir, file, CKPT_PATH_MAX);
        } else if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
            status = read_latest(path, file, CKPT_PATH_MAX);
        } else {
            snprintf(file, CKPT_PATH_MAX, "%s", path);
        }
    }
    ACX_CHECK(acx_coll_agree(acc->world, status));
    ACX_MPI_CHECK(MPI_Bcast(file, CKPT_PATH_MAX, MPI_CHAR, 0, acc->world->mpi));
    file[CKPT_PATH_MAX - 1] = '\0';
    return ACX_OK;
}

/* ---- load: checking the file against the program ---- */

/* What did not match. Strict loads stop at the first; non-strict loads
 * collect them for one warning. Every rank computes the same list (same
 * file, same program), so no agreement is needed for it. */
typedef struct mismatches {
    int count;
    char first[1024];
    char list[CKPT_LIST_MAX];
} mismatches_t;

static void mismatch(mismatches_t *mm, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void mismatch(mismatches_t *mm, const char *fmt, ...) {
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (mm->count++ == 0) snprintf(mm->first, sizeof mm->first, "%s", line);
    size_t used = strlen(mm->list);
    if (used + 8 < sizeof mm->list)
        snprintf(mm->list + used, sizeof mm->list - used, "%s%s", used ? "; " : "", line);
}

static void shape_text(char *buf, size_t n, int ndim, const int64_t *shape, acx_dtype_t dtype) {
    size_t used = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < ndim && used < n; d++)
        used +=
            (size_t)snprintf(buf + used, n - used, "%s%lld", d ? " x " : "", (long long)shape[d]);
    if (used < n) snprintf(buf + used, n - used, "] %s", acx_dtype_name(dtype));
}

/* Does dataset `path` exist with exactly this shape and dtype? Records a
 * mismatch (what: "parameter 'fc1.weight'") and returns 0 if not. */
static int dataset_matches(acx_ckpt_file_t *f, mismatches_t *mm, const char *path, const char *what,
                           int ndim, const int64_t *shape, acx_dtype_t dtype) {
    int fnd = 0;
    int64_t fshape[ACX_MAX_DIMS];
    acx_dtype_t fdt;
    if (!acx_ckpt_exists(f, path)) {
        mismatch(mm, "%s is not in the checkpoint (no dataset %s)", what, path);
        return 0;
    }
    if (acx_ckpt_shape(f, path, &fnd, fshape, &fdt) != ACX_OK) {
        mismatch(mm, "%s: %s", what, acx_last_error());
        return 0;
    }
    int same = fnd == ndim && fdt == dtype;
    for (int d = 0; same && d < ndim; d++)
        same = fshape[d] == shape[d];
    if (!same) {
        char a[256], b[256];
        shape_text(a, sizeof a, fnd, fshape, fdt);
        shape_text(b, sizeof b, ndim, shape, dtype);
        mismatch(mm, "%s: the checkpoint's %s is %s, the program's is %s", what, path, a, b);
    }
    return same;
}

/* Datasets in `group` of the file that the program has no counterpart for
 * (has(name) == 0): unexpected entries, as torch's strict load reports. */
static acx_status_t check_unexpected(acx_ckpt_file_t *f, mismatches_t *mm, const char *group,
                                     const char *what,
                                     int (*has)(const acx_accelerator_t *, const char *),
                                     const acx_accelerator_t *acc) {
    if (!acx_ckpt_exists(f, group)) return ACX_OK;
    int n = 0;
    char **names = NULL;
    ACX_CHECK(acx_ckpt_list(f, group, &n, &names));
    for (int i = 0; i < n; i++)
        if (!has(acc, names[i]))
            mismatch(
                mm, "the checkpoint's %s/%s has no counterpart in the program (no %s of that name)",
                group, names[i], what);
    free(names);
    return ACX_OK;
}

static int has_param(const acx_accelerator_t *acc, const char *name) {
    for (int i = 0; i < acc->model->num_params; i++)
        if (strcmp(acc->model->params[i]->name, name) == 0) return 1;
    return 0;
}

static int has_user(const acx_accelerator_t *acc, const char *name) {
    for (int i = 0; i < acc->num_ckpt_user; i++)
        if (strcmp(acc->ckpt_user[i].name, name) == 0) return 1;
    return 0;
}

/* ---- load: the file's state against the program ---- */

/* The tensors to read and the scalar state to restore once they are in. */
typedef struct restore {
    const char *file; /* for messages */
    plan_t plan;
    host_view_t view; /* where the tensors are read to (host memory) */
    mismatches_t mm;
    acx_ckpt_state_t st; /* the file's scalars, range-checked by io */
    int64_t step, micro_step, saved_world;
    /* optimizer */
    int have_opt;
    int64_t opt_step;
    double opt_lr;
    /* schedule */
    int have_sched;
    double sched_base_lr;
    int64_t sched_step;
    /* loader */
    int have_loader;
    int64_t samples; /* >= 0: resume a token loader at this many samples of the epoch */
    int64_t epoch, position;
    /* rng: this rank's row, if the saving run had this rank */
    int have_rng;
    int64_t rng_row[4];
    /* fp16 loss scaler */
    int have_scaler;
    double scale;
    int64_t growth_tracker, consecutive_skips;
} restore_t;

/* Parameters: the model's against /model. */
static acx_status_t plan_model(acx_accelerator_t *acc, acx_ckpt_file_t *f, restore_t *r, int *ok) {
    acx_model_t *m = acc->model;
    for (int i = 0; i < m->num_params; i++) {
        acx_param_t *p = m->params[i];
        char what[ACX_MAX_NAME + 16];
        snprintf(what, sizeof what, "parameter '%s'", p->name);
        const char *path = plan_str(&r->plan, ACX_CKPT_GROUP_MODEL "/%s", p->name);
        if (path == NULL) return ACX_ERROR(ACX_ERR_NO_MEMORY, "out of memory planning the load");
        ok[i] = dataset_matches(f, &r->mm, path, what, p->ndim, p->shape, ACX_DTYPE_FLOAT32);
        if (!ok[i]) continue;
        acx_ckpt_tensor_t t = shard_tensor(path, p, r->view.master);
        load_rows(acc, &t, p);
        plan_tensor(&r->plan, &t);
    }
    return check_unexpected(f, &r->mm, ACX_CKPT_GROUP_MODEL, "parameter", has_param, acc);
}

static void compare_hparams(acx_accelerator_t *acc, acx_ckpt_file_t *f, acx_optimizer_t *opt) {
    const char *names[ACX_OPTIM_MAX_HPARAMS];
    double values[ACX_OPTIM_MAX_HPARAMS];
    int nh = acx_optimizer_hparams(opt, names, values, ACX_OPTIM_MAX_HPARAMS);
    for (int h = 0; h < nh && h < ACX_OPTIM_MAX_HPARAMS; h++) {
        double v;
        if (acx_ckpt_get_f64(f, ACX_CKPT_GROUP_OPTIMIZER, names[h], &v) != ACX_OK ||
            v == values[h] || acc->rank != 0)
            continue;
        /* The lr a resume continues with is the checkpoint's (its `lr`
         * and the schedule's position are restored for an exact resume);
         * the program's initial_lr is kept only as the schedule's base. */
        if (strcmp(names[h], "initial_lr") == 0)
            ACX_WARN(ACX_SUBSYS_IO,
                     "checkpoint optimizer initial_lr = %g, the program's is %g: the run "
                     "continues with the checkpoint's lr and schedule (call "
                     "acx_optimizer_set_lr after acx_prepare to change it)",
                     v, values[h]);
        else
            ACX_WARN(ACX_SUBSYS_IO,
                     "checkpoint optimizer %s = %g, the program's is %g: the program's value is "
                     "kept",
                     names[h], v, values[h]);
    }
}

/* Group name for messages: the default group has none. */
static const char *group_label(const char *name) { return name != NULL ? name : "(default)"; }

/* The file's parameter groups against the program's: names, weight_decay,
 * lr_scale and membership (a file without groups: every parameter in the
 * default group). Every difference is a mismatch naming the group or the
 * parameter and both values: a strict load refuses the file; a non-strict
 * one loads the state and trains on with the program's groups. */
static void compare_groups(acx_accelerator_t *acc, restore_t *r, acx_optimizer_t *opt) {
    const acx_ckpt_state_t *st = &r->st;
    const acx_model_t *m = acc->model;
    const char *old = st->has_param_groups ? ""
                                           : " (the checkpoint predates parameter groups: "
                                             "every parameter is in its default group)";
    int ng = acx_optimizer_num_groups(opt);
    for (int k = 0; k < st->num_param_groups; k++) {
        const acx_ckpt_param_group_t *fg = &st->param_groups[k];
        int found = 0;
        for (int j = 0; j < ng && !found; j++) {
            const char *name;
            const char *const *pn;
            double wd, ls;
            int np;
            acx_optimizer_group(opt, j, &name, &wd, &ls, &np, &pn);
            if (strcmp(name, fg->name) != 0) continue;
            found = 1;
            if (wd != fg->weight_decay)
                mismatch(&r->mm,
                         "parameter group '%s': the checkpoint's weight_decay is %.17g, the "
                         "program's %.17g",
                         fg->name, fg->weight_decay, wd);
            if (ls != fg->lr_scale)
                mismatch(&r->mm,
                         "parameter group '%s': the checkpoint's lr_scale is %.17g, the "
                         "program's %.17g",
                         fg->name, fg->lr_scale, ls);
        }
        if (!found)
            mismatch(&r->mm,
                     "the checkpoint's parameter group '%s' (weight_decay %g, lr_scale %g, %d "
                     "parameter(s)) is not in the program (no group of that name)",
                     fg->name, fg->weight_decay, fg->lr_scale, fg->num_params);
    }
    for (int j = 0; j < ng; j++) {
        const char *name;
        const char *const *pn;
        double wd, ls;
        int np, found = 0;
        acx_optimizer_group(opt, j, &name, &wd, &ls, &np, &pn);
        for (int k = 0; k < st->num_param_groups && !found; k++)
            found = strcmp(st->param_groups[k].name, name) == 0;
        if (!found)
            mismatch(&r->mm,
                     "the program's parameter group '%s' (weight_decay %g, lr_scale %g) is not "
                     "in the checkpoint%s",
                     name, wd, ls, old);
    }
    /* membership: the file's group of each program parameter */
    const char **file_group = acx_calloc(m->num_params > 0 ? (size_t)m->num_params : 1,
                                         sizeof *file_group, "checkpoint group check");
    if (file_group == NULL) {
        mismatch(&r->mm, "out of memory comparing the parameter groups");
        return;
    }
    for (int k = 0; k < st->num_param_groups; k++) {
        const acx_ckpt_param_group_t *fg = &st->param_groups[k];
        for (int j = 0; j < fg->num_params; j++) {
            int i = 0;
            while (i < m->num_params && strcmp(m->params[i]->name, fg->params[j]) != 0)
                i++;
            if (i == m->num_params)
                mismatch(&r->mm,
                         "the checkpoint's parameter group '%s' lists parameter '%s', which the "
                         "program does not have",
                         fg->name, fg->params[j]);
            else if (file_group[i] != NULL)
                mismatch(&r->mm,
                         "parameter '%s' is in two of the checkpoint's groups, '%s' and '%s' "
                         "(damaged or edited?)",
                         fg->params[j], file_group[i], fg->name);
            else
                file_group[i] = fg->name;
        }
    }
    for (int i = 0; i < m->num_params; i++) {
        int k = acx_optimizer_param_group(opt, i);
        const char *prog = NULL;
        if (k >= 0) {
            const char *const *pn;
            double wd, ls;
            int np;
            acx_optimizer_group(opt, k, &prog, &wd, &ls, &np, &pn);
        }
        if ((prog == NULL) != (file_group[i] == NULL) ||
            (prog != NULL && strcmp(prog, file_group[i]) != 0))
            mismatch(&r->mm,
                     "parameter '%s' is in group '%s' in the checkpoint, in group '%s' in the "
                     "program",
                     m->params[i]->name, group_label(file_group[i]), group_label(prog));
    }
    free(file_group);
}

/* Optimizer state, step and lr; the schedule's position. */
static acx_status_t plan_optimizer(acx_accelerator_t *acc, acx_ckpt_file_t *f, restore_t *r,
                                   const int *param_ok) {
    acx_optimizer_t *opt = acc->optimizer;
    acx_model_t *m = acc->model;
    if (opt == NULL) return ACX_OK;
    const char *type = r->st.optimizer_type;
    if (!r->st.has_optimizer) {
        mismatch(&r->mm,
                 "the checkpoint has no optimizer state (the program's %s optimizer starts fresh)",
                 acx_optimizer_kind_name(opt));
        return ACX_OK;
    }
    if (strcmp(type, acx_optimizer_kind_name(opt)) != 0) {
        mismatch(&r->mm,
                 "the checkpoint's optimizer is %s, the program's %s (its state is not loaded)",
                 type, acx_optimizer_kind_name(opt));
        return ACX_OK;
    }
    /* (io checked both: the step at most the root's, the lr in range) */
    r->opt_step = r->st.optimizer_step;
    r->opt_lr = r->st.lr;
    r->have_opt = 1;
    compare_hparams(acc, f, opt);
    compare_groups(acc, r, opt);
    for (int s = 0; s < acx_optimizer_num_state(opt); s++) {
        const char *sname = acx_optimizer_state_name(opt, s);
        for (int i = 0; i < m->num_params; i++) {
            acx_param_t *p = m->params[i];
            if (!param_ok[i]) continue; /* already reported */
            char what[ACX_MAX_NAME + 64];
            snprintf(what, sizeof what, "optimizer state %s of '%s'", sname, p->name);
            const char *path =
                plan_str(&r->plan, ACX_CKPT_GROUP_OPTIMIZER "/%s/%s", sname, p->name);
            if (path == NULL)
                return ACX_ERROR(ACX_ERR_NO_MEMORY, "out of memory planning the load");
            if (!dataset_matches(f, &r->mm, path, what, p->ndim, p->shape, ACX_DTYPE_FLOAT32))
                continue;
            acx_ckpt_tensor_t t = shard_tensor(path, p, r->view.state[s]);
            load_rows(acc, &t, p);
            plan_tensor(&r->plan, &t);
        }
    }

    acx_scheduler_t *sched = acx_optimizer_scheduler(opt);
    const char *kind = r->st.has_scheduler ? r->st.scheduler_kind : "none";
    if (sched == NULL) {
        if (strcmp(kind, "none") != 0 && acc->rank == 0)
            ACX_WARN(ACX_SUBSYS_IO,
                     "the checkpoint has a %s learning-rate schedule, the program none: "
                     "the saved lr %g is kept constant",
                     kind, r->opt_lr);
        return ACX_OK;
    }
    acx_scheduler_state_t st;
    acx_scheduler_get_state(sched, &st);
    if (strcmp(kind, "none") == 0) {
        if (acc->rank == 0)
            ACX_WARN(ACX_SUBSYS_IO,
                     "the checkpoint has no learning-rate schedule, the program a %s one: "
                     "the schedule starts at step 0",
                     acx_schedule_kind_name(st.kind));
        return ACX_OK;
    }
    int64_t warmup = r->st.warmup_steps, total = r->st.total_steps;
    r->sched_base_lr = r->st.base_lr;
    r->sched_step = r->st.scheduler_step;
    r->have_sched = 1;
    if ((strcmp(kind, acx_schedule_kind_name(st.kind)) != 0 || warmup != st.warmup_steps ||
         total != st.total_steps) &&
        acc->rank == 0)
        ACX_WARN(
            ACX_SUBSYS_IO,
            "the checkpoint's schedule is %s (warmup %lld, total %lld steps), the program's %s "
            "(warmup %lld, total %lld): the program's shape continues from step %lld",
            kind, (long long)warmup, (long long)total, acx_schedule_kind_name(st.kind),
            (long long)st.warmup_steps, (long long)st.total_steps, (long long)r->sched_step);
    return ACX_OK;
}

/* Loader position, mapped onto this run's global batch. The permutation of
 * an epoch depends on (seed, epoch) only, and global batch g covers
 * permutation entries [g*G, (g+1)*G), so position p of a run with global
 * batch G_old is exactly position p*G_old/G_new here when that divides; the
 * end of an epoch maps to the end of the epoch. When it does not divide, a
 * token loader resumes at the sample count itself (its epoch's remaining
 * batches start inside the stream: io/sampler.c's start); a sample loader
 * refuses (strict) or rounds down, repeating samples. */
static acx_status_t plan_loader(acx_accelerator_t *acc, restore_t *r, const char *file,
                                int strict) {
    acx_dataloader_t *l = acc->loader;
    if (l == NULL) return ACX_OK;
    const acx_ckpt_state_t *st = &r->st;
    if (!st->has_loader) {
        if (acc->rank == 0)
            ACX_WARN(ACX_SUBSYS_IO,
                     "checkpoint '%s' has no data-loader state: the loader starts at "
                     "epoch 0, batch 0",
                     file);
        return ACX_OK;
    }
    /* io checked every field against the others (with the file's
     * num_samples); here they meet this run's data set, before the
     * position is computed from them: an edited field must not move the
     * data position silently. */
    int64_t seed = st->seed, gb_old = st->global_batch, nb_old = st->num_batches;
    int64_t pos_old = st->position;
    int64_t ns = acx_dataloader_num_samples(l);
    r->epoch = st->loader_epoch;
    if (st->has_num_samples && st->num_samples != ns) {
        mismatch(&r->mm,
                 "the checkpoint's data loader had %lld samples, this run's has %lld: its "
                 "position is in another data set's order (not loaded: the loader starts at "
                 "epoch 0, batch 0)",
                 (long long)st->num_samples, (long long)ns);
        return ACX_OK;
    }
    /* a file without num_samples: its fields against this run's data set */
    if (!st->has_num_samples) ACX_CHECK(acx_ckpt_state_check_loader(file, st, ns));
    if ((uint64_t)seed != acx_loader_seed(l) && acc->rank == 0)
        ACX_WARN(ACX_SUBSYS_IO,
                 "checkpoint '%s' was saved with seed %lld, this run has seed %llu: "
                 "the data order will differ from the saved run's",
                 file, (long long)seed, (unsigned long long)acx_loader_seed(l));
    int64_t gb = acx_loader_global_batch(l), nb = acx_dataloader_num_batches(l);
    if (pos_old >= nb_old) {
        r->position = nb; /* the epoch was complete */
    } else if (gb == gb_old) {
        r->position = pos_old;
    } else {
        int64_t samples = pos_old * gb_old;
        r->position = samples / gb;
        if (samples % gb != 0 && acx_loader_is_tokens(l)) {
            /* a token loader starts the epoch's rest exactly at the next
             * unconsumed window (acx_loader_set_position_samples) */
            r->samples = samples;
        } else if (samples % gb != 0) {
            if (strict)
                return ACX_ERROR(
                    ACX_ERR_FORMAT,
                    "checkpoint '%s': the loader had consumed %lld samples of epoch %lld "
                    "(%lld global batches of %lld), which is not a whole number of this "
                    "run's global batches of %lld: resume with a global batch that "
                    "divides %lld (e.g. the same, with split_batches), or load with "
                    "strict=0 to round down to batch %lld (repeating %lld samples)",
                    file, (long long)samples, (long long)r->epoch, (long long)pos_old,
                    (long long)gb_old, (long long)gb, (long long)samples, (long long)r->position,
                    (long long)(samples % gb));
            if (acc->rank == 0)
                ACX_WARN(
                    ACX_SUBSYS_IO,
                    "checkpoint '%s': %lld samples consumed in epoch %lld is not a whole number "
                    "of global batches of %lld: resuming at batch %lld (%lld samples repeat)",
                    file, (long long)samples, (long long)r->epoch, (long long)gb,
                    (long long)r->position, (long long)(samples % gb));
        }
    }
    if (r->position > nb)
        return ACX_ERROR(
            ACX_ERR_FORMAT,
            "checkpoint '%s': loader position %lld of epoch %lld is past this run's %lld "
            "batches per epoch (a different data set?)",
            file, (long long)r->position, (long long)r->epoch, (long long)nb);
    r->have_loader = 1;
    return ACX_OK;
}

/* This rank's random stream (row `rank` if the saving run had that rank),
 * and the registered objects. */
static acx_status_t plan_rng_user(acx_accelerator_t *acc, acx_ckpt_file_t *f, restore_t *r) {
    int64_t saved = r->saved_world;
    int64_t shape[2] = {saved, 4};
    if (dataset_matches(f, &r->mm, ACX_CKPT_DATASET_RNG, "the random streams", 2, shape,
                        ACX_DTYPE_INT64)) {
        int mine = acc->rank < saved;
        r->have_rng = 1;
        plan_tensor(&r->plan, &(acx_ckpt_tensor_t){.path = ACX_CKPT_DATASET_RNG,
                                                   .dtype = ACX_DTYPE_INT64,
                                                   .ndim = 2,
                                                   .shape = {saved, 4},
                                                   .buf = r->rng_row,
                                                   .buf_row0 = mine ? acc->rank : 0,
                                                   .buf_rows = mine,
                                                   .io_begin = mine ? acc->rank : 0,
                                                   .io_end = mine ? acc->rank + 1 : 0});
    }
    for (int i = 0; i < acc->num_ckpt_user; i++) {
        struct acx_ckpt_entry *e = &acc->ckpt_user[i];
        char what[CKPT_USER_NAME_MAX + 32];
        snprintf(what, sizeof what, "registered object '%s'", e->name);
        const char *path = plan_str(&r->plan, ACX_CKPT_GROUP_USER "/%s", e->name);
        if (path == NULL) return ACX_ERROR(ACX_ERR_NO_MEMORY, "out of memory planning the load");
        if (!dataset_matches(f, &r->mm, path, what, 1, &e->count, e->dtype)) continue;
        plan_tensor(&r->plan, &(acx_ckpt_tensor_t){.path = path,
                                                   .dtype = e->dtype,
                                                   .ndim = 1,
                                                   .shape = {e->count},
                                                   .buf = e->data,
                                                   .buf_row0 = 0,
                                                   .buf_rows = e->count,
                                                   .io_begin = 0,
                                                   .io_end = e->count});
    }
    return check_unexpected(f, &r->mm, ACX_CKPT_GROUP_USER, "registered object", has_user, acc);
}

/* Everything before any buffer is touched: a strict mismatch leaves the
 * program's state as it was. */
/* The fp16 loss scaler's state, when both the checkpoint and the program
 * use one (a bf16/fp32 run ignores a saved scaler; an fp16 run without one
 * in the checkpoint starts from loss_scale.init). */
static acx_status_t plan_scaler(acx_accelerator_t *acc, restore_t *r) {
    if (!r->st.has_scaler || !acc->scaler.enabled) {
        if (acc->scaler.enabled && acc->rank == 0)
            ACX_WARN(ACX_SUBSYS_IO,
                     "the checkpoint has no fp16 loss scaler state: the scale "
                     "starts at loss_scale.init = %g",
                     acc->scaler.scale);
        return ACX_OK;
    }
    /* (io checked the scale and the counters) */
    r->scale = r->st.scale;
    r->growth_tracker = r->st.growth_tracker;
    r->consecutive_skips = r->st.consecutive_skips;
    r->have_scaler = 1;
    return ACX_OK;
}

static acx_status_t plan_load(acx_accelerator_t *acc, acx_ckpt_file_t *f, const char *file,
                              int strict, restore_t *r) {
    acx_status_t status = ACX_OK;
    r->file = file;
    /* every scalar of the file, range-checked (io/ckpt_state.c) */
    ACX_CHECK(acx_ckpt_state_read(f, &r->st));
    r->step = r->st.step;
    r->micro_step = r->st.micro_step;
    r->saved_world = r->st.world_size;
    int *param_ok = acx_calloc((size_t)acc->model->num_params + 1, sizeof *param_ok, "load plan");
    if (param_ok == NULL) return ACX_ERR_NO_MEMORY;
    ACX_CHECK_GOTO(plan_model(acc, f, r, param_ok), status, out);
    if (strict && r->mm.count) goto out;
    ACX_CHECK_GOTO(plan_optimizer(acc, f, r, param_ok), status, out);
    if (strict && r->mm.count) goto out;
    ACX_CHECK_GOTO(plan_rng_user(acc, f, r), status, out);
    if (strict && r->mm.count) goto out;
    ACX_CHECK_GOTO(plan_loader(acc, r, file, strict), status, out);
    ACX_CHECK_GOTO(plan_scaler(acc, r), status, out);
    if (r->plan.failed) status = ACX_ERROR(ACX_ERR_NO_MEMORY, "out of memory planning the load");
out:
    free(param_ok);
    if (status == ACX_OK && strict && r->mm.count)
        status = ACX_ERROR(ACX_ERR_FORMAT,
                           "checkpoint '%s' does not match the program: %s (strict "
                           "load; with strict=0 what matches is loaded)",
                           file, r->mm.first);
    return status;
}

/* The scalars, once every tensor is in. */
static acx_status_t apply_restore(acx_accelerator_t *acc, const restore_t *r) {
    acx_optimizer_t *opt = acc->optimizer;
    if (r->have_opt) {
        acx_optimizer_set_num_steps(opt, r->opt_step);
        ACX_CHECK(acx_optimizer_set_lr(opt, r->opt_lr));
        if (r->have_sched)
            acx_scheduler_set_position(acx_optimizer_scheduler(opt), r->sched_base_lr,
                                       r->sched_step);
    }
    if (r->have_scaler) {
        acc->scaler.scale = r->scale;
        acc->scaler.growth_tracker = (int)r->growth_tracker;
        acc->scaler.consecutive_skips = (int)r->consecutive_skips;
    }
    acc->step = r->step;
    acc->micro_step = r->micro_step;
    acc->micro_since_sync = 0;
    acc->sync = 1;
    acc->model->sync = 1;
    if (r->have_loader && r->samples >= 0)
        ACX_CHECK(acx_loader_set_position_samples(acc->loader, r->epoch, r->samples));
    else if (r->have_loader)
        ACX_CHECK(acx_loader_set_position(acc->loader, r->epoch, r->position));

    /* random streams: ranks the saving run had continue their stream; the
     * others start their own from (seed, rank) */
    if (r->have_rng && acc->rank < r->saved_world && r->rng_row[1] == acc->rank) {
        acx_random_set_position(acc, (uint64_t)r->rng_row[0], (uint64_t)r->rng_row[2]);
    } else {
        acx_random_set_position(acc, (uint64_t)acc->config.values.seed, 0);
        if (acc->rank >= r->saved_world)
            ACX_WARN(ACX_SUBSYS_IO,
                     "rank %d did not exist at save (world size %lld): its random stream starts "
                     "fresh from (seed %lld, rank %d)",
                     acc->rank, (long long)r->saved_world, (long long)acc->config.values.seed,
                     acc->rank);
        else
            ACX_WARN(ACX_SUBSYS_IO,
                     "the checkpoint has no random stream for rank %d: it starts fresh from (seed "
                     "%lld, rank %d)",
                     acc->rank, (long long)acc->config.values.seed, acc->rank);
    }
    /* Make the parameters the program sees consistent with the loaded
     * master weights (NO_SHARD: the same memory; ZeRO: all-gather). */
    return acx_model_after_step(acc->model);
}

static acx_status_t load_state(acx_accelerator_t *acc, const char *path, int strict) {
    if (acc == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_load_state: acc is NULL");
    ACX_CHECK(check_between_steps(acc, "acx_load_state"));
    acx_status_t status;
    char file[CKPT_PATH_MAX];
    acx_ckpt_file_t *f = NULL;
    restore_t *r = acx_calloc(1, sizeof *r, "checkpoint load state");
    ACX_CHECK(acx_coll_agree(acc->world, r != NULL ? ACX_OK : ACX_ERR_NO_MEMORY));
    r->samples = -1; /* a position in batches (plan_loader) */

    ACX_CHECK_GOTO(resolve_load_path(acc, path, file), status, out);
    ACX_CHECK_GOTO(acx_ckpt_open(acc->world, file, &f), status, out);
    acx_ckpt_allow_unverified(f, acc->config.values.checkpoint_allow_unverified == 1);
    status = host_view_open(acc, &r->view);
    if (status == ACX_OK) status = plan_load(acc, f, file, strict, r);
    /* a damaged file is damaged, not a model mismatch: planning turns failed
     * queries into "not in the checkpoint" */
    if (acx_ckpt_damage(f) != ACX_OK) status = acx_ckpt_damage(f);
    /* deterministic on every rank, except for memory: agree anyway */
    ACX_CHECK_GOTO(acx_coll_agree(acc->world, status), status, out);
    ACX_CHECK_GOTO(acx_ckpt_read(f, r->plan.t, r->plan.nt), status, out);
    status = host_view_commit(acc, &r->view);
    if (status == ACX_OK) status = apply_restore(acc, r);
    ACX_CHECK_GOTO(acx_coll_agree(acc->world, status), status, out);
    {
        /* the run continues the loaded checkpoint's lineage (runtime/project.c);
         * a file written before run_id existed has none (optional attribute) */
        char run_id[ACX_RUN_ID_LEN] = "";
        if (acx_ckpt_get_str(f, "/", ACX_CKPT_ATTR_RUN_ID, run_id, sizeof run_id) != ACX_OK)
            run_id[0] = '\0';
        acx_project_adopt(acc, run_id);
    }
    if (acc->rank == 0) {
        if (r->mm.count)
            ACX_WARN(ACX_SUBSYS_IO,
                     "checkpoint '%s' loaded partly (strict=0): %d item(s) not loaded: %s", file,
                     r->mm.count, r->mm.list);
        ACX_INFO(ACX_SUBSYS_IO, "loaded checkpoint '%s' (step %lld, saved by %lld rank(s), now %d)",
                 file, (long long)r->step, (long long)r->saved_world, acc->world_size);
    }
out:
    if (f != NULL) acx_ckpt_close(f);
    if (r != NULL) {
        host_view_close(&r->view);
        plan_free(&r->plan);
    }
    if (r != NULL) acx_ckpt_state_free(&r->st);
    free(r);
    return status;
}

/*
 * io/ckpt_format.h — the names, versions and layout of acx's HDF5 files
 * (library-private): the checkpoint ("acx-checkpoint") and the weights-only
 * file ("acx-weights"), and the in-memory description of a checkpoint's
 * scalar state (acx_ckpt_state_t) that io/ckpt_state.c turns into the
 * file's attributes and reads back, range-checked. The one place a reader
 * of the code looks for "what is in the file": the writer
 * (io/ckpt_write.c), the reader (io/ckpt_read.c), the tools
 * (io/ckpt_tools.c), the weights file (io/weights.c) and the runtime's
 * state (runtime/checkpoint.c) take the names from here. The full
 * description, with h5py examples, is docs/checkpoint-format.md.
 *
 * Checkpoint layout (every rank writes its rows of each tensor; see
 * io/checkpoint.h):
 *
 *   /                 format "acx-checkpoint", format_version, step,
 *                     micro_step, epoch, world_size, sharding_strategy,
 *                     mixed_precision, acx_version, created (UTC ISO 8601),
 *                     run_id
 *   /model/<param>                    fp32, the parameter's true shape
 *   /optimizer        type, step, lr, the hyperparameters (torch's names),
 *                     param_groups (the count) and, for each group k,
 *                     param_group.<k>.name, .weight_decay, .lr_scale,
 *                     .num_params and .param.<j> (the members' names)
 *   /optimizer/<state>/<param>        fp32, the parameter's shape
 *   /scheduler        kind ("none" without one), warmup_steps, total_steps,
 *                     num_cycles, base_lr, step
 *   /scaler           kind ("dynamic" or "none"), scale, growth_tracker,
 *                     growth_interval, consecutive_skips
 *   /dataloader       epoch, position (batches consumed in the epoch), seed,
 *                     global_batch, samples_consumed, num_batches, num_samples
 *   /rng              int64 [world_size x 4]: seed, rank, counter, reserved
 *   /config           yaml: the resolved config as YAML text
 *   /user/<name>      the registered objects, shape [count]
 *
 * Weights layout: / attrs format "acx-weights", step (and source, when
 * exported from a checkpoint); /<param name> float32, the true shape.
 */
#ifndef ACX_IO_CKPT_FORMAT_H
#define ACX_IO_CKPT_FORMAT_H

#include <stdint.h>

/* The root attribute `format` of a checkpoint. */
#define ACX_CKPT_FORMAT "acx-checkpoint"
/* 2: contiguous datasets with CRC-32 block attributes (io/ckpt_crc.h);
 * 1: chunked datasets with HDF5's Fletcher-32 filter. Both are read. */
#define ACX_CKPT_FORMAT_VERSION 2
/* The root attribute `format` of a weights-only file (acx_model_save_weights,
 * acx ckpt export --format hdf5). */
#define ACX_WEIGHTS_FORMAT "acx-weights"

/* The objects of the layout above, by their HDF5 paths. A tensor's path
 * is its group's and its name: ACX_CKPT_GROUP_MODEL "/" name. */
#define ACX_CKPT_GROUP_MODEL      "/model"
#define ACX_CKPT_GROUP_OPTIMIZER  "/optimizer"
#define ACX_CKPT_GROUP_SCHEDULER  "/scheduler"
#define ACX_CKPT_GROUP_SCALER     "/scaler"
#define ACX_CKPT_GROUP_DATALOADER "/dataloader"
#define ACX_CKPT_GROUP_CONFIG     "/config"
#define ACX_CKPT_GROUP_USER       "/user"
#define ACX_CKPT_DATASET_RNG      "/rng"

/* The root attributes (of "/"): a checkpoint's, and a weights file's
 * format, step and source. The group attributes (/optimizer's type,
 * /scheduler's kind, ...) are named where the state is written and read,
 * io/ckpt_state.c. */
#define ACX_CKPT_ATTR_FORMAT            "format"
#define ACX_CKPT_ATTR_FORMAT_VERSION    "format_version"
#define ACX_CKPT_ATTR_STEP              "step"
#define ACX_CKPT_ATTR_MICRO_STEP        "micro_step"
#define ACX_CKPT_ATTR_EPOCH             "epoch"
#define ACX_CKPT_ATTR_WORLD_SIZE        "world_size"
#define ACX_CKPT_ATTR_SHARDING_STRATEGY "sharding_strategy"
#define ACX_CKPT_ATTR_MIXED_PRECISION   "mixed_precision"
#define ACX_CKPT_ATTR_ACX_VERSION       "acx_version"
#define ACX_CKPT_ATTR_CREATED           "created"
#define ACX_CKPT_ATTR_RUN_ID            "run_id"
/* A weights file's: the checkpoint it was exported from. */
#define ACX_WEIGHTS_ATTR_SOURCE "source"
/* /config's attribute: the resolved config as YAML text. */
#define ACX_CKPT_ATTR_CONFIG_YAML "yaml"

/* /optimizer's parameter groups (acx_optimizer_add_param_group): the
 * count, and the attributes of group k (0-based, in the order the program
 * added them) named ACX_CKPT_PARAM_GROUP_PREFIX "<k>." field, with field
 * "name" (string), "weight_decay", "lr_scale" (float64), "num_params"
 * (int64) and "param.<j>" (string, j in 0..num_params-1). Files written
 * before groups existed have no count: every parameter in the default
 * group (the optimizer's own weight_decay, lr scale 1). */
#define ACX_CKPT_ATTR_PARAM_GROUPS  "param_groups"
#define ACX_CKPT_PARAM_GROUP_PREFIX "param_group."
/* Bounds a file's groups are held to: names as long as acx's parameter
 * names (ACX_MAX_NAME, NUL included), at most this many groups. */
#define ACX_CKPT_GROUP_NAME_MAX   128
#define ACX_CKPT_MAX_PARAM_GROUPS 4096

/* One parameter group of a checkpoint. Save: params points to the caller's
 * names. Read (acx_ckpt_read_param_groups): params and its strings are
 * malloc'd, freed by acx_ckpt_free_param_groups. */
typedef struct acx_ckpt_param_group {
    char name[ACX_CKPT_GROUP_NAME_MAX];
    double weight_decay, lr_scale;
    int num_params;
    const char *const *params;
} acx_ckpt_param_group_t;

/* The largest step, micro-step, epoch or optimizer step a checkpoint may
 * hold: 2^53. A counter read from a file past it is damage or an edit (at a
 * million steps a second a run would need 285 years to reach it); below it,
 * the counter still grows for as long as any run lasts without wrapping
 * int64 (a wrapped step names files "step_-9223372036854775780.h5" that
 * retention never deletes) and is exact as a double (metrics, logs). */
#define ACX_CKPT_COUNT_MAX ((int64_t)1 << 53)
/* Bytes of one /rng row: int64 seed, rank, counter, reserved. */
#define ACX_CKPT_RNG_ROW_BYTES 32
/* Optimizer hyperparameters a checkpoint records (attributes of /optimizer). */
#define ACX_CKPT_MAX_HPARAMS 8
/* Room for a name-like string attribute: an optimizer type, a schedule or
 * scaler kind, a strategy, a version, a time, a run id. */
#define ACX_CKPT_NAME_MAX 64

/* The scalar state of a checkpoint: every attribute of the layout above.
 * The runtime fills one from the accelerator for a save
 * (acx_ckpt_state_attrs turns it into the attributes of acx_ckpt_save) and
 * gets one back from a file (acx_ckpt_state_read, which range-checks every
 * value before anything uses it). The has_* flags say which groups are
 * there (a save writes /scheduler and the /optimizer attributes only with
 * has_optimizer; a read sets each flag from the file). Strings are copied
 * in, except config_yaml and the hyperparameter names (pointers the caller
 * keeps alive for a save; not read back). */
typedef struct acx_ckpt_state {
    /* / */
    int64_t step, micro_step, epoch, world_size;
    int has_micro_step, has_epoch; /* read: absent from early files */
    char sharding_strategy[ACX_CKPT_NAME_MAX], mixed_precision[ACX_CKPT_NAME_MAX];
    char acx_version[ACX_CKPT_NAME_MAX], created[ACX_CKPT_NAME_MAX], run_id[ACX_CKPT_NAME_MAX];
    /* /optimizer (has_optimizer: the group with a type) */
    int has_optimizer;
    char optimizer_type[ACX_CKPT_NAME_MAX];
    int64_t optimizer_step;
    double lr;
    int num_hparams; /* save only */
    const char *hparam_names[ACX_CKPT_MAX_HPARAMS];
    double hparam_values[ACX_CKPT_MAX_HPARAMS];
    /* /scheduler (has_scheduler: a kind other than "none") */
    int has_scheduler;
    char scheduler_kind[ACX_CKPT_NAME_MAX];
    int64_t warmup_steps, total_steps, scheduler_step;
    double num_cycles, base_lr;
    /* /scaler (has_scaler: kind "dynamic") */
    int has_scaler;
    double scale;
    int64_t growth_tracker, growth_interval, consecutive_skips;
    /* /dataloader (has_loader: the group) */
    int has_loader;
    int has_num_samples, has_samples_consumed; /* read: absent from early files */
    int64_t loader_epoch, position, seed, global_batch, samples_consumed, num_batches, num_samples;
    /* /config */
    const char *config_yaml; /* save only */
    /* /optimizer's parameter groups (with has_optimizer). Save: the
     * caller's array. Read: has_param_groups 0 for a file without the
     * count (older acx), and the groups malloc'd: acx_ckpt_state_free. */
    int has_param_groups;
    int num_param_groups;
    acx_ckpt_param_group_t *param_groups;
} acx_ckpt_state_t;

#endif /* ACX_IO_CKPT_FORMAT_H */

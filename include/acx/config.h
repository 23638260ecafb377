/*
 * acx/config.h — the program's own configuration choices.
 *
 * The effective configuration is resolved at acx_init with this precedence,
 * lowest first:
 *   1. built-in defaults
 *   2. a YAML config file: --config FILE on the command line, else
 *      $ACX_CONFIG_FILE, else ~/.config/acx/default_config.yaml if present;
 *      acx's own keys, or an Accelerate default_config.yaml as it is (its
 *      keys are mapped onto acx's; docs/config.md has the table)
 *   3. ACX_* environment variables (ACX_MIXED_PRECISION, ACX_SEED, ...,
 *      ACX_DATALOADER_DROP_LAST for nested keys)
 *   4. --acx-KEY=VALUE options on the command line (and --debug)
 *   5. fields the program set in the acx_config_t passed to acx_init
 *
 * A field left at its ACX_CONFIG_DEFAULT value means "not set by the program"
 * and never overrides a lower level. Always start from ACX_CONFIG_DEFAULT so
 * fields added in later versions keep their "unset" value (the size field
 * lets acx tell which fields a program compiled against an older header knows).
 *
 *   acx_config_t cfg = ACX_CONFIG_DEFAULT;
 *   cfg.gradient_accumulation_steps = 4;
 */
#ifndef ACX_CONFIG_H
#define ACX_CONFIG_H

#include "acx/status.h"
#include "acx/types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ACX_UNSET     (-1)      /* unset int/enum field */
#define ACX_UNSET_I64 INT64_MIN /* unset int64 field */
#define ACX_UNSET_F   (-1.0)    /* unset non-negative double field */

typedef enum acx_mixed_precision {
    ACX_MP_NO = 0,
    ACX_MP_BF16 = 1,
    ACX_MP_FP16 = 2
} acx_mixed_precision_t;

/* Sharding strategies, as in PyTorch FSDP / DeepSpeed ZeRO. */
typedef enum acx_sharding_strategy {
    ACX_NO_SHARD = 0,      /* DDP: everything replicated, gradients all-reduced */
    ACX_SHARD_GRAD_OP = 1, /* ZeRO-2 */
    ACX_FULL_SHARD = 2,    /* ZeRO-3 */
    ACX_HYBRID_SHARD = 3   /* FULL_SHARD in a node, replicated across nodes */
} acx_sharding_strategy_t;

typedef enum acx_backend_kind {
    ACX_BACKEND_AUTO = 0, /* NCCL when built, a GPU is visible and device_state is cuda; else MPI */
    ACX_BACKEND_MPI = 1,
    ACX_BACKEND_NCCL = 2
} acx_backend_kind_t;

/* Where parameters, gradients and optimizer state live (device_state). */
typedef enum acx_device_state {
    ACX_DEVICE_STATE_AUTO = 0,    /* cuda with backend: nccl, else host */
    ACX_DEVICE_STATE_HOST = 1,    /* host memory */
    ACX_DEVICE_STATE_CUDA = 2,    /* CUDA device memory (every sharding strategy) */
    ACX_DEVICE_STATE_EMULATED = 3 /* for testing the device path without a GPU: a CPU test
                                     double whose memory host code cannot touch (with
                                     backend: nccl, the NCCL backend's test double) */
} acx_device_state_t;

/* Where the optimizer's fp32 master weights and state live and its step
 * runs (offload_optimizer). */
typedef enum acx_offload {
    ACX_OFFLOAD_NONE = 0, /* with the rest of the model state (device_state) */
    ACX_OFFLOAD_CPU = 1   /* host memory, the step on the CPU; needs device_state cuda or
                             emulated and sharding_strategy no_shard (this version) */
} acx_offload_t;

typedef enum acx_log_level {
    ACX_LOG_ERROR = 0,
    ACX_LOG_WARN = 1,
    ACX_LOG_INFO = 2,
    ACX_LOG_DEBUG = 3
} acx_log_level_t;

/* Where metrics go. Accelerate's trackers (tensorboard, wandb, ...) are not
 * available: acx writes JSONL that any of them can import. */
typedef enum acx_log_with {
    ACX_LOG_WITH_NONE = 0, /* no metrics file */
    ACX_LOG_WITH_JSONL = 1 /* one JSON object per logged step, main process only */
} acx_log_with_t;

typedef struct acx_dataloader_config {
    int drop_last;     /* 0/1: drop the last incomplete global batch (default 0) */
    int even_batches;  /* 0/1: pad the last batches so every rank gets as many (default 1) */
    int split_batches; /* 0/1: batch_size is the global batch, split across ranks (default 0) */
    int prefetch;      /* batches read ahead by a background thread; 0 = none (default 1) */
} acx_dataloader_config_t;

typedef struct acx_checkpoint_config {
    int total_limit;          /* keep the newest K checkpoints; 0 = keep all (default 0) */
    int64_t save_every_steps; /* save every N optimizer steps; 0 = off (default 0) */
} acx_checkpoint_config_t;

/* FULL_SHARD / HYBRID_SHARD prefetching (PyTorch FSDP's options of the same
 * names). */
typedef enum acx_backward_prefetch {
    ACX_BACKWARD_PRE =
        0, /* BACKWARD_PRE: start unit i-1's all-gather when unit i is acquired in backward */
    ACX_BACKWARD_POST = 1, /* BACKWARD_POST: start it when unit i's gradients are ready */
    ACX_BACKWARD_NONE = 2  /* NO_PREFETCH: gather each unit only when acquired */
} acx_backward_prefetch_t;

typedef struct acx_fsdp_config {
    int forward_prefetch;  /* 0/1: start unit i+1's all-gather when unit i is acquired in forward
                              (default 0) */
    int backward_prefetch; /* acx_backward_prefetch_t (default ACX_BACKWARD_PRE) */
    int limit_all_gathers; /* most units gathered at once counting prefetches, >= 0;
                              0 = no cap (default 2); acquires the program asks for are never
                              refused */
} acx_fsdp_config_t;

/* The dtype gradients travel in (FSDP's MixedPrecision.reduce_dtype). */
typedef enum acx_reduce_dtype {
    ACX_REDUCE_FP32 = 0, /* default: exact sums of float32 */
    ACX_REDUCE_BF16 =
        1, /* rounded to bfloat16 before the reduction (half the bytes on NCCL; not on MPI) */
    ACX_REDUCE_FP16 = 2 /* rounded to float16 (mind overflow past 65504); bytes as bf16 */
} acx_reduce_dtype_t;

/* Dynamic loss scaling under mixed_precision fp16 (torch.amp.GradScaler). */
typedef struct acx_loss_scale_config {
    double init;         /* initial scale, > 0 (default 65536 = 2^16) */
    int growth_interval; /* clean steps in a row before the scale doubles, >= 1 (default 2000) */
    double min;          /* the run stops when the scale would fall below this, >= 0 (default 1) */
    int max_consecutive_skips; /* the run stops after this many skipped steps in a row, >= 1
                                  (default 20) */
} acx_loss_scale_config_t;

/* What acx_prepare does about an earlier run's checkpoints. */
typedef enum acx_resume {
    ACX_RESUME_NO = 0,  /* start from the freshly initialized state (default) */
    ACX_RESUME_AUTO = 1 /* load <project_dir>/checkpoints/latest when it exists, else start
                           fresh: a requeued or restarted job continues where it stopped */
} acx_resume_t;

/* What acx_prepare does when project_dir/checkpoints holds checkpoints and
 * the run does not resume (neither resume: auto finding `latest` nor
 * resume_from): refuse, naming the newest (default), or move them into
 * checkpoints/archived-<UTC time>/ and start over. Never deleted, never
 * replaced. */
typedef enum acx_checkpoint_existing {
    ACX_CHECKPOINT_EXISTING_REFUSE = 0,
    ACX_CHECKPOINT_EXISTING_ARCHIVE = 1
} acx_checkpoint_existing_t;

/* Preemption and time limits (docs/slurm.md). A listed signal asks the job
 * to stop at the next synchronization boundary: the ranks agree, save a
 * checkpoint, and acx_preempted() turns nonzero after acx_accumulate_end. */
typedef struct acx_preemption_config {
    const char *signals; /* comma-separated names: USR1, USR2, TERM, INT, HUP, XCPU (SIG prefix
                            and case optional); "none" = no handler (default "USR1,TERM") */
    int requeue;         /* 0/1: inside a Slurm job, rank 0 runs `scontrol requeue
                            $SLURM_JOB_ID` once the checkpoint is saved (default 0) */
} acx_preemption_config_t;

typedef struct acx_config {
    size_t size;             /* sizeof(acx_config_t) as the program saw it */
    const char *config_file; /* YAML file; overrides --config/ACX_CONFIG_FILE; NULL = unset */
    int mixed_precision;     /* acx_mixed_precision_t */
    int sharding_strategy;   /* acx_sharding_strategy_t */
    int gradient_accumulation_steps; /* >= 1 (default 1) */
    int64_t seed;                    /* any value (default 42) */
    const char *project_dir;         /* checkpoints, logs (default ".") */
    int log_level;                   /* acx_log_level_t (default ACX_LOG_WARN) */
    double collective_timeout;       /* seconds, >= 0; 0 = no stall detector (default 600) */
    double bucket_size_mb;           /* gradient fusion bucket size in MiB, > 0 (default 25) */
    int backend;                     /* acx_backend_kind_t (default AUTO) */
    acx_dataloader_config_t dataloader;
    /* New fields go at the end: a program built against an older header
     * passes a smaller size, and acx reads only the fields it holds. */
    int log_with; /* acx_log_with_t (default ACX_LOG_WITH_NONE) */
    acx_checkpoint_config_t checkpoint;
    acx_fsdp_config_t fsdp;
    int ranks_per_node; /* > 0: treat every `ranks_per_node` consecutive ranks as one node
                           (simulates nodes for HYBRID_SHARD); 0 = the real nodes (default) */
    int reduce_dtype;   /* acx_reduce_dtype_t: gradients on the wire under mixed precision (default
                           fp32) */
    acx_loss_scale_config_t loss_scale;
    int resume; /* acx_resume_t (default ACX_RESUME_NO) */
    acx_preemption_config_t preemption;
    int device_state;          /* acx_device_state_t (default AUTO) */
    int offload_optimizer;     /* acx_offload_t (default ACX_OFFLOAD_NONE) */
    double checkpoint_timeout; /* checkpoint.timeout: seconds, > 0, the stall detector's limit
                                  for a checkpoint save or load, a weights file or a dataset
                                  open, file I/O included (default 1800) */
    const char *resume_from;   /* load at acx_prepare (before the first step): "latest" (the
                                  project's newest), a checkpoint file, or a checkpoints
                                  directory; "none" or NULL = do not (default "none") */
    int checkpoint_existing;   /* checkpoint.existing: acx_checkpoint_existing_t (default REFUSE) */
    int checkpoint_allow_unverified; /* checkpoint.allow_unverified: load data without checksums,
                                        with a warning (default 0) */
    int64_t max_steps; /* >= 0 optimizer steps of a step-based run; 0 = epoch mode (default 0).
                          > 0: the training loader cycles epochs and an epoch's end is no
                          synchronization boundary (acx/accelerator.h) */
} acx_config_t;

#define ACX_CONFIG_DEFAULT                                                                         \
    {                                                                                              \
        .size = sizeof(acx_config_t), .config_file = NULL, .mixed_precision = ACX_UNSET,           \
        .sharding_strategy = ACX_UNSET, .gradient_accumulation_steps = ACX_UNSET,                  \
        .seed = ACX_UNSET_I64, .project_dir = NULL, .log_level = ACX_UNSET,                        \
        .collective_timeout = ACX_UNSET_F, .bucket_size_mb = ACX_UNSET_F, .backend = ACX_UNSET,    \
        .dataloader = {.drop_last = ACX_UNSET,                                                     \
                       .even_batches = ACX_UNSET,                                                  \
                       .split_batches = ACX_UNSET,                                                 \
                       .prefetch = ACX_UNSET},                                                     \
        .log_with = ACX_UNSET,                                                                     \
        .checkpoint = {.total_limit = ACX_UNSET, .save_every_steps = ACX_UNSET_I64},               \
        .fsdp = {.forward_prefetch = ACX_UNSET,                                                    \
                 .backward_prefetch = ACX_UNSET,                                                   \
                 .limit_all_gathers = ACX_UNSET},                                                  \
        .ranks_per_node = ACX_UNSET, .reduce_dtype = ACX_UNSET,                                    \
        .loss_scale = {.init = ACX_UNSET_F,                                                        \
                       .growth_interval = ACX_UNSET,                                               \
                       .min = ACX_UNSET_F,                                                         \
                       .max_consecutive_skips = ACX_UNSET},                                        \
        .resume = ACX_UNSET, .preemption = {.signals = NULL, .requeue = ACX_UNSET},                \
        .device_state = ACX_UNSET, .offload_optimizer = ACX_UNSET,                                 \
        .checkpoint_timeout = ACX_UNSET_F, .resume_from = NULL, .checkpoint_existing = ACX_UNSET,  \
        .checkpoint_allow_unverified = ACX_UNSET, .max_steps = ACX_UNSET_I64                       \
    }

/* Resolve the configuration the way acx_init would, without starting MPI,
 * and describe it as text: one line per key with its value and where the
 * value came from ("default", "run.yaml:3", "ACX_SEED", "--acx-seed",
 * "program"), then the read-only launch information of the config file
 * (num_processes, main_process_ip, ... from an Accelerate file), then the
 * environment-only settings that are set (ACX_LOG_SUBSYS, ACX_SHM_DISABLE,
 * ...: docs/config.md lists them), then the warning naming the file's
 * settings acx cannot honour and one warning per ACX_* variable that is no
 * acx setting (a likely typo), if any. This is what `acx config show`
 * prints. Not collective; any process may call it.
 *
 * program: the program's choices, as passed to acx_init; NULL = none.
 * config_file: like --config FILE; NULL = the usual lookup
 *   ($ACX_CONFIG_FILE, then ~/.config/acx/default_config.yaml);
 *   program->config_file, when set, still wins as it does in acx_init.
 * n_options, options: command-line overrides, each "--acx-KEY=VALUE" or
 *   "KEY=VALUE" ('-', '_' and '.' alike in KEY; a bool KEY alone = true).
 * text_p: on success, a NUL-terminated text allocated with malloc; the
 *   caller frees it with free(). Untouched on failure.
 * Returns ACX_OK; ACX_ERR_INVALID_ARG (text_p NULL, options NULL with
 * n_options > 0); ACX_ERR_INVALID_CONFIG, ACX_ERR_YAML, ACX_ERR_IO,
 * ACX_ERR_NOT_SUPPORTED as acx_init would for the same sources (the message,
 * from acx_last_error(), names file:line, key, value and accepted values);
 * ACX_ERR_NO_MEMORY. */
ACX_API acx_status_t acx_config_describe(const acx_config_t *program, const char *config_file,
                                         int n_options, const char *const *options, char **text_p);

#ifdef __cplusplus
}
#endif
#endif /* ACX_CONFIG_H */

/*
 * base/settings.c — the registry of every configuration key and every
 * environment variable acx reads (base/settings.h says what follows from
 * it), and what each row needs to be used: parsing and checking a value,
 * describing what a row accepts, the typed getters of the environment-only
 * variables, the closest-name search behind "did you mean", and the
 * Markdown tables of docs/config.md.
 *
 * Leaves to others: resolving the configuration from its sources
 * (base/config.c), Accelerate's keys (base/config_accelerate.c), and
 * acting on any value.
 *
 * Adding a config key is adding a row to key_table (and its field to
 * acx_config_t): nested YAML sections ("checkpoint.total_limit" under
 * "checkpoint:") follow from the dotted name at any depth, enum rows may
 * list extra spellings of a value ("FULL_SHARD" for full_shard), and a row
 * whose env is NULL is read from files and options only. Adding an
 * environment variable is adding an acx_env_t value and its row in
 * env_table; then `acx config doc > table` and paste into docs/config.md
 * (tests/config_doc.test fails until the two agree).
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/config_resolve.h"
#include "base/log.h"
#include "base/settings.h"
#include "base/signal_list.h"

/* ---- enum values ---- */

static const acx_enum_name_t mp_names[] = {
    {"no", ACX_MP_NO}, {"bf16", ACX_MP_BF16}, {"fp16", ACX_MP_FP16}, {NULL, 0}};
static const acx_enum_name_t shard_names[] = {{"no_shard", ACX_NO_SHARD},
                                              {"shard_grad_op", ACX_SHARD_GRAD_OP},
                                              {"full_shard", ACX_FULL_SHARD},
                                              {"hybrid_shard", ACX_HYBRID_SHARD},
                                              {NULL, 0}};
static const acx_enum_name_t level_names[] = {{"error", ACX_LOG_ERROR},  {"warn", ACX_LOG_WARN},
                                              {"info", ACX_LOG_INFO},    {"debug", ACX_LOG_DEBUG},
                                              {"warning", ACX_LOG_WARN}, {NULL, 0}};
static const acx_enum_name_t backend_names[] = {
    {"auto", ACX_BACKEND_AUTO}, {"mpi", ACX_BACKEND_MPI}, {"nccl", ACX_BACKEND_NCCL}, {NULL, 0}};
static const acx_enum_name_t device_state_names[] = {{"auto", ACX_DEVICE_STATE_AUTO},
                                                     {"host", ACX_DEVICE_STATE_HOST},
                                                     {"cuda", ACX_DEVICE_STATE_CUDA},
                                                     {"emulated", ACX_DEVICE_STATE_EMULATED},
                                                     {NULL, 0}};
static const acx_enum_name_t offload_names[] = {
    {"none", ACX_OFFLOAD_NONE}, {"cpu", ACX_OFFLOAD_CPU}, {NULL, 0}};
static const acx_enum_name_t log_with_names[] = {
    {"none", ACX_LOG_WITH_NONE}, {"jsonl", ACX_LOG_WITH_JSONL}, {NULL, 0}};
/* PyTorch FSDP's BackwardPrefetch names, lower case; BACKWARD_PRE etc. match
 * too, as every enum value matches in any case. */
static const acx_enum_name_t prefetch_names[] = {{"backward_pre", ACX_BACKWARD_PRE},
                                                 {"backward_post", ACX_BACKWARD_POST},
                                                 {"no_prefetch", ACX_BACKWARD_NONE},
                                                 {NULL, 0}};
static const acx_enum_name_t reduce_names[] = {
    {"fp32", ACX_REDUCE_FP32}, {"bf16", ACX_REDUCE_BF16}, {"fp16", ACX_REDUCE_FP16}, {NULL, 0}};
static const acx_enum_name_t resume_names[] = {
    {"no", ACX_RESUME_NO}, {"auto", ACX_RESUME_AUTO}, {NULL, 0}};
static const acx_enum_name_t existing_names[] = {{"refuse", ACX_CHECKPOINT_EXISTING_REFUSE},
                                                 {"archive", ACX_CHECKPOINT_EXISTING_ARCHIVE},
                                                 {NULL, 0}};

/* Accelerate's values acx has no counterpart for. */
static const char *const mp_unhonoured[] = {"fp8", NULL};
static const char *const trackers[] = {"tensorboard", "wandb",   "comet_ml", "aim", "mlflow",
                                       "clearml",     "dvclive", "all",      NULL};

/* ---- the config keys ---- */

#define KEY(n, e, t) .name = n, .env = e, .kind = ACX_SETTING_KEY, .type = ACX_SETTING_##t
#define FIELD(f)     .offset = offsetof(acx_config_t, f), .size = sizeof(((acx_config_t *)0)->f)
#define STRBUF(b)                                                                                  \
    .buf_offset = offsetof(acx_resolved_config_t, b),                                              \
    .buf_size = sizeof(((acx_resolved_config_t *)0)->b)
#define RANGE(l, h) .lo = (l), .hi = (h)
#define ABOVE(l)    .lo = (l), .hi = INFINITY, .lo_exclusive = 1
#define UNBOUNDED   .lo = -INFINITY, .hi = INFINITY

/* Rows of one YAML section must stay contiguous (acx_config_to_yaml opens a
 * section once). The order is the order of `acx config show`. */
static const acx_setting_t key_table[] = {
    {KEY("mixed_precision", "ACX_MIXED_PRECISION", ENUM), .names = mp_names, FIELD(mixed_precision),
     .def = "no", .unhonoured = mp_unhonoured,
     .doc = "`no`, `bf16`, `fp16`: fp32 master weights, parameters the program reads rounded to "
            "bf16/fp16 ([mixed-precision.md](mixed-precision.md))"},
    {KEY("sharding_strategy", "ACX_SHARDING_STRATEGY", ENUM), .names = shard_names,
     FIELD(sharding_strategy), .def = "no_shard",
     .doc = "`no_shard`, `shard_grad_op`, `full_shard`, `hybrid_shard` (see "
            "[sharding.md](sharding.md))"},
    {KEY("reduce_dtype", "ACX_REDUCE_DTYPE", ENUM), .names = reduce_names, FIELD(reduce_dtype),
     .def = "fp32", .note = "the dtype gradients are reduced in under mixed precision",
     .doc = "`fp32`, `bf16`, `fp16`: the dtype gradients are reduced in (16-bit halves the bytes "
            "of gradient communication on both backends; the sum is accumulated in float32 and "
            "rounded once, see [mixed-precision.md](mixed-precision.md))"},
    {KEY("gradient_accumulation_steps", "ACX_GRADIENT_ACCUMULATION_STEPS", INT), RANGE(1, INFINITY),
     FIELD(gradient_accumulation_steps), .def = "1", .doc = "≥ 1 micro-batches per optimizer step"},
    {KEY("max_steps", "ACX_MAX_STEPS", INT64), RANGE(0, INFINITY), FIELD(max_steps), .def = "0",
     .note = "0 = epoch mode; > 0 = step mode (the training loader cycles epochs)",
     .doc = "≥ 0 optimizer steps of a step-based run; `0` = epoch mode. With N > 0 the loader "
            "given to `acx_prepare` cycles (the end of an epoch is no NULL batch and no "
            "synchronization boundary: optimizer steps = micro-steps / "
            "`gradient_accumulation_steps` exactly); the program loops `while (acx_step(acc) < "
            "N)` ([user-guide.md](user-guide.md#step-based-training))"},
    {KEY("seed", "ACX_SEED", INT64), UNBOUNDED, FIELD(seed), .def = "42",
     .doc = "any; keys initialization and data order"},
    {KEY("project_dir", "ACX_PROJECT_DIR", STRING), FIELD(project_dir), STRBUF(project_dir),
     .def = ".", .doc = "where outputs go (checkpoints, metrics, weights)"},
    {KEY("log_level", "ACX_LOG_LEVEL", ENUM), .names = level_names, FIELD(log_level), .def = "warn",
     .doc = "`error`, `warn` (`warning`), `info`, `debug`. From `warn` up, rank 0 also prints a "
            "NOTE line for each checkpoint saved (file, step, size, time, what "
            "`checkpoint.total_limit` removed); `error` hides it"},
    {KEY("log_with", "ACX_LOG_WITH", ENUM), .names = log_with_names, FIELD(log_with), .def = "none",
     .unhonoured = trackers,
     .note = "acx writes metrics as JSONL; Accelerate's trackers (tensorboard, wandb, ...) are "
             "not available",
     .doc = "`none`, `jsonl` (one JSON object per logged step, main process). Accelerate's "
            "trackers (`tensorboard`, `wandb`, `comet_ml`, `aim`, `mlflow`, `clearml`, "
            "`dvclive`, `all`) are not available: an error in acx's own settings, a warning in "
            "an Accelerate file"},
    {KEY("collective_timeout", "ACX_COLLECTIVE_TIMEOUT", DOUBLE), RANGE(0, INFINITY),
     FIELD(collective_timeout), .def = "600", .note = "seconds; 0 = no stall detector", .unit = "s",
     .doc = "≥ 0: a collective not completed after this long ends the job with a diagnostic "
            "naming the op, the step and the ranks of the node that did not arrive (exit status "
            "76); a collective that is merely slow ends the job too, so keep it far above the "
            "longest legitimate wait (values below a second end healthy jobs); `0` turns the "
            "detector off"},
    {KEY("bucket_size_mb", "ACX_BUCKET_SIZE_MB", DOUBLE), ABOVE(0), FIELD(bucket_size_mb),
     .def = "25", .unit = "MiB",
     .doc = "> 0; gradient fusion bucket size (NO_SHARD; the sharded strategies reduce-scatter "
            "one unit at a time)"},
    {KEY("backend", "ACX_BACKEND", ENUM), .names = backend_names, FIELD(backend), .def = "auto",
     .doc = "`auto`, `mpi`, `nccl` (CUDA/NCCL builds with a GPU; needs device-resident state, "
            "every `sharding_strategy`; with `device_state: emulated` it is the NCCL backend's "
            "CPU test double, for testing only, "
            "[gpu.md](gpu.md#the-nccl-test-double-nccl-emulated)). `auto` = `nccl` when NCCL is "
            "built, a GPU is visible and `device_state` is `cuda`; else `mpi` (logged with the "
            "reason)"},
    {KEY("device_state", "ACX_DEVICE_STATE", ENUM), .names = device_state_names,
     FIELD(device_state), .def = "auto",
     .note = "auto = cuda with backend nccl, else host; emulated = a CPU test double of the "
             "device path, for testing without a GPU",
     .doc = "where parameters, gradients and optimizer state live: `host`, `cuda` (device "
            "memory, every `sharding_strategy`; with `backend: mpi` each rank binds local rank "
            "modulo the visible GPUs and the collectives stage through pinned memory), `auto` "
            "(= `cuda` with `backend: nccl`, else `host`), `emulated` — **for testing only**: a "
            "CPU test double of the device path whose memory host code cannot touch, to run the "
            "device code in CI without a GPU; with `backend: nccl` the collectives run on the "
            "NCCL backend's test double ([gpu.md](gpu.md))"},
    {KEY("offload_optimizer", "ACX_OFFLOAD_OPTIMIZER", ENUM), .names = offload_names,
     FIELD(offload_optimizer), .def = "none",
     .note = "cpu = fp32 master weights and optimizer state in host memory, the step on the CPU "
             "(needs device_state cuda or emulated, sharding_strategy no_shard)",
     .doc = "`cpu`: the fp32 master weights and the optimizer state live in host memory (pinned) "
            "and the optimizer step runs on the CPU, while the parameters the program computes "
            "with and the gradients stay in device memory (ZeRO-Offload; Accelerate's "
            "`fsdp_offload_params`). With host state (`device_state: host`) everything is in "
            "host memory already and the setting changes nothing (logged); with device state it "
            "needs `sharding_strategy: no_shard` in this version, otherwise `acx_prepare` fails "
            "naming the key ([gpu.md](gpu.md#cpu-offload-of-the-optimizer)). `nvme` is not "
            "accepted"},
    {KEY("ranks_per_node", "ACX_RANKS_PER_NODE", INT), RANGE(0, INFINITY), FIELD(ranks_per_node),
     .def = "0", .note = "0 = the real nodes",
     .doc = "≥ 0: treat every N consecutive ranks as one node; `0` = the real nodes "
            "([below](#sharding-keys))"},
    {KEY("checkpoint.total_limit", "ACX_CHECKPOINT_TOTAL_LIMIT", INT), RANGE(0, INFINITY),
     FIELD(checkpoint.total_limit), .def = "0",
     .doc = "≥ 0: keep the newest K checkpoints; `0` keeps all"},
    {KEY("checkpoint.save_every_steps", "ACX_CHECKPOINT_SAVE_EVERY_STEPS", INT64),
     RANGE(0, INFINITY), FIELD(checkpoint.save_every_steps), .def = "0",
     .doc = "≥ 0: save every N optimizer steps; `0` = off"},
    {KEY("checkpoint.allow_unverified", "ACX_CHECKPOINT_ALLOW_UNVERIFIED", BOOL),
     FIELD(checkpoint_allow_unverified), .def = "false",
     .note = "true = load checkpoint data that carries no checksum (loudly); false refuses it",
     .doc = "`true`: load checkpoint datasets that carry no checksum (no CRC-32 attributes, no "
            "Fletcher-32 filter: attributes deleted, or a file not written by acx), with a loud "
            "warning per dataset; `false` refuses them. Damage found by a checksum is refused "
            "either way"},
    {KEY("checkpoint.existing", "ACX_CHECKPOINT_EXISTING", ENUM), .names = existing_names,
     FIELD(checkpoint_existing), .def = "refuse",
     .note = "what acx_prepare does when project_dir holds checkpoints and the run does not "
             "resume: refuse, or archive them into checkpoints/archived-<time>/",
     .doc = "what `acx_prepare` does when `project_dir` holds checkpoints and the run does not "
            "resume: `refuse` (an error naming the newest and the choices), `archive` (move them "
            "into `checkpoints/archived-<time>/` and start over; nothing is deleted) "
            "([checkpoint-format.md](checkpoint-format.md#the-project-directory-one-writer-"
            "nothing-replaced))"},
    {KEY("checkpoint.timeout", "ACX_CHECKPOINT_TIMEOUT", DOUBLE), ABOVE(0),
     FIELD(checkpoint_timeout), .def = "1800", .unit = "s",
     .note = "seconds; the stall detector's limit for a checkpoint save or load, file I/O "
             "included (off with collective_timeout 0)",
     .doc = "> 0: the stall detector's limit for a whole checkpoint save or load "
            "(`acx_save_state`, `acx_load_state`, their agreements and the collective HDF5 I/O "
            "inside), a weights file and a dataset open: past it the job ends like a stalled "
            "collective (exit status 76), naming the ranks that did not arrive; only in force "
            "while the detector is on (`collective_timeout` > 0). Keep it above the longest "
            "legitimate save on your file system"},
    {KEY("resume", "ACX_RESUME", ENUM), .names = resume_names, FIELD(resume), .def = "no",
     .note = "auto = load <project_dir>/checkpoints/latest at acx_prepare when it exists",
     .doc = "`no`, `auto`: at `acx_prepare`, load `<project_dir>/checkpoints/latest` when it "
            "exists ([slurm.md](slurm.md))"},
    {KEY("resume_from", "ACX_RESUME_FROM", STRING), FIELD(resume_from), STRBUF(resume_from),
     .def = "none",
     .note = "latest, a checkpoint file or directory, loaded at acx_prepare; none = do not",
     .doc = "load this checkpoint at `acx_prepare`: `latest` (the project's newest), a "
            "checkpoint file, or a checkpoints directory (its `latest`); `none` = do not (a file "
            "named `none`: `./none`). Set it instead of calling `acx_load_state` after "
            "`acx_prepare` when the run writes a `project_dir` that holds checkpoints; register "
            "state with `acx_register_for_checkpointing` before `acx_prepare`. Wins over "
            "`resume: auto`"},
    {KEY("preemption.signals", "ACX_PREEMPTION_SIGNALS", STRING), FIELD(preemption.signals),
     STRBUF(preemption_signals), .def = "USR1,TERM",
     .note = "comma-separated signal names (USR1, USR2, TERM, INT, HUP, XCPU), or none",
     .doc = "comma-separated signal names among `USR1`, `USR2`, `TERM`, `INT`, `HUP`, `XCPU` "
            "(`SIG` prefix and case optional), or `none`: each stops the job at the next step "
            "boundary with a checkpoint ([slurm.md](slurm.md)); names are checked wherever the "
            "value comes from, so `acx config show` and `acx slurm sbatch` refuse a bad one as "
            "`acx_init` would"},
    {KEY("preemption.requeue", "ACX_PREEMPTION_REQUEUE", BOOL), FIELD(preemption.requeue),
     .def = "false",
     .doc = "`true`: inside a Slurm job, requeue it (`scontrol requeue`) once the preemption "
            "checkpoint is saved"},
    {KEY("dataloader.drop_last", "ACX_DATALOADER_DROP_LAST", BOOL), FIELD(dataloader.drop_last),
     .def = "false", .doc = "`true`: drop the last incomplete global batch"},
    {KEY("dataloader.even_batches", "ACX_DATALOADER_EVEN_BATCHES", BOOL),
     FIELD(dataloader.even_batches), .def = "true",
     .doc = "`true`: pad the last batches so that every rank gets as many"},
    {KEY("dataloader.split_batches", "ACX_DATALOADER_SPLIT_BATCHES", BOOL),
     FIELD(dataloader.split_batches), .def = "false",
     .doc = "`true`: the loader's batch size is the global batch, split across the ranks"},
    {KEY("dataloader.prefetch", "ACX_DATALOADER_PREFETCH", INT), RANGE(0, INFINITY),
     FIELD(dataloader.prefetch), .def = "1",
     .doc = "≥ 0 batches read ahead by a background thread"},
    {KEY("fsdp.forward_prefetch", "ACX_FSDP_FORWARD_PREFETCH", BOOL), FIELD(fsdp.forward_prefetch),
     .def = "false",
     .doc = "`true`: start unit i+1's all-gather when unit i is acquired in the forward pass "
            "([below](#sharding-keys))"},
    {KEY("fsdp.backward_prefetch", "ACX_FSDP_BACKWARD_PREFETCH", ENUM), .names = prefetch_names,
     FIELD(fsdp.backward_prefetch), .def = "backward_pre",
     .doc = "`backward_pre`, `backward_post`, `no_prefetch` (also FSDP's `BACKWARD_PRE`, "
            "`BACKWARD_POST`, `NO_PREFETCH`: any case)"},
    /* PyTorch's limit_all_gathers is a bool; acx's is the cap itself, and
     * an Accelerate file's true/false maps onto it (ah_fsdp_limit). */
    {KEY("fsdp.limit_all_gathers", "ACX_FSDP_LIMIT_ALL_GATHERS", INT), RANGE(0, INFINITY),
     FIELD(fsdp.limit_all_gathers), .def = "2",
     .note = "0 = no cap; PyTorch's limit_all_gathers=True is 2, False is 0",
     .doc = "≥ 0 units gathered at once; `0` = no cap"},
    {KEY("loss_scale.init", "ACX_LOSS_SCALE_INIT", DOUBLE), ABOVE(0), FIELD(loss_scale.init),
     .def = "65536", .doc = "> 0: the first fp16 loss scale (2^16, as torch's GradScaler)"},
    {KEY("loss_scale.growth_interval", "ACX_LOSS_SCALE_GROWTH_INTERVAL", INT), RANGE(1, INFINITY),
     FIELD(loss_scale.growth_interval), .def = "2000",
     .doc = "≥ 1 clean steps in a row before the scale doubles"},
    {KEY("loss_scale.min", "ACX_LOSS_SCALE_MIN", DOUBLE), RANGE(0, INFINITY), FIELD(loss_scale.min),
     .def = "1", .doc = "≥ 0: the run stops when the scale would fall below it"},
    {KEY("loss_scale.max_consecutive_skips", "ACX_LOSS_SCALE_MAX_CONSECUTIVE_SKIPS", INT),
     RANGE(1, INFINITY), FIELD(loss_scale.max_consecutive_skips), .def = "20",
     .doc = "≥ 1: the run stops after this many skipped steps in a row"},
};

#define NUM_KEYS ((int)(sizeof key_table / sizeof key_table[0]))
_Static_assert(sizeof key_table / sizeof key_table[0] <= ACX_CONFIG_MAX_KEYS,
               "raise ACX_CONFIG_MAX_KEYS in config_resolve.h");

/* ---- launch information ----
 *
 * Read from a config file only (an Accelerate file's keys of the same
 * names), never from the environment or the program, and never acted on
 * by acx_init. Offsets are into acx_config_info_t; a STRING row's field is
 * a char array there. */

#define INFO(n, t) .name = n, .kind = ACX_SETTING_INFO, .type = ACX_SETTING_##t
#define INFO_FIELD(f)                                                                              \
    .offset = offsetof(acx_config_info_t, f), .size = sizeof(((acx_config_info_t *)0)->f)
#define INFO_STRBUF(f) .buf_size = sizeof(((acx_config_info_t *)0)->f)

static const acx_setting_t info_table[] = {
    {INFO("num_processes", INT), RANGE(1, INFINITY), INFO_FIELD(num_processes),
     .doc = "ranks of the whole job; `acx launch` starts this many when `-n` is not given, and a "
            "different count from the launcher is a warning at start-up"},
    {INFO("num_machines", INT), RANGE(1, INFINITY), INFO_FIELD(num_machines),
     .doc = "nodes of the job"},
    {INFO("machine_rank", INT), RANGE(0, INFINITY), INFO_FIELD(machine_rank),
     .doc = "this node's index, below `num_machines`"},
    {INFO("main_process_ip", STRING), INFO_FIELD(main_process_ip), INFO_STRBUF(main_process_ip),
     .doc = "the address of the main process's node"},
    {INFO("main_process_port", INT), RANGE(0, 65535), INFO_FIELD(main_process_port),
     .doc = "the port of the main process"},
};

#define NUM_INFO ((int)(sizeof info_table / sizeof info_table[0]))
_Static_assert(sizeof info_table / sizeof info_table[0] <= ACX_CONFIG_MAX_INFO,
               "raise ACX_CONFIG_MAX_INFO in config_resolve.h");

/* ---- environment-only variables and test hooks ---- */

#define ENV(e, t)  .env = e, .kind = ACX_SETTING_ENV, .type = ACX_SETTING_##t
#define TEST(e, t) .env = e, .kind = ACX_SETTING_TEST, .type = ACX_SETTING_##t

static const acx_setting_t env_table[ACX_ENV_COUNT] = {
    [ACX_ENV_CONFIG_FILE] =
        {ENV("ACX_CONFIG_FILE", STRING),
         .doc = "the config file when neither the program nor `--config` names one "
                "([above](#where-values-come-from))"},
    [ACX_ENV_LOG_SUBSYS] =
        {ENV("ACX_LOG_SUBSYS", STRING), .def = "all",
         .doc = "the subsystems whose lines are logged: a comma-separated list of `init`, `coll`, "
                "`shard`, `io`, `data`, `launch`, `optim`, or `all`, or `^list` to exclude some "
                "(errors are logged whatever the list)"},
    [ACX_ENV_LOG_FILE] =
        {ENV("ACX_LOG_FILE", STRING),
         .doc = "log to this file instead of standard error: `%h` is the host, `%p` the pid, `%r` "
                "the rank (a pattern with `%r` logs to standard error until the rank is known)"},
    [ACX_ENV_DEBUG_MODE] =
        {ENV("ACX_DEBUG_MODE", BOOL), .def = "false",
         .doc =
             "`true`: before each public collective and each sharded unit's all-gather or "
             "reduce-scatter, every rank checks that all ranks call the same op with the same "
             "count and dtype (and unit), and reports each rank's call site otherwise "
             "([user-guide.md](user-guide.md#debugging-collectives-acx_debug_mode)); Accelerate's "
             "`debug`"},
    [ACX_ENV_SHM_DISABLE] =
        {ENV("ACX_SHM_DISABLE", FLAG), .def = "0",
         .doc =
             "`1`: the MPI backend never uses the node's shared-memory segment, every collective "
             "goes through MPI ([collectives.md](collectives.md))"},
    [ACX_ENV_SHM_SLOT_BYTES] =
        {ENV("ACX_SHM_SLOT_BYTES", BYTES), RANGE(64, 1099511627776.0), .multiple = 64,
         .doc =
             "bytes of each rank's slot of the shared-memory segment, i.e. of one round (default "
             "1048576 up to 8 ranks, then 8 MiB / ranks, at least 131072)"},
    [ACX_ENV_SHM_MIN_BYTES] =
        {ENV("ACX_SHM_MIN_BYTES", BYTES), RANGE(0, 1099511627776.0), .def = "0",
         .doc = "the smallest collective routed through the shared-memory segment, in bytes of its "
                "largest buffer; `0`: all"},
    [ACX_ENV_DEVICE_CACHE_DISABLE] =
        {ENV("ACX_DEVICE_CACHE_DISABLE", FLAG), .def = "0",
         .doc = "`1`: device memory is allocated and freed at once, without the per-process cache "
                "of freed blocks ([memory.md](memory.md))"},
    [ACX_ENV_TEST_BUCKETS_MAX_IN_FLIGHT] =
        {TEST("ACX_TEST_BUCKETS_MAX_IN_FLIGHT", INT), RANGE(1, 1 << 20),
         .doc = "gradient buckets reduced at once (benchmarks/run-shard-mem.sh compares limits)"},
    [ACX_ENV_TEST_WATCHDOG_NODE_RANKS] =
        {TEST("ACX_TEST_WATCHDOG_NODE_RANKS", INT), RANGE(1, INFINITY),
         .doc = "the stall detector's node tables hold this many consecutive ranks, as if a node "
                "held only them (stall_stopped.test)"},
    [ACX_ENV_TEST_SHM_NO_ARGS_CHECK] =
        {TEST("ACX_TEST_SHM_NO_ARGS_CHECK", FLAG), .def = "0",
         .doc = "`1`: the shared-memory collectives skip their argument check (to measure its "
                "cost)"},
    [ACX_ENV_TEST_CKPT_CRC_BLOCK] =
        {TEST("ACX_TEST_CKPT_CRC_BLOCK", INT64), RANGE(1, INFINITY),
         .doc = "the checkpoint checksum block in bytes, instead of the minimum (small files with "
                "many blocks)"},
    [ACX_ENV_TEST_CKPT_OLD_METADATA] =
        {TEST("ACX_TEST_CKPT_OLD_METADATA", FLAG), .def = "0",
         .doc = "`1`: checkpoints in HDF5's earliest formats, without metadata checksums "
                "(benchmarks only: docs/benchmarks.md)"},
    [ACX_ENV_TEST_PREEMPT_RAISE_AT_INIT] =
        {TEST("ACX_TEST_PREEMPT_RAISE_AT_INIT", STRING),
         .doc = "signals (as preemption.signals) raised once the handlers are installed"},
    [ACX_ENV_TEST_FINALIZE_STOP_RANK] =
        {TEST("ACX_TEST_FINALIZE_STOP_RANK", INT), RANGE(0, INFINITY),
         .doc = "this rank stops (SIGSTOP) past the watched part of acx_finalize "
                "(stall_stopped.test)"},
    [ACX_ENV_TEST_WATCHDOG_NO_TABLE_RANK] =
        {TEST("ACX_TEST_WATCHDOG_NO_TABLE_RANK", INT), RANGE(0, INFINITY),
         .doc = "this rank acts as if the stall detector's table of host names could not be "
                "allocated (stall.test)"},
};

/* ---- looking rows up ---- */

int acx_config_num_keys(void) { return NUM_KEYS; }

const acx_setting_t *acx_config_key(int i) {
    return (i >= 0 && i < NUM_KEYS) ? &key_table[i] : NULL;
}

const char *acx_config_key_name(int i) {
    return (i >= 0 && i < NUM_KEYS) ? key_table[i].name : NULL;
}

int acx_config_key_index(const char *name) {
    for (int i = 0; name != NULL && i < NUM_KEYS; i++)
        if (strcmp(key_table[i].name, name) == 0) return i;
    return -1;
}

int acx_config_is_section(const char *name) {
    size_t n = strlen(name);
    for (int i = 0; i < NUM_KEYS; i++)
        if (strncmp(key_table[i].name, name, n) == 0 && key_table[i].name[n] == '.') return 1;
    return 0;
}

/* Whether an option's key names table key `name`: '-', '_' and '.' are
 * alike and case does not matter. */
static int option_key_equal(const char *name, const char *given) {
    for (;; name++, given++) {
        char a = *name, b = *given;
        if (a == '-' || a == '.') a = '_';
        if (b == '-' || b == '.') b = '_';
        if (tolower((unsigned char)a) != tolower((unsigned char)b)) return 0;
        if (a == '\0') return 1;
    }
}

int acx_config_option_index(const char *given) {
    for (int i = 0; i < NUM_KEYS; i++)
        if (option_key_equal(key_table[i].name, given)) return i;
    return -1;
}

int acx_config_num_info(void) { return NUM_INFO; }

const acx_setting_t *acx_config_info(int i) {
    return (i >= 0 && i < NUM_INFO) ? &info_table[i] : NULL;
}

const char *acx_config_info_name(int i) {
    return (i >= 0 && i < NUM_INFO) ? info_table[i].name : NULL;
}

int acx_config_info_index(const char *name) {
    for (int i = 0; i < NUM_INFO; i++)
        if (strcmp(info_table[i].name, name) == 0) return i;
    return -1;
}

const char *acx_setting_enum_name(const acx_enum_name_t *names, int value) {
    for (const acx_enum_name_t *e = names; e != NULL && e->name != NULL; e++)
        if (e->value == value) return e->name;
    return "invalid";
}

const char *acx_sharding_strategy_name(int s) { return acx_setting_enum_name(shard_names, s); }
const char *acx_mixed_precision_name(int mp) { return acx_setting_enum_name(mp_names, mp); }
const char *acx_backend_name(int b) { return acx_setting_enum_name(backend_names, b); }
const char *acx_device_state_name(int d) { return acx_setting_enum_name(device_state_names, d); }
const char *acx_offload_optimizer_name(int o) { return acx_setting_enum_name(offload_names, o); }
const char *acx_log_with_name(int w) { return acx_setting_enum_name(log_with_names, w); }
const char *acx_backward_prefetch_name(int p) { return acx_setting_enum_name(prefetch_names, p); }
const char *acx_resume_name(int r) { return acx_setting_enum_name(resume_names, r); }

/* ---- values: parsing, checking, describing ---- */

/* STRING rows whose text has a syntax of its own, checked with the value
 * so that every source (file, environment, option, program) and `acx
 * config show` refuse a bad one alike; the row's note says what is
 * expected. */
static int signal_list_valid(const char *text) {
    int mask;
    return acx_signal_list_parse(text, &mask, NULL, 0) == 0;
}

static const struct {
    const char *key;
    int (*valid)(const char *text); /* 1 = valid */
} text_checks[] = {{"preemption.signals", signal_list_valid}};

static int (*text_check(const acx_setting_t *s))(const char *) {
    for (size_t i = 0; s->name != NULL && i < sizeof text_checks / sizeof text_checks[0]; i++)
        if (strcmp(text_checks[i].key, s->name) == 0) return text_checks[i].valid;
    return NULL;
}

/* "2^40" for a large power of two, else the number. */
static void format_bound(double x, char *buf, size_t n) {
    int e;
    if (x >= 1048576.0 && frexp(x, &e) == 0.5)
        snprintf(buf, n, "2^%d", e - 1);
    else
        snprintf(buf, n, "%.0f", x);
}

static void describe_type(const acx_setting_t *s, char *buf, size_t n) {
    size_t o = 0;
    buf[0] = '\0';
    switch (s->type) {
    case ACX_SETTING_BOOL: snprintf(buf, n, "true or false (also yes/no, on/off, 1/0)"); return;
    case ACX_SETTING_FLAG: snprintf(buf, n, "1 or 0"); return;
    case ACX_SETTING_STRING:
        if (s->buf_size == 0)
            snprintf(buf, n, "a non-empty string");
        else if (text_check(s) != NULL && s->note != NULL) /* the note says it all */
            snprintf(buf, n, "a value of %zu bytes at most", s->buf_size - 1);
        else
            snprintf(buf, n, "a non-empty string of at most %zu bytes", s->buf_size - 1);
        return;
    case ACX_SETTING_ENUM:
        o = (size_t)snprintf(buf, n, "one of:");
        for (const acx_enum_name_t *e = s->names; e->name != NULL && o < n; e++)
            if (strcmp(acx_setting_enum_name(s->names, e->value), e->name) == 0)
                o += (size_t)snprintf(buf + o, n - o, "%s %s", e == s->names ? "" : ",", e->name);
        return;
    case ACX_SETTING_BYTES: {
        char lo[32], hi[32];
        format_bound(s->lo, lo, sizeof lo);
        format_bound(s->hi, hi, sizeof hi);
        if (s->multiple > 0)
            snprintf(buf, n, "a byte count that is a multiple of %llu, from %s to %s", s->multiple,
                     lo, hi);
        else
            snprintf(buf, n, "a byte count, from %s to %s", lo, hi);
        return;
    }
    case ACX_SETTING_INT:
    case ACX_SETTING_INT64:
    case ACX_SETTING_DOUBLE: {
        const char *what = s->type == ACX_SETTING_DOUBLE ? "a number" : "an integer";
        int has_lo = isfinite(s->lo), has_hi = isfinite(s->hi);
        if (has_lo && has_hi)
            snprintf(buf, n, "%s between %g and %g", what, s->lo, s->hi);
        else if (has_lo)
            snprintf(buf, n, "%s %s %g", what, s->lo_exclusive ? ">" : ">=", s->lo);
        else if (has_hi)
            snprintf(buf, n, "%s <= %g", what, s->hi);
        else
            snprintf(buf, n, "%s", what);
        return;
    }
    }
}

void acx_setting_describe(const acx_setting_t *s, char *buf, size_t n) {
    if (buf == NULL || n == 0) return;
    describe_type(s, buf, n);
    size_t o = strlen(buf);
    if (s->note != NULL && o < n) snprintf(buf + o, n - o, "; %s", s->note);
}

int acx_setting_check(const acx_setting_t *s, const acx_setting_value_t *v) {
    switch (s->type) {
    case ACX_SETTING_BOOL:
    case ACX_SETTING_FLAG: return v->i == 0 || v->i == 1;
    case ACX_SETTING_ENUM:
        for (const acx_enum_name_t *e = s->names; e->name != NULL; e++)
            if (e->value == v->i) return 1;
        return 0;
    case ACX_SETTING_INT:
        if (v->i < INT_MIN || v->i > INT_MAX) return 0;
        /* fall through */
    case ACX_SETTING_INT64:
    case ACX_SETTING_BYTES:
        if (s->lo_exclusive ? !((double)v->i > s->lo) : !((double)v->i >= s->lo)) return 0;
        if (s->type == ACX_SETTING_BYTES && s->multiple > 0 &&
            (unsigned long long)v->i % s->multiple != 0)
            return 0;
        return (double)v->i <= s->hi;
    case ACX_SETTING_DOUBLE:
        if (!isfinite(v->d)) return 0;
        if (s->lo_exclusive ? !(v->d > s->lo) : !(v->d >= s->lo)) return 0;
        return v->d <= s->hi;
    case ACX_SETTING_STRING:
        return v->s != NULL && v->s[0] != '\0' &&
               (s->buf_size == 0 || strlen(v->s) < s->buf_size) &&
               (text_check(s) == NULL || text_check(s)(v->s));
    }
    return 0;
}

int acx_setting_trim(const char *text, char *buf, size_t n) {
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

int acx_setting_parse(const acx_setting_t *s, const char *text, acx_setting_value_t *v) {
    char *end;
    memset(v, 0, sizeof *v);
    switch (s->type) {
    case ACX_SETTING_BOOL: {
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
    case ACX_SETTING_FLAG:
        if (strcmp(text, "1") != 0 && strcmp(text, "0") != 0) return 0;
        v->i = text[0] == '1';
        return 1;
    case ACX_SETTING_ENUM:
        for (const acx_enum_name_t *e = s->names; e->name != NULL; e++)
            if (strcasecmp(text, e->name) == 0) {
                v->i = e->value;
                return 1;
            }
        return 0;
    case ACX_SETTING_INT:
    case ACX_SETTING_INT64: {
        if (text[0] == '\0') return 0;
        errno = 0;
        long long x = strtoll(text, &end, 10);
        if (errno != 0 || *end != '\0') return 0;
        v->i = (int64_t)x;
        break;
    }
    case ACX_SETTING_BYTES: {
        /* digits only: strtoull would take "-64" as a huge count */
        if (text[0] < '0' || text[0] > '9') return 0;
        errno = 0;
        unsigned long long x = strtoull(text, &end, 10);
        if (errno != 0 || *end != '\0' || x > (unsigned long long)INT64_MAX) return 0;
        v->i = (int64_t)x;
        break;
    }
    case ACX_SETTING_DOUBLE:
        if (text[0] == '\0') return 0;
        errno = 0;
        v->d = strtod(text, &end);
        if (errno == ERANGE || *end != '\0') return 0;
        break;
    case ACX_SETTING_STRING: v->s = text; break;
    }
    return acx_setting_check(s, v);
}

/* ---- environment-only variables ---- */

const acx_setting_t *acx_env_setting(acx_env_t id) {
    return ((int)id >= 0 && id < ACX_ENV_COUNT) ? &env_table[id] : NULL;
}

const char *acx_env_name(acx_env_t id) {
    const acx_setting_t *s = acx_env_setting(id);
    return s != NULL ? s->env : "";
}

const char *acx_env_text(acx_env_t id) {
    const acx_setting_t *s = acx_env_setting(id);
    const char *v = s != NULL ? getenv(s->env) : NULL;
    return v != NULL && v[0] != '\0' ? v : NULL;
}

/* The variable parsed as its row says: 0 unset, 1 valid, -1 invalid. */
static int env_value(acx_env_t id, acx_setting_value_t *v) {
    const char *text = acx_env_text(id);
    if (text == NULL) return 0;
    return acx_setting_parse(&env_table[id], text, v) ? 1 : -1;
}

/* The row's default into v, or zero. */
static void env_default(acx_env_t id, acx_setting_value_t *v) {
    memset(v, 0, sizeof *v);
    if (env_table[id].def != NULL && !acx_setting_parse(&env_table[id], env_table[id].def, v))
        memset(v, 0, sizeof *v);
}

int acx_env_flag(acx_env_t id, int *on_p) {
    acx_setting_value_t v;
    if (acx_env_setting(id) == NULL) return -1;
    int r = env_value(id, &v);
    if (r != 1) env_default(id, &v);
    *on_p = (int)v.i;
    return r;
}

int acx_env_int(acx_env_t id, int64_t *v_p) {
    acx_setting_value_t v;
    if (acx_env_setting(id) == NULL) return -1;
    int r = env_value(id, &v);
    if (r != 1) env_default(id, &v);
    *v_p = v.i;
    return r;
}

/* ---- unknown names ---- */

/* Levenshtein distance, capped inputs (names are short). */
static int edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 127 || lb > 127) return 1000;
    int row[128];
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

void acx_name_match_init(acx_name_match_t *m) {
    m->best = NULL;
    m->distance = 1000;
}

void acx_name_match_offer(acx_name_match_t *m, const char *name, const char *candidate) {
    int d = edit_distance(name, candidate);
    if (d < m->distance) {
        m->distance = d;
        m->best = candidate;
    }
}

const char *acx_name_match_result(const acx_name_match_t *m, size_t significant) {
    int limit = (int)(significant / 3);
    if (limit < 2) limit = 2;
    return m->best != NULL && m->distance <= limit ? m->best : NULL;
}

void acx_config_offer_keys(acx_name_match_t *m, const char *name) {
    for (int i = 0; i < NUM_KEYS; i++)
        acx_name_match_offer(m, name, key_table[i].name);
}

int acx_env_unknown(const char *name, char *hint, size_t n) {
    if (n > 0) hint[0] = '\0';
    if (strncmp(name, "ACX_", 4) != 0 || strncmp(name, "ACX_TEST_", 9) == 0) return 0;
    acx_name_match_t m;
    acx_name_match_init(&m);
    for (int i = 0; i < NUM_KEYS; i++) {
        if (key_table[i].env == NULL) continue;
        if (strcmp(name, key_table[i].env) == 0) return 0;
        acx_name_match_offer(&m, name, key_table[i].env);
    }
    for (int i = 0; i < ACX_ENV_COUNT; i++) {
        if (strcmp(name, env_table[i].env) == 0) return 0;
        if (env_table[i].kind != ACX_SETTING_TEST) acx_name_match_offer(&m, name, env_table[i].env);
    }
    const char *best = acx_name_match_result(&m, strlen(name) - 4);
    if (best != NULL && n > 0) snprintf(hint, n, "%s", best);
    return 1;
}

extern char **environ;

int acx_env_next_unknown(int *pos, char *name, size_t n, char *hint, size_t hn) {
    if (environ == NULL) return 0;
    for (char **e = environ + *pos; *e != NULL; e++) {
        size_t len = strcspn(*e, "=");
        (*pos)++;
        if (len >= n) continue;
        memcpy(name, *e, len);
        name[len] = '\0';
        if (acx_env_unknown(name, hint, hn)) return 1;
    }
    return 0;
}

void acx_env_warn_unknown(void) {
    char name[128], hint[128];
    for (int pos = 0; acx_env_next_unknown(&pos, name, sizeof name, hint, sizeof hint);)
        ACX_WARN(ACX_SUBSYS_INIT, "ignoring environment variable %s: not an acx setting%s%s%s",
                 name, hint[0] ? " (did you mean " : "", hint,
                 hint[0] ? "?)" : " (see docs/config.md)");
}

/* ---- documentation ---- */

static const char *type_label(const acx_setting_t *s) {
    switch (s->type) {
    case ACX_SETTING_BOOL: return "bool";
    case ACX_SETTING_FLAG: return "1/0";
    case ACX_SETTING_INT: return "int";
    case ACX_SETTING_INT64: return "int64";
    case ACX_SETTING_DOUBLE: return "float";
    case ACX_SETTING_ENUM: return "enum";
    case ACX_SETTING_STRING: return "string";
    case ACX_SETTING_BYTES: return "bytes";
    }
    return "?";
}

/* "float (s)", "int". */
static void doc_type(const acx_setting_t *s, char *buf, size_t n) {
    if (s->unit != NULL)
        snprintf(buf, n, "%s (%s)", type_label(s), s->unit);
    else
        snprintf(buf, n, "%s", type_label(s));
}

/* "`600`", or "—" without a default. */
static void doc_default(const acx_setting_t *s, char *buf, size_t n) {
    if (s->def != NULL)
        snprintf(buf, n, "`%s`", s->def);
    else
        snprintf(buf, n, "—");
}

int acx_settings_write_doc(FILE *f) {
    char type[32], def[64];
    fprintf(f, "| key | environment | type | default | accepted values |\n"
               "| --- | --- | --- | --- | --- |\n");
    for (int i = 0; i < NUM_KEYS; i++) {
        const acx_setting_t *s = &key_table[i];
        doc_type(s, type, sizeof type);
        doc_default(s, def, sizeof def);
        fprintf(f, "| `%s` | `%s` | %s | %s | %s |\n", s->name, s->env ? s->env : "—", type, def,
                s->doc);
    }
    fprintf(f, "\nLaunch information (config files only, read-only: "
               "[below](#launch-information)):\n\n"
               "| key | type | accepted values |\n"
               "| --- | --- | --- |\n");
    for (int i = 0; i < NUM_INFO; i++) {
        const acx_setting_t *s = &info_table[i];
        char accepted[128];
        describe_type(s, accepted, sizeof accepted);
        fprintf(f, "| `%s` | %s | %s: %s |\n", s->name, type_label(s), accepted, s->doc);
    }
    fprintf(f, "\nEnvironment variables that are not config keys (read by the ranks; every "
               "`ACX_*` variable that is neither these nor a key's is warned about at start-up "
               "as a likely typo):\n\n"
               "| variable | type | default | meaning |\n"
               "| --- | --- | --- | --- |\n");
    for (int i = 0; i < ACX_ENV_COUNT; i++) {
        const acx_setting_t *s = &env_table[i];
        if (s->kind == ACX_SETTING_TEST) continue;
        doc_type(s, type, sizeof type);
        doc_default(s, def, sizeof def);
        char accepted[160] = "";
        if (s->type == ACX_SETTING_BYTES) {
            describe_type(s, accepted, sizeof accepted);
            accepted[0] = (char)toupper((unsigned char)accepted[0]);
        }
        fprintf(f, "| `%s` | %s | %s | %s%s%s |\n", s->env, type, def, s->doc,
                accepted[0] ? ". " : "", accepted);
    }
    return ferror(f) ? -1 : 0;
}

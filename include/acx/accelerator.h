/*
 * acx/accelerator.h — process lifecycle, topology, the training-step
 * boundaries and main-process helpers.
 *
 * One accelerator per process. Every function marked "collective" must be
 * called by every rank of the world, in the same order.
 */
#ifndef ACX_ACCELERATOR_H
#define ACX_ACCELERATOR_H

#include "acx/config.h"
#include "acx/status.h"
#include "acx/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- lifecycle ---- */

/* Start acx: initialize MPI with MPI_Init_thread (or adopt an MPI the program
 * already initialized, whose finalization then stays the program's), find
 * rank, world size, local rank/size (MPI_Comm_split_type SHARED) and nodes,
 * resolve the configuration (see acx/config.h), check the launch environment
 * (N singletons started by srun without PMIx is an error), choose the
 * collective backend, install the preemption.signals handlers (below) and
 * log the decisions.
 *
 * argc/argv: may be NULL. acx removes its own options from them: --config
 * FILE, --config=FILE, --debug (= --acx-log_level=debug: every decision made
 * at init is logged) and --acx-KEY=VALUE / --acx-KEY VALUE (any config key,
 * '.' or '-' or '_' separated, e.g. --acx-dataloader.drop_last=1, applied
 * above the environment). Options after "--" are left alone. argv keeps its
 * terminating NULL.
 * config: the program's choices (ACX_CONFIG_DEFAULT for none), or NULL.
 * Collective over MPI_COMM_WORLD. On success *acc_p owns the accelerator.
 * Errors: ACX_ERR_INVALID_CONFIG (message names file:line, key, value and
 * what was expected), ACX_ERR_MPI, ACX_ERR_STATE (singletons), ACX_ERR_NO_MEMORY. */
ACX_API acx_status_t acx_init(int *argc, char ***argv, const acx_config_t *config,
                              acx_accelerator_t **acc_p);

/* Tear down: waits for outstanding communication, frees everything the
 * accelerator owns (models, optimizers, loaders still open), and calls
 * MPI_Finalize if acx_init called MPI_Init_thread. Collective. NULL is a no-op. */
ACX_API acx_status_t acx_finalize(acx_accelerator_t *acc);

/* The only fatal path: log `message` (may be NULL) with this rank's identity,
 * abort live backend communicators and call MPI_Abort(MPI_COMM_WORLD, code).
 * Does not return. Not collective: any one rank may call it. acc may be NULL. */
ACX_API void acx_abort(acx_accelerator_t *acc, int code, const char *message);

/* ---- topology (valid after acx_init; never fail) ----
 *
 * A node is the set of ranks MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)
 * groups: with Open MPI, the ranks it placed on one host (by host name),
 * whatever the ranks' order. Nodes are numbered 0..num_nodes-1 in the order
 * of their lowest world rank; local ranks follow world rank order within a
 * node (mpirun --map-by node with 2+1+1 slots: ranks 0 and 3 are local
 * ranks 0 and 1 of node 0). Nodes may hold different numbers of ranks.
 * ranks_per_node > 0 replaces all four by a simulation: every
 * ranks_per_node consecutive ranks form one node (docs/config.md). */

ACX_API int acx_rank(const acx_accelerator_t *acc); /* 0..world_size-1 */
ACX_API int acx_world_size(const acx_accelerator_t *acc);
ACX_API int acx_local_rank(const acx_accelerator_t *acc); /* rank within this node */
ACX_API int acx_local_size(const acx_accelerator_t *acc); /* ranks on this node */
ACX_API int acx_num_nodes(const acx_accelerator_t *acc);
ACX_API int acx_node_rank(const acx_accelerator_t *acc);             /* 0..num_nodes-1 */
ACX_API int acx_is_main_process(const acx_accelerator_t *acc);       /* rank 0 */
ACX_API int acx_is_local_main_process(const acx_accelerator_t *acc); /* local rank 0 */

/* The CUDA device this rank uses (the ordinal for cudaSetDevice), or -1
 * when acx works on host memory: a build without CUDA, no visible device,
 * or a host-memory backend (backend: mpi) with host state. With a device
 * backend (NCCL) or device_state: cuda it
 * is local rank modulo the visible devices (with one visible device per
 * task under Slurm's GPU binding: 0), bound with cudaSetDevice at acx_init,
 * which logs the choice. NULL gives -1. Not collective; never fails. */
ACX_API int acx_device(const acx_accelerator_t *acc);

/* Where acx keeps this accelerator's model state — parameters, gradients,
 * master weights, optimizer state — as chosen at acx_init from
 * device_state and backend: ACX_DEVICE_STATE_HOST (acx_param_data and
 * acx_param_grad are host pointers), ACX_DEVICE_STATE_CUDA (CUDA device
 * pointers) or ACX_DEVICE_STATE_EMULATED (the emulated test device's
 * memory, which host code must not touch); never AUTO, except for a NULL
 * acc. A program that computes on one side checks it once after acx_init
 * and refuses the other with the reason (examples/fashion_mnist/fmnist.c).
 * Not collective (every rank has the same answer); never fails. */
ACX_API acx_device_state_t acx_device_state(const acx_accelerator_t *acc);

/* Name the stream the program's device kernels run on (a cudaStream_t as
 * void *; NULL: the legacy default stream, the initial setting), for
 * device-resident model state (device_state: cuda). acx enqueues its own
 * device work on the model's buffers there (zero_grad, the gradient
 * buckets' scaling and casts, the optimizer step), so it runs after the
 * program's forward/backward kernels without a host wait, and the NCCL
 * backend orders its collectives after it. Work already enqueued on the
 * previous stream is waited for before the switch. acx keeps using the
 * stream until it is replaced, through acx_finalize (which synchronizes
 * it): a program that destroys its stream first calls
 * acx_set_compute_stream(acc, NULL). Not collective (every rank normally
 * calls it alike). Errors: ACX_ERR_INVALID_ARG (acc NULL),
 * ACX_ERR_STATE (a non-NULL stream with host state), ACX_ERR_CUDA. */
ACX_API acx_status_t acx_set_compute_stream(acx_accelerator_t *acc, void *stream);

/* Defined when this acx has device-resident model state (device_state,
 * acx_set_compute_stream): programs with a device path test it. */
#define ACX_HAVE_DEVICE_STATE 1

/* The resolved configuration (read-only; owned by acc). */
ACX_API const acx_config_t *acx_get_config(const acx_accelerator_t *acc);

/* ---- training ---- */

/* Plan storage and communication for the model and bind the optimizer:
 * lay out parameters, gradients and optimizer state for the configured
 * sharding strategy, initialize parameter values (identical for every world
 * size), plan gradient buckets (bucket_size_mb, reverse registration order)
 * and register the loader (may be NULL) for end-of-data detection.
 * With resume: auto, then load <project_dir>/checkpoints/latest when it
 * exists (acx_load_state, strict): acx_step() > 0 tells the program it
 * continues an earlier run.
 * After this, units can be acquired and parameter/gradient pointers are valid.
 * Collective. Errors: ACX_ERR_STATE (prepared twice, model empty),
 * ACX_ERR_INVALID_ARG, ACX_ERR_NO_MEMORY, ACX_ERR_MPI. */
ACX_API acx_status_t acx_prepare(acx_accelerator_t *acc, acx_model_t *model,
                                 acx_optimizer_t *optimizer, acx_dataloader_t *loader);

/* Start / end one micro-step (Accelerate's `with accelerator.accumulate()`).
 * accumulate_begin decides whether this micro-step is a synchronization
 * boundary: every gradient_accumulation_steps-th micro-step, or the last
 * batch of the prepared loader's epoch — unless that loader cycles (step
 * mode: config max_steps > 0, or its option cycle = 1), whose stream has no
 * end: then optimizer steps = micro-steps / gradient_accumulation_steps
 * exactly, and a step-based program loops
 *
 *     while (acx_step(acc) < max_steps) {
 *         acx_dataloader_next(loader, &b);        never NULL: epochs roll over
 *         acx_accumulate_begin(acc); ... acx_backward_end(acc);
 *         if (acx_sync_gradients(acc)) optimizer step;
 *         acx_accumulate_end(acc);
 *     }
 *
 * Not collective. */
ACX_API acx_status_t acx_accumulate_begin(acx_accelerator_t *acc);
/* acx_accumulate_end on a boundary counts the optimizer step, saves when
 * checkpoint.save_every_steps divides it, and handles a pending preemption
 * (below): collective on boundaries. Returns ACX_OK — also when the job
 * must stop for preemption, which acx_preempted(acc) then says (the
 * checkpoint is saved) — or the errors of acx_save_state. */
ACX_API acx_status_t acx_accumulate_end(acx_accelerator_t *acc);

/* ---- preemption and time limits (docs/slurm.md) ----
 *
 * A signal of preemption.signals (default SIGUSR1 and SIGTERM; installed by
 * acx_init, restored by acx_finalize) only sets a flag. At the next
 * synchronization boundary acx_accumulate_end makes every rank agree (one
 * small all-reduce per boundary, skipped when preemption.signals is
 * "none"), saves a checkpoint with acx_save_state(acc, NULL) (the same
 * step on every rank), inside a Slurm job with preemption.requeue set has
 * rank 0 run `scontrol requeue $SLURM_JOB_ID`, and returns ACX_OK with
 * acx_preempted(acc) nonzero on every rank:
 *
 *     ACX_TRY(acx_accumulate_end(acc));
 *     if (acx_preempted(acc)) break;     the checkpoint is saved
 *
 * The program should then leave its loop, call acx_finalize and
 * exit with ACX_EXIT_PREEMPTED; with resume: auto the next run continues
 * from the checkpoint at acx_prepare. Repeated signals are ignored while a
 * stop is pending, except a second SIGINT (Ctrl-C twice), which ends the
 * process at once. */

/* The exit status of a program that stopped for preemption: 75, EX_TEMPFAIL
 * of <sysexits.h> ("try again later") — distinct from 1 (failure), 124
 * (timeout(1)), 77/99 (the test harness) and 128+N (killed by signal N). */
#define ACX_EXIT_PREEMPTED 75

/* Nonzero once an acx_accumulate_end found a preemption signal: every rank
 * agreed to stop at that boundary and its checkpoint is saved. The same on
 * every rank. Not collective. */
ACX_API int acx_preempted(const acx_accelerator_t *acc);

/* Nonzero when the current micro-step ends at a synchronization boundary:
 * gradients are communicated and the optimizer should step. */
ACX_API int acx_sync_gradients(const acx_accelerator_t *acc);

/* Wait for all gradient communication started by acx_unit_grads_ready.
 * On a boundary, gradients then hold the mean over ranks and over the
 * micro-steps since the last zero_grad (acx divides by world_size x
 * gradient_accumulation_steps, as Accelerate's loss division does).
 * Collective. Errors: ACX_ERR_STATE (a unit never reported its gradients;
 * on a boundary, acx_accumulate_items was called in some micro-steps since
 * the last boundary but not in all of them), ACX_ERR_MPI. */
ACX_API acx_status_t acx_backward_end(acx_accelerator_t *acc);

/* Clip the gradients of the whole model by their global norm, as
 * torch.nn.utils.clip_grad_norm_: total = (sum over every element of every
 * parameter of |g|^norm_type)^(1/norm_type) (norm_type 2) or max |g|
 * (norm_type INFINITY), computed over the reduced gradients — each rank's
 * owned rows, summed across the ranks that split them, replicated rows
 * counted once — so every rank gets the same value under every strategy.
 * Then every gradient is multiplied by min(1, max_norm / (total + 1e-6)).
 * Call after acx_backward_end on a boundary, before acx_optimizer_step.
 * total_norm_p (may be NULL): the norm before clipping. A non-finite norm is
 * returned as is and the gradients are scaled by the non-finite factor, as
 * torch does with error_if_nonfinite=False. Collective.
 * Errors: ACX_ERR_INVALID_ARG (max_norm < 0 or NaN; norm_type not 2 or
 * INFINITY), ACX_ERR_STATE (no prepared model, or not on a boundary),
 * ACX_ERR_MPI. */
ACX_API acx_status_t acx_clip_grad_norm(acx_accelerator_t *acc, double max_norm, double norm_type,
                                        double *total_norm_p);

/* Clamp every reduced gradient element to [-clip_value, clip_value]
 * (torch.nn.utils.clip_grad_value_). Not collective (each rank clamps its
 * rows). Errors: ACX_ERR_INVALID_ARG (clip_value < 0 or NaN), ACX_ERR_STATE. */
ACX_API acx_status_t acx_clip_grad_value(acx_accelerator_t *acc, double clip_value);

/* ---- mixed precision and loss normalization ---- */

/* Start backward from the loss, as Accelerate's backward(loss) does with
 * its GradScaler: multiply the seed of backward — seed [count] float32,
 * dL/d(output) of this micro-step's loss, in the accelerator's memory (host
 * memory, or device memory with device_state cuda, on the compute stream) —
 * in place by the current loss scale (one float multiplication per element;
 * nothing when the scale is 1, i.e. always unless mixed_precision is fp16).
 * Call it once per micro-step, between the loss and the first gradient the
 * program adds; acx divides the scale out of the reduced gradients before
 * clipping and the optimizer step. Not collective.
 * Errors: ACX_ERR_INVALID_ARG (acc NULL, seed NULL with count > 0; a host
 * pointer with emulated device state), ACX_ERR_CUDA. */
ACX_API acx_status_t acx_backward_begin(acx_accelerator_t *acc, float *seed, size_t count);

/* The current loss scale, for logging (what acx_backward_begin multiplies
 * by): torch.amp.GradScaler's get_scale — initially loss_scale.init = 2^16,
 * halved on an overflow, doubled after loss_scale.growth_interval clean
 * steps — or exactly 1 unless mixed_precision is fp16. Programs never
 * multiply by it themselves: acx_backward_begin does. */
ACX_API double acx_loss_scale(const acx_accelerator_t *acc);

/* Tell acx this micro-step's (unscaled) loss. Optional; under fp16 it lets
 * the diagnostic of a failing run say whether the loss itself was
 * non-finite or the gradients overflowed; without fp16 a non-finite loss
 * stops the run at the next acx_optimizer_step (ACX_ERR_STATE on every
 * rank, naming the step and the rank). Not collective. */
ACX_API void acx_record_loss(acx_accelerator_t *acc, double loss);

/* Global normalization: report the number of items (samples, tokens) in
 * this rank's micro-batch, inside its micro-step and before its backward,
 * on every micro-step. The program then adds the gradient of the SUM of its
 * per-item losses (not the mean), and at the boundary acx scales the
 * gradients once by 1 / (items summed over the accumulated micro-steps and
 * over all ranks) — the item mean of the whole global batch, whatever the
 * split of items across micro-batches and ranks (not a mean of means). A
 * partial last group (end of data) is normalized by the items it actually
 * holds. Without this call acx divides by world_size x micro-steps instead;
 * calling it in only some micro-steps of a window is an error that
 * acx_backward_end reports on the boundary. Collective on a boundary
 * micro-step (one all-reduce of the count), local otherwise. Errors:
 * ACX_ERR_STATE (outside a micro-step), ACX_ERR_INVALID_ARG (items < 0),
 * ACX_ERR_MPI. */
ACX_API acx_status_t acx_accumulate_items(acx_accelerator_t *acc, int64_t items);

/* The item total the last boundary normalized by (0 before any). */
ACX_API int64_t acx_accumulated_items(const acx_accelerator_t *acc);

/* Number of optimizer steps taken (boundaries passed), and micro-steps. */
ACX_API int64_t acx_step(const acx_accelerator_t *acc);
ACX_API int64_t acx_micro_step(const acx_accelerator_t *acc);

/* ---- printing ---- */

/* printf on the main process only (others do nothing); flushes stdout.
 * Not collective. */
ACX_API void acx_print(const acx_accelerator_t *acc, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* printf on each node's local main process only (local rank 0). Not collective. */
ACX_API void acx_print_local(const acx_accelerator_t *acc, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* In-rank-order printing for debugging: every rank formats its message, the
 * main process prints them all in rank order, each line prefixed with
 * "[rank R/N host] ", so output never interleaves. Collective (every rank
 * must call it). A message longer than 64 KiB is truncated.
 * Errors: ACX_ERR_MPI, ACX_ERR_NO_MEMORY. */
ACX_API acx_status_t acx_print_ordered(acx_accelerator_t *acc, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#ifdef __cplusplus
}
#endif
#endif /* ACX_ACCELERATOR_H */

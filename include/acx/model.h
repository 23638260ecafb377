/*
 * acx/model.h — parameters and units: the storage acx owns for the program.
 *
 * The program registers named parameters (float32 tensors, row-major, dim 0
 * first) grouped into units — the FSDP "wrap unit": the parameters that are
 * gathered together before use and whose gradients are reduced together.
 * After acx_prepare the program works only through pointers acx hands out:
 *
 *   acx_unit_acquire(u);                 parameters of u valid (gathered if sharded)
 *   W = acx_param_data(w);               [rows x cols], read-only for the program
 *                                        (to set weights: acx_model_load_weights)
 *   ... forward ... backward, ADDING into acx_param_grad(w) (like autograd's +=)
 *   acx_unit_grads_ready(u);             gradient reduction of u may start
 *   acx_unit_release(u);                 W may be freed (sharded strategies)
 *
 * Registration order is the forward order; gradients become ready in the
 * reverse order, which is how buckets are planned. A parameter used at two
 * places of the forward (tied weights) belongs to one unit and is used at
 * the second place through a shared unit (acx_model_add_shared_unit).
 */
#ifndef ACX_MODEL_H
#define ACX_MODEL_H

#include <math.h>

#include "acx/status.h"
#include "acx/types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ACX_MAX_DIMS 8
#define ACX_MAX_NAME 128 /* longest parameter/unit name, including the NUL */

/* ---- initializers (torch.nn.init semantics) ---- */

typedef enum acx_init_kind {
    ACX_INIT_ZEROS = 0,
    ACX_INIT_CONSTANT = 1,        /* a */
    ACX_INIT_UNIFORM = 2,         /* U(a, b) */
    ACX_INIT_NORMAL = 3,          /* N(mean a, std b) */
    ACX_INIT_KAIMING_UNIFORM = 4, /* bound = gain(nonlinearity, a) * sqrt(3 / fan) */
    ACX_INIT_KAIMING_NORMAL = 5,  /* std = gain(nonlinearity, a) / sqrt(fan) */
    ACX_INIT_XAVIER_UNIFORM = 6,  /* bound = gain * sqrt(6 / (fan_in + fan_out)), gain = a */
    ACX_INIT_XAVIER_NORMAL = 7,   /* std = gain * sqrt(2 / (fan_in + fan_out)), gain = a */
    ACX_INIT_ONES = 8
} acx_init_kind_t;

typedef enum acx_nonlinearity {
    ACX_NONLIN_LINEAR = 0,     /* gain 1 (also conv*, sigmoid) */
    ACX_NONLIN_RELU = 1,       /* gain sqrt(2) */
    ACX_NONLIN_LEAKY_RELU = 2, /* gain sqrt(2 / (1 + a^2)) */
    ACX_NONLIN_TANH = 3        /* gain 5/3 */
} acx_nonlinearity_t;

typedef enum acx_fan_mode { ACX_FAN_IN = 0, ACX_FAN_OUT = 1 } acx_fan_mode_t;

/* How to initialize one parameter. fan_in/fan_out follow
 * torch.nn.init._calculate_fan_in_and_fan_out: for shape [d0, d1, d2...],
 * receptive = d2*d3*..., fan_in = d1*receptive, fan_out = d0*receptive.
 * fan_override > 0 replaces the computed fan (needed for a bias, whose
 * fan_in is its weight's). */
typedef struct acx_init_spec {
    acx_init_kind_t kind;
    double a, b; /* kind-specific, see acx_init_kind_t */
    acx_nonlinearity_t nonlinearity;
    acx_fan_mode_t mode;
    int64_t fan_override;
} acx_init_spec_t;

#define ACX_INIT_SPEC_ZEROS       ((acx_init_spec_t){.kind = ACX_INIT_ZEROS})
#define ACX_INIT_SPEC_CONSTANT(v) ((acx_init_spec_t){.kind = ACX_INIT_CONSTANT, .a = (v)})
#define ACX_INIT_SPEC_UNIFORM(lo, hi)                                                              \
    ((acx_init_spec_t){.kind = ACX_INIT_UNIFORM, .a = (lo), .b = (hi)})
#define ACX_INIT_SPEC_NORMAL(mean, std)                                                            \
    ((acx_init_spec_t){.kind = ACX_INIT_NORMAL, .a = (mean), .b = (std)})
/* nn.Linear's default weight init: kaiming_uniform_(a=sqrt(5)) => U(-1/sqrt(fan_in),
 * 1/sqrt(fan_in)). */
#define ACX_INIT_SPEC_LINEAR_WEIGHT                                                                \
    ((acx_init_spec_t){.kind = ACX_INIT_KAIMING_UNIFORM,                                           \
                       .a = 2.23606797749979,                                                      \
                       .nonlinearity = ACX_NONLIN_LEAKY_RELU,                                      \
                       .mode = ACX_FAN_IN})
/* nn.Linear's default bias init: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with the weight's fan_in. */
#define ACX_INIT_SPEC_LINEAR_BIAS(fan_in)                                                          \
    ((acx_init_spec_t){.kind = ACX_INIT_UNIFORM,                                                   \
                       .a = -1.0 / sqrt((double)(fan_in)),                                         \
                       .b = 1.0 / sqrt((double)(fan_in))})

/* ---- registration (before acx_prepare) ---- */

/* Create an empty model bound to acc. Not collective (but every rank must
 * register the same units and parameters in the same order). The
 * accelerator owns the model; it is freed by acx_finalize.
 * Errors: ACX_ERR_INVALID_ARG, ACX_ERR_NO_MEMORY. */
ACX_API acx_status_t acx_model_create(acx_accelerator_t *acc, acx_model_t **model_p);

/* Append a unit named `name` (unique in the model, < ACX_MAX_NAME bytes).
 * Errors: ACX_ERR_INVALID_ARG (duplicate or bad name), ACX_ERR_STATE (after
 * prepare), ACX_ERR_NO_MEMORY. */
ACX_API acx_status_t acx_model_add_unit(acx_model_t *model, const char *name, acx_unit_t **unit_p);

/* Append a *shared unit* named `name` (unique among the model's units, as
 * for acx_model_add_unit) at this point of the forward (registration)
 * order: a second use of `owner`'s parameters, for tied weights — GPT's
 * token embedding wte [V x D] is read at the start (the lookup) and again
 * at the end (logits = h . wte^T). The shared unit has no parameters of
 * its own, no storage and nothing in checkpoints or weight files; it is
 * acquired, released and reports acx_unit_grads_ready like any unit, at
 * its own place in the order:
 *
 *   forward:  acquire(embed)  lookup with acx_param_data(wte)  release(embed)
 *             ... blocks ...
 *             acquire(head)   logits with acx_param_data(wte)
 *   backward: (head kept acquired, or released and acquired again)
 *             add the logits' gradient into acx_param_grad(wte)
 *             grads_ready(head)  release(head)
 *             ... blocks in reverse ...
 *             acquire(embed)  add the lookup's gradient into acx_param_grad(wte)
 *             grads_ready(embed)  release(embed)
 *
 * acx_param_data of the owner's parameters is valid while the owner or any
 * of its shared units is acquired; acquiring one while another holds the
 * values gathers nothing again (sharded strategies: at most one all-gather
 * per use, none when the values are there). Both uses add into the same
 * gradient buffer, which lives until the last use reported: the owner's
 * gradients are reduced once per synchronization boundary, after the owner
 * and every shared unit of it called acx_unit_grads_ready in that
 * micro-step (micro-steps off a boundary keep accumulating both uses).
 * Prefetching (fsdp.*) treats the shared unit as its own position: the
 * forward prefetch after the unit before it fetches the owner's values,
 * and backward prefetch from it goes to the unit before it. The memory
 * estimate counts no storage for it (acx_memory_model_t.num_units counts
 * units with parameters; shared_numel, the owners' elements, covers the
 * owner's gradient buffer living between the uses).
 * owner: an ordinary unit of the same model (not itself a shared unit);
 * its parameters may be added before or after this call. Not collective
 * (every rank registers the same units in the same order).
 * Errors: ACX_ERR_INVALID_ARG (NULL argument, duplicate or bad name, owner
 * of another model, owner a shared unit), ACX_ERR_STATE (after prepare),
 * ACX_ERR_NO_MEMORY. acx_unit_add_param on a shared unit fails with
 * ACX_ERR_INVALID_ARG. */
ACX_API acx_status_t acx_model_add_shared_unit(acx_model_t *model, const char *name,
                                               acx_unit_t *owner, acx_unit_t **unit_p);

/* Append a float32 parameter to a unit. shape: ndim dims (1..ACX_MAX_DIMS),
 * each >= 1, copied. name: unique in the model; it keys the initializer's
 * random stream, so values depend on (seed, name, element index) only —
 * never on world size, rank or registration order.
 * Errors: ACX_ERR_INVALID_ARG (duplicate name, bad shape, bad init spec,
 * a shared unit), ACX_ERR_STATE (after prepare), ACX_ERR_NO_MEMORY. */
ACX_API acx_status_t acx_unit_add_param(acx_unit_t *unit, const char *name, int ndim,
                                        const int64_t *shape, acx_init_spec_t init,
                                        acx_param_t **param_p);

/* ---- use (after acx_prepare) ---- */

/* Make the unit's full parameters available (NO_SHARD: nothing to do;
 * sharded strategies all-gather). Collective over the ranks that share the
 * unit's shards. Errors: ACX_ERR_STATE (not prepared), ACX_ERR_MPI. */
ACX_API acx_status_t acx_unit_acquire(acx_unit_t *unit);

/* The unit's parameters may be freed again; pointers from acx_param_data
 * become invalid under sharded strategies (unless another use of the same
 * parameters — the owner or a shared unit of it — is still acquired). */
ACX_API acx_status_t acx_unit_release(acx_unit_t *unit);

/* The program finished adding this micro-step's gradients into every
 * parameter of the unit. On a synchronization boundary this may start the
 * (asynchronous) reduction of the bucket the unit completes; acx_backward_end
 * waits for it. Each unit must report exactly once per micro-step in which
 * it took part in backward. For a unit with shared units (or a shared
 * unit), the reduction of the owner's gradients starts when the last of
 * these uses reports. Collective in effect (all ranks report the same
 * units). Errors: ACX_ERR_STATE (reported twice), ACX_ERR_MPI. */
ACX_API acx_status_t acx_unit_grads_ready(acx_unit_t *unit);

/* Full parameter values, [shape] row-major float32, valid between
 * acquire and release (always, under NO_SHARD, after prepare). NULL (with
 * the last error set) when not available. With device-resident state
 * (device_state: cuda) this is a DEVICE pointer (CUDA memory of the rank's
 * device), as is acx_param_grad's: the program's kernels read them (and
 * write acx_param_grad's) on the stream named by acx_set_compute_stream.
 *
 * READ-ONLY for the program. The values are the compute copy acx makes
 * from the fp32 master weights (rounded to bf16/fp16 under mixed
 * precision, gathered under the sharded strategies) and remakes after
 * every optimizer step: a write is lost at the next gather or step, or
 * leaves this rank training different weights from the others. To set
 * weights (pretrained, converted, edited) use acx_model_load_weights; the
 * optimizer is the only other writer. With ACX_DEBUG_MODE and host state a
 * write is caught — found at acx_unit_release (a warning on that rank) or
 * before the step — and the next acx_optimizer_step returns ACX_ERR_STATE
 * naming the parameter on every rank (agreed: the write is often on one
 * rank only). */
ACX_API const float *acx_param_data(acx_param_t *param);

/* The parameter's gradient buffer, same shape; the program ADDS into it
 * during backward. Zeroed by acx_optimizer_zero_grad. NULL before prepare.
 * Under sharded strategies the full gradient buffer of the unit is created
 * (zeroed) by the first call after the unit's last reduction, and handed
 * over to the reduce-scatter by acx_unit_grads_ready on a synchronization
 * boundary: pointers from before that call are invalid after it. On a
 * boundary, after acx_backward_end, the reduced gradient exists only as the
 * rank's owned rows (NO_SHARD: in this buffer, averaged). */
ACX_API float *acx_param_grad(acx_param_t *param);

/* Copy the full values of `param` ([shape] row-major float32, the fp32
 * master weights) into out (host memory, also with device-resident state,
 * whose values are copied back), on every rank, whatever the strategy: under
 * sharded strategies the owned rows are all-gathered from the ranks that
 * hold them (for export, evaluation on one rank, tests). Collective over all
 * ranks: every rank calls it for the same parameter. out: caller-owned,
 * numel floats. Errors: ACX_ERR_INVALID_ARG (NULL), ACX_ERR_STATE (not
 * prepared), ACX_ERR_NO_MEMORY, ACX_ERR_MPI. */
ACX_API acx_status_t acx_param_gather(acx_param_t *param, float *out);

/* acx_param_gather to one rank: the full values of `param` ([shape]
 * row-major float32, the fp32 master weights) into out on rank `root` only
 * (host memory, also with device-resident state); no other rank holds the
 * full tensor at any time (each sends the rows it holds once, replicas
 * splitting theirs: an MPI_Gatherv). out: caller-owned, numel floats, on
 * root; ignored (may be NULL) on the other ranks. For export of a model
 * larger than one rank should hold twice. Collective over all ranks (same
 * param and root everywhere). Errors, on every rank alike:
 * ACX_ERR_INVALID_ARG (NULL param, root not a rank, out NULL on root),
 * ACX_ERR_STATE (not prepared), ACX_ERR_NO_MEMORY, ACX_ERR_MPI. */
ACX_API acx_status_t acx_param_gather_to(acx_param_t *param, int root, float *out);

/* The parameter's name, number of dimensions (1..ACX_MAX_DIMS), shape
 * (ndim sizes, row dimension first) and element count, as given to
 * acx_model_add_param: the full parameter, not this rank's shard. The
 * name and shape are owned by acx and valid while the model lives. Local,
 * not collective. A NULL param gives NULL / 0. */
ACX_API const char *acx_param_name(const acx_param_t *param);
ACX_API int acx_param_ndim(const acx_param_t *param);
ACX_API const int64_t *acx_param_shape(const acx_param_t *param);
ACX_API int64_t acx_param_numel(const acx_param_t *param);

/* Number of parameters and total elements in the model. */
ACX_API int acx_model_num_params(const acx_model_t *model);
ACX_API int64_t acx_model_numel(const acx_model_t *model);
/* i-th parameter in registration order (0-based), or NULL if out of range. */
ACX_API acx_param_t *acx_model_param(acx_model_t *model, int i);

/* Write every parameter to an HDF5 file `path`: one float32 dataset per
 * parameter named by the parameter's name, with its true shape, plus root
 * attributes "format" = "acx-weights" and "step". Written to path + ".tmp"
 * and renamed, so a failure leaves any previous file intact. With
 * device-resident state (device_state: cuda) the rank's shard is copied to
 * one host block first (its size in host memory, for the call).
 * A path ending in ".safetensors" writes a safetensors file instead: one
 * F32 tensor per parameter, named by the parameter's name, with its true
 * shape, header keys sorted, __metadata__ {"format": "acx-weights",
 * "step": "<N>"}; rank 0 writes it (path + ".tmp", fsync, rename), each
 * parameter gathered to rank 0 alone (acx_param_gather_to: rank 0 holds one
 * full parameter at a time). Collective; every rank returns the same
 * status. Errors: ACX_ERR_HDF5, ACX_ERR_IO, ACX_ERR_STATE (not prepared),
 * ACX_ERR_NO_MEMORY and ACX_ERR_CUDA (the host copy of device state). */
ACX_API acx_status_t acx_model_save_weights(acx_model_t *model, const char *path);

/* ---- loading existing weights (after acx_prepare) ---- */

/* Where one parameter's values come from in a file (acx_load_options_t.map). */
typedef struct acx_weight_source {
    const char *param;  /* acx parameter name */
    const char *tensor; /* tensor name in the file (safetensors key / HDF5 dataset name) */
    int64_t index;      /* -1: the whole tensor; k >= 0: slice k of the tensor's dim 0
                           (stacked layers: a [L, ...] tensor feeds L parameters) */
    int transpose;      /* 1: the file holds the 2-D transpose of the parameter (GPT-2's
                           Conv1D weights, [in, out] for a parameter [out, in]) */
} acx_weight_source_t;

typedef struct acx_load_options {
    /* NULL/0: every parameter from the tensor of its own name. With a map,
     * the parameters it names come from its entries (at most one entry per
     * parameter) and the others still from the tensor of their own name. */
    const acx_weight_source_t *map;
    int map_len;
    /* 1: every parameter must be loaded and every tensor of the file used
     * (a stacked tensor counts as used when any of its slices is); 0:
     * parameters without a tensor keep their values and unused tensors are
     * skipped (both listed in one warning on rank 0). A tensor of the wrong
     * shape is an error either way. */
    int strict;
} acx_load_options_t;

/* Load parameter values from the file at `path` into a prepared model:
 * after acx_prepare, between optimizer steps (not with gradients pending:
 * after an acx_unit_grads_ready, until acx_optimizer_step or
 * acx_optimizer_zero_grad; such gradients were computed with the weights
 * being replaced). The format is found from the
 * content, not the name: an acx weights file (HDF5, root attribute
 * format "acx-weights": acx_model_save_weights, acx ckpt export), an acx
 * checkpoint (its /model; the optimizer state and the rest are not
 * touched: acx_load_state restores those) or a safetensors file (tensors
 * F32, F16, BF16 or F64, converted to float32; the header is checked
 * whole before use). A parameter of shape S takes a tensor of shape S
 * (index -1), [L, S...] (index k < L), or with transpose (2-D parameters
 * [R, C]) [C, R], or [L, C, R] with an index. opts NULL: strict, no map.
 * Each rank reads only the rows it owns (whole tensors when transposed)
 * into its fp32 master weights, then every copy is made to agree (mixed
 * precision compute copies, gathered parameters, replicas), as after an
 * optimizer step. Optimizer state, the step count and the schedule are not
 * changed. Collective over all ranks (same path and options everywhere);
 * every rank returns the same status and on failure no parameter changes.
 * Errors name the file and the tensor or parameter, with the shape found
 * and the one expected: ACX_ERR_IO (missing, unreadable, neither HDF5 nor
 * safetensors), ACX_ERR_FORMAT (a bad safetensors header, a mis-shaped
 * tensor, a non-float dtype; strict: a parameter without a tensor, a
 * tensor without a parameter), ACX_ERR_INVALID_ARG (NULL model or path, a
 * map entry naming no parameter or twice the same one, transpose of a
 * parameter that is not 2-D), ACX_ERR_STATE (not prepared, or gradients
 * pending),
 * ACX_ERR_NO_MEMORY, ACX_ERR_HDF5, ACX_ERR_CUDA. */
ACX_API acx_status_t acx_model_load_weights(acx_model_t *model, const char *path,
                                            const acx_load_options_t *opts);

#ifdef __cplusplus
}
#endif
#endif /* ACX_MODEL_H */

/*
 * acx/memory.h — how many bytes of model state a rank holds: measured (acx's
 * allocator accounting) and predicted (the ZeRO formulas, per strategy).
 *
 * Every buffer acx allocates for model state is counted in one category, so
 * a program (or a test) can compare what a strategy really holds with what
 * the formula says it should. Buffers the program allocates itself, MPI's and
 * HDF5's internal buffers and the data loader are not counted.
 */
#ifndef ACX_MEMORY_H
#define ACX_MEMORY_H

#include <stdint.h>

#include "acx/status.h"
#include "acx/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum acx_mem_category {
    ACX_MEM_PARAMS = 0,    /* resident full-parameter copies the program computes with
                              (NO_SHARD, SHARD_GRAD_OP; FULL_SHARD has none at rest) */
    ACX_MEM_GRADS = 1,     /* gradient storage: full gradient buffers and the reduced shard */
    ACX_MEM_MASTER = 2,    /* fp32 master weights of the owned rows, when not the params */
    ACX_MEM_OPTIMIZER = 3, /* optimizer state of the owned rows (exp_avg, exp_avg_sq, momentum) */
    ACX_MEM_TRANSIENT = 4, /* gathered units and communication staging, freed again */
    ACX_MEM_NUM_CATEGORIES = 5
} acx_mem_category_t;

/* Bytes, per category and in total, on this rank: the bytes of the buffers
 * in use (as asked for). peak_total is the largest total ever held at one
 * time (not the sum of the category peaks). `cached` is apart from these:
 * freed buffers acx keeps mapped for reuse (its caching allocator, like
 * PyTorch's for CUDA memory), page-rounded; for the buffers of 64 KiB and
 * more, in use + cached stays within the largest page-rounded in-use total
 * since the last acx_memory_empty_cache plus an eighth of it (size
 * classes). Fields are only ever appended. */
typedef struct acx_memory_stats {
    int64_t current[ACX_MEM_NUM_CATEGORIES];
    int64_t peak[ACX_MEM_NUM_CATEGORIES];
    int64_t current_total;
    int64_t peak_total;
    /* Device memory holding model state (device_state: cuda, or the
     * emulated test device), per category as above; zero with host state.
     * The host fields above count host memory only. Appended: the struct
     * grows at its end, so size it with sizeof. */
    int64_t device_current[ACX_MEM_NUM_CATEGORIES];
    int64_t device_peak[ACX_MEM_NUM_CATEGORIES];
    int64_t device_current_total;
    int64_t device_peak_total;
    int64_t cached;
    /* Device memory acx keeps for reuse (its device caching allocator,
     * device/cache.h, like PyTorch's CUDACachingAllocator: freed
     * blocks of the sharded strategies' per-step buffers), apart from the
     * device_* counters above, which count buffers in use. Released by
     * acx_memory_empty_cache, at a model's free and at acx_finalize. */
    int64_t device_cached;
    /* Host shared memory this rank allocated for the node-local collectives
     * of its communicators (docs/collectives.md: its two slot sets of each
     * communicator's POSIX shm segment, rank 0 also the flags; at most
     * about 2 MiB per communicator), from the communicator's creation
     * until its destruction (acx_finalize).
     * Apart from the categories above; 0 with ACX_SHM_DISABLE=1. */
    int64_t comm_segments;
} acx_memory_stats_t;

/* ---- buffers in the accelerator's memory ----
 *
 * The collectives of acx/collectives.h move the accelerator's memory: host
 * memory with host state, device memory with device_state cuda (or the
 * emulated test device) — the memory acx_param_data points into — with
 * every backend. These four calls give a program such buffers without
 * including a CUDA header. Not collective. */

/* *buf_p = bytes zero-filled bytes of the accelerator's memory (acx_device_state:
 * host -> malloc'd memory, cuda -> device memory of acx_device(acc));
 * 0 bytes gives a valid 1-byte buffer. Owned by the program, freed with
 * acx_buffer_free. Not counted in acx_memory_stats (model state only).
 * Errors: ACX_ERR_INVALID_ARG, ACX_ERR_NO_MEMORY, ACX_ERR_CUDA. */
ACX_API acx_status_t acx_buffer_alloc(acx_accelerator_t *acc, size_t bytes, void **buf_p);

/* Free a buffer of acx_buffer_alloc (after the device work enqueued on the
 * compute stream is done); NULL is a no-op. */
ACX_API void acx_buffer_free(acx_accelerator_t *acc, void *buf);

/* Copy bytes from a buffer of the accelerator's memory to host memory, and
 * back. Complete when they return (they wait for the work enqueued on the
 * compute stream first). Errors: ACX_ERR_INVALID_ARG, ACX_ERR_CUDA. */
ACX_API acx_status_t acx_buffer_to_host(acx_accelerator_t *acc, void *host, const void *buf,
                                        size_t bytes);
ACX_API acx_status_t acx_buffer_from_host(acx_accelerator_t *acc, void *buf, const void *host,
                                          size_t bytes);

/* This process's accounting (all accelerators of the process together).
 * Not collective. Errors: ACX_ERR_INVALID_ARG (stats_p NULL). */
ACX_API acx_status_t acx_memory_stats(acx_memory_stats_t *stats_p);

/* Restart the peaks from the current values (e.g. after initialization, to
 * measure the steady state of training). Not collective. */
ACX_API void acx_memory_reset_peak(void);

/* Return the freed buffers acx keeps for reuse to the system (stats.cached
 * and stats.device_cached drop to 0; cached device blocks that work may
 * still use are waited for first), like torch.cuda.empty_cache; buffers in
 * use are untouched.
 * acx does it itself when a model is freed and at acx_finalize. Not
 * collective. */
ACX_API void acx_memory_empty_cache(void);

/* Per-rank bytes a strategy needs for a model, by the formulas of the ZeRO
 * paper (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training
 * Trillion Parameter Models", SC'20, section 5 / figure 1) applied to acx's
 * host layout: P = numel, N = ranks sharing the shards (world size; ranks
 * per node under HYBRID_SHARD), shards padded to whole rows per rank as acx
 * does. On the host the compute copies and full gradient buffers are
 * float32 even under bf16/fp16 (they hold rounded values); 16-bit buffers
 * exist only for communication, so mixed precision holds more than the
 * paper's 16P under NO_SHARD (20P with AdamW). */
typedef struct acx_memory_estimate {
    int64_t params;    /* resident compute copies: P x 4 when replicated (float32 arrays, of
                          values rounded to bf16/fp16 under mixed precision) */
    int64_t grads;     /* gradient storage (with NO_SHARD's 16-bit wire buffer) */
    int64_t master;    /* fp32 master weights (0 when they are the params: NO_SHARD fp32) */
    int64_t optimizer; /* states x 4 bytes x (P or P/N) */
    int64_t transient; /* gathered-unit and staging buffers at their peak */
    int64_t total;     /* the sum */
} acx_memory_estimate_t;

typedef struct acx_memory_model {
    int64_t numel;         /* P: elements of all parameters */
    int64_t largest_unit;  /* elements of the largest unit (transient buffers) */
    int64_t shard_numel;   /* elements of the largest rank's padded shard; 0 = ceil(P / N) */
    int world_size;        /* >= 1 */
    int ranks_per_node;    /* HYBRID_SHARD's shard group size; 0 = world_size */
    int strategy;          /* acx_sharding_strategy_t */
    int mixed_precision;   /* acx_mixed_precision_t */
    int optimizer_states;  /* fp32 states per element: AdamW 2, SGD with momentum 1, else 0 */
    int limit_all_gathers; /* as in the config, >= 0 (0 = no cap). Checked, but no
                              longer changes the estimate: acx prefetches one unit
                              ahead, and a unit in flight holds only its staging, so
                              FULL_SHARD's peak is one unit in use beside one
                              all-gather whatever the cap */
    int num_units;         /* units in the model, >= 0 (0 = unknown); units with
                              parameters only (a shared unit has no storage).
                              Checked; no longer changes the estimate */
    int reduce_dtype;      /* acx_reduce_dtype_t; 0 = fp32. The dtype gradients are
                              reduced in, as in the config: bf16/fp16 halves the
                              reduce-scatter staging and adds NO_SHARD's 2 x P wire
                              buffer. Independent of mixed_precision */
    int64_t shared_numel;  /* elements of the units that have shared units
                              (acx_model_add_shared_unit: tied parameters), summed;
                              0 = none. Sharded strategies: such a unit's full
                              gradient buffer lives from its first use in backward
                              to its last, beside the other units' (+ 4 x this in
                              grads) */
} acx_memory_model_t;

/* Fill *est_p for the model and strategy described by *m (written only on
 * success). Not collective; no MPI needed. The formulas per strategy and
 * their derivation: sharding/memory_estimate.c and docs/memory.md.
 * Errors: ACX_ERR_INVALID_ARG (NULL pointers, numel < 0, world_size < 1,
 * unknown strategy, mixed precision or reduce_dtype, ranks_per_node not dividing
 * world_size, largest_unit or shared_numel outside 0..numel, a negative optimizer_states,
 * limit_all_gathers or num_units, shard_numel neither 0 nor between
 * ceil(numel / N) and numel, byte counts beyond int64), each naming the
 * field and value. */
ACX_API acx_status_t acx_memory_estimate(const acx_memory_model_t *m, acx_memory_estimate_t *est_p);

#ifdef __cplusplus
}
#endif
#endif /* ACX_MEMORY_H */

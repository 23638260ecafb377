/*
 * sharding/memory_estimate.c — acx_memory_estimate: the bytes of model state
 * one rank holds under each sharding strategy, predicted from the model's
 * size by the ZeRO formulas applied to acx's own buffer layout. It lives
 * with the strategies because it must say exactly what they allocate: a
 * strategy that changes its buffers changes the formula here, and the
 * memory tests hold the two against each other (acx_memory_stats measures
 * the same categories, base/memstat.c).
 *
 * The layout is the host one (sharding/no_shard.c, sharding/sharded.c,
 * collectives/bucket.c): the parameters the program reads and its full
 * gradient buffers are float32 arrays whatever the mixed precision — under
 * bf16/fp16 the compute copies hold values rounded to 16 bits, but are
 * still stored as float, since the plain C kernels read float. 16-bit
 * buffers appear only on the wire: all-gathers move param_dtype,
 * reduce-scatters and DDP's all-reduces move reduce_dtype — on the MPI
 * backend too, whose 16-bit sums keep 2 bytes per element on the wire
 * (collectives/mpi/coll_mpi.c). The blocks that backend receives while a
 * 16-bit sum runs (2 bytes per element reduced, freed at completion) are
 * its own scratch, like MPI's internal buffers, and not counted here.
 *
 * Leaves to others: measuring (memstat.c), reading a model's size from a
 * file and printing tables (`acx estimate-memory`, cli/acx.c).
 *
 * ---- symbols (all sizes in elements; results in bytes per rank) ----
 *
 *   P   numel: elements of all parameters
 *   U   largest_unit: elements of the largest unit
 *   S   the shard group: world_size, or ranks_per_node under HYBRID_SHARD
 *       (replicas of the shards sit on the other nodes)
 *   Sh  shard_numel when given (the largest rank's padded shard: every
 *       parameter is split along dim 0, rank r owning ceil(R/S) rows, so
 *       rank 0 holds the most), else ceil(P/S)
 *   Up  S * ceil(U/S): a unit's flat buffer padded to S equal pieces, the
 *       shape of its all-gather and reduce-scatter staging (sharded.c pads
 *       each parameter of the unit to whole rows per rank, so its segment
 *       can be a little larger than ceil(U/S): an approximation from below)
 *   pb  param (all-gather) wire bytes: 4 without mixed precision, 2 for
 *       bf16 and fp16
 *   rb  reduce wire bytes: 4 for reduce_dtype fp32, 2 for bf16 and fp16
 *       (independent of the mixed precision)
 *   snd the all-gather's 16-bit send buffer, pb * ceil(U/S) when pb = 2
 *       (each rank rounds its fp32 master segment into it); 0 when pb = 4
 *       (the master segment is sent as it is)
 *   K   optimizer_states: fp32 states per element (AdamW/Adam 2: exp_avg,
 *       exp_avg_sq; SGD with momentum 1; plain SGD 0)
 *   (limit_all_gathers and num_units no longer enter a formula: see
 *       FULL_SHARD below)
 *   T   shared_numel: elements of the units that have shared units; their
 *       full gradient buffer stays from the first use's backward to the
 *       last, while the units in between materialize theirs
 *
 * ---- what each strategy allocates ----
 *
 *   category   NO_SHARD             SHARD_GRAD_OP      FULL_SHARD, HYBRID_SHARD
 *   params     4*P                  4*P                0
 *   grads      4*P (+ 2*P if rb=2)  4*(U+T) + 4*Sh     4*(U+T) + 4*Sh
 *   master     4*P (mp only)        4*Sh               4*Sh
 *   optimizer  4*K*P                4*K*Sh             4*K*Sh
 *   transient  0                    max(rb*Up,         4*U + (pb*Up + snd)
 *                                       2*(pb*Up+snd))   + rb*Up
 *
 * NO_SHARD (DDP) replicates everything. Without mixed precision the fp32
 * parameters are the master weights (the optimizer updates them in place),
 * so master is 0; with bf16/fp16 the compute copies (float32 arrays of
 * rounded values, 4*P) sit beside a separate fp32 master (4*P). Gradients
 * are all-reduced in place in their buckets; with a 16-bit reduce_dtype the
 * buckets are rounded into a 16-bit wire buffer the size of the model
 * (2*P, counted as gradients, allocated for the model's life) and reduced
 * there. Nothing transient.
 *
 * SHARD_GRAD_OP (ZeRO-2) keeps the compute parameters replicated (4*P), but
 * a gradient lives in full only while its unit is being reduced: one unit's
 * float32 gradient buffer (4*U, sized for the largest unit), copied into a
 * reduce-scatter staging of reduce_dtype and freed, the result widened into
 * the rank's fp32 gradient shard (4*Sh). Master weights and optimizer state
 * cover the shard only. Transient buffers peak at one of two moments that
 * never overlap: in backward one reduce-scatter staging is in flight
 * (rb*Up: one unit's reduction overlaps the next unit's backward, and is
 * completed before the next staging is allocated); after the step the
 * updated shards are all-gathered into the resident params, two units in
 * flight, each with its staging (pb*Up) and, under bf16/fp16, its send
 * buffer (snd).
 *
 * FULL_SHARD (ZeRO-3) keeps no parameters at rest: only the fp32 master
 * shard. Acquiring a unit all-gathers it (staging pb*Up, send buffer snd)
 * and copies it out into a float32 full copy (4*U), allocated only then:
 * a unit in flight holds its staging, a unit in use its full copy. With
 * the program acquiring units in order and releasing each before the next
 * (the FSDP order) the peak is the unit in use (4*U) beside one all-gather
 * (the next unit's prefetch; without prefetch, or with limit_all_gathers 1,
 * the acquired unit's own staging during its copy-out: the same bytes), and
 * in backward the one reduce-scatter in flight (rb*Up) while the unit's
 * gradient buffer (4*U, in grads) is copied into it. acx prefetches one
 * position ahead only, so limit_all_gathers does not change this peak; a
 * program holding several units at once adds 4*U per extra unit.
 * HYBRID_SHARD is FULL_SHARD inside a node of S ranks, with the shards
 * replicated across nodes, so the same formulas with S = ranks_per_node.
 *
 * The gradient terms assume a sync at every micro-step: accumulating
 * without sync keeps every unit's 4*U buffer until the boundary.
 *
 * ---- against the ZeRO paper ----
 *
 * Rajbhandari et al., SC'20, section 5 / figure 1, mixed-precision Adam
 * (2-byte parameters and gradients, K = 12 bytes of fp32 master, momentum
 * and variance per element), N data-parallel ranks:
 *
 *   baseline (DDP)    (2 + 2 + 12) P         = 16P
 *   ZeRO-2 (P_os+g)   2P + (2 + 12) P / N    = 2P + 14P/N
 *   ZeRO-3 (P_os+g+p) (2 + 2 + 12) P / N     = 16P/N
 *
 * acx on the host under bf16/fp16 with AdamW and reduce_dtype fp32, the
 * unit's gradient buffer (4U) and the transient buffers set aside,
 * Sh = P/N:
 *
 *   NO_SHARD       4P + 4P + 4P + 8P        = 20P          (4P more)
 *   SHARD_GRAD_OP  4P + 4P/N + 4P/N + 8P/N  = 4P + 16P/N   (2P + 2P/N more)
 *   FULL_SHARD     0 + 4P/N + 4P/N + 8P/N   = 16P/N        (the paper's)
 *
 * The replicated strategies hold more than the paper: float32 compute
 * copies cost 4 bytes per element where the paper counts 2, and under
 * NO_SHARD the full float32 gradients another 2 (a 16-bit reduce_dtype
 * adds its 2*P wire buffer on top: 22P). That is the price of plain-C
 * kernels reading float; mixed precision on the host saves communication
 * bytes, not memory. SHARD_GRAD_OP also keeps the reduced gradient shard in
 * fp32 (4 bytes, the optimizer's input, no second rounding): 2P/N over the
 * paper's 14P/N. FULL_SHARD at rest keeps no parameters at all — the
 * gather rounds the fp32 master rows — so its 2 + 2 + 12 becomes
 * 0 + 4 + 12 and totals the paper's 16P/N; its float32 gathered units show
 * up in the transient term (4U each instead of 2U). Without mixed precision
 * NO_SHARD is also 16P: 4P parameters (the master) + 4P gradients + 8P
 * AdamW state. A device build (the GPU path, future) would hold 2-byte
 * compute copies and gradient buffers: NO_SHARD would come to the paper's
 * 16P and SHARD_GRAD_OP to 2P + 16P/N.
 */
#include <stdint.h>

#include "acx/config.h"
#include "acx/memory.h"
#include "base/error.h"

/* ---- checked arithmetic ---- */

/* Products and sums of non-negative byte counts; *ovf is set once any of
 * them leaves int64 (a model too large to describe in bytes). */
static int64_t mul3(int64_t a, int64_t b, int64_t c, int *ovf) {
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r) || __builtin_mul_overflow(r, c, &r)) {
        *ovf = 1;
        return 0;
    }
    return r;
}

static int64_t add2(int64_t a, int64_t b, int *ovf) {
    int64_t r;
    if (__builtin_add_overflow(a, b, &r)) {
        *ovf = 1;
        return 0;
    }
    return r;
}

static int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0); }

/* ---- argument checks ---- */

static acx_status_t check_model(const acx_memory_model_t *m) {
    if (m->numel < 0)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_memory_estimate: numel = %lld (expected >= 0)",
                         (long long)m->numel);
    if (m->world_size < 1)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "acx_memory_estimate: world_size = %d (expected >= 1)", m->world_size);
    if (m->strategy < ACX_NO_SHARD || m->strategy > ACX_HYBRID_SHARD)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "acx_memory_estimate: strategy = %d (expected an acx_sharding_strategy_t, "
                         "%d..%d)",
                         m->strategy, (int)ACX_NO_SHARD, (int)ACX_HYBRID_SHARD);
    if (m->mixed_precision < ACX_MP_NO || m->mixed_precision > ACX_MP_FP16)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "acx_memory_estimate: mixed_precision = %d (expected an "
                         "acx_mixed_precision_t, %d..%d)",
                         m->mixed_precision, (int)ACX_MP_NO, (int)ACX_MP_FP16);
    if (m->reduce_dtype < ACX_REDUCE_FP32 || m->reduce_dtype > ACX_REDUCE_FP16)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "acx_memory_estimate: reduce_dtype = %d (expected an "
                         "acx_reduce_dtype_t, %d..%d)",
                         m->reduce_dtype, (int)ACX_REDUCE_FP32, (int)ACX_REDUCE_FP16);
    if (m->ranks_per_node < 0 || (m->ranks_per_node > 0 && m->world_size % m->ranks_per_node != 0))
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "acx_memory_estimate: ranks_per_node = %d (expected 0 or a divisor of "
                         "world_size %d)",
                         m->ranks_per_node, m->world_size);
    if (m->largest_unit < 0 || m->largest_unit > m->numel)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "acx_memory_estimate: largest_unit = %lld (expected 0..numel = %lld)",
                         (long long)m->largest_unit, (long long)m->numel);
    if (m->optimizer_states < 0)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "acx_memory_estimate: optimizer_states = %d (expected >= 0)",
                         m->optimizer_states);
    if (m->limit_all_gathers < 0)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "acx_memory_estimate: limit_all_gathers = %d (expected >= 0, 0 = no cap)",
                         m->limit_all_gathers);
    if (m->num_units < 0)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_memory_estimate: num_units = %d (expected >= 0)",
                         m->num_units);
    if (m->shared_numel < 0 || m->shared_numel > m->numel)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "acx_memory_estimate: shared_numel = %lld (expected 0..numel = %lld)",
                         (long long)m->shared_numel, (long long)m->numel);
    return ACX_OK;
}

/* ---- the estimate ---- */

ACX_API acx_status_t acx_memory_estimate(const acx_memory_model_t *m,
                                         acx_memory_estimate_t *est_p) {
    if (m == NULL || est_p == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_memory_estimate: %s is NULL",
                         m == NULL ? "m" : "est_p");
    ACX_CHECK(check_model(m));

    const int64_t P = m->numel, U = m->largest_unit;
    const int64_t K = m->optimizer_states;
    const int64_t pb = m->mixed_precision == ACX_MP_NO ? 4 : 2;
    const int64_t rb = m->reduce_dtype == ACX_REDUCE_FP32 ? 4 : 2;
    const int64_t S = m->strategy == ACX_HYBRID_SHARD && m->ranks_per_node > 0 ? m->ranks_per_node
                                                                               : m->world_size;
    /* The largest rank's shard can be neither smaller than an even split nor
     * larger than the model: anything else is not a shard of this model. */
    if (m->shard_numel < 0 ||
        (m->shard_numel > 0 && (m->shard_numel < ceil_div(P, S) || m->shard_numel > P)))
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "acx_memory_estimate: shard_numel = %lld (expected 0, or ceil(numel / "
                         "%lld) = %lld..numel = %lld)",
                         (long long)m->shard_numel, (long long)S, (long long)ceil_div(P, S),
                         (long long)P);
    const int64_t Sh = m->shard_numel > 0 ? m->shard_numel : ceil_div(P, S);
    const int64_t piece = ceil_div(U, S); /* one rank's segment of the largest unit */
    const int64_t Up = S * piece;         /* <= U + S - 1: no overflow for U <= P */

    /* the terms of the table above, in bytes (P-sized ones only where used:
     * a FULL_SHARD estimate may fit where a replicated copy would not) */
    int ovf = 0;
    const int64_t unit = mul3(4, U, 1, &ovf); /* a float32 full copy of the largest unit */
    /* the full gradient buffers: the largest unit's, and those of the units
     * with shared units, held across the backward of the units between */
    const int64_t grad_bufs = add2(unit, mul3(4, m->shared_numel, 1, &ovf), &ovf);
    const int64_t rs = mul3(rb, Up, 1, &ovf);    /* its reduce-scatter staging */
    const int64_t shard = mul3(4, Sh, 1, &ovf);  /* an fp32 shard */
    const int64_t states = mul3(4, K, Sh, &ovf); /* optimizer state of a shard */
    /* one all-gather in flight: its staging, and under bf16/fp16 the 16-bit
     * send buffer the rank's segment is rounded into */
    const int64_t send = pb == 2 ? mul3(pb, piece, 1, &ovf) : 0;
    const int64_t ag = add2(mul3(pb, Up, 1, &ovf), send, &ovf);

    acx_memory_estimate_t e = {0};
    switch (m->strategy) {
    case ACX_NO_SHARD:
        e.params = mul3(4, P, 1, &ovf);
        e.grads = rb == 2 ? add2(e.params, mul3(2, P, 1, &ovf), &ovf) : e.params;
        e.master = m->mixed_precision == ACX_MP_NO ? 0 : e.params;
        e.optimizer = mul3(4, K, P, &ovf);
        e.transient = 0;
        break;
    case ACX_SHARD_GRAD_OP: {
        const int64_t two_ag = mul3(2, ag, 1, &ovf); /* the refresh after the step */
        e.params = mul3(4, P, 1, &ovf);
        e.grads = add2(grad_bufs, shard, &ovf);
        e.master = shard;
        e.optimizer = states;
        e.transient = rs > two_ag ? rs : two_ag;
        break;
    }
    default: /* ACX_FULL_SHARD, ACX_HYBRID_SHARD (S chosen above) */
        e.params = 0;
        e.grads = add2(grad_bufs, shard, &ovf);
        e.master = shard;
        e.optimizer = states;
        e.transient = add2(add2(unit, ag, &ovf), rs, &ovf); /* in use, in flight, reducing */
        break;
    }
    e.total = add2(add2(add2(e.params, e.grads, &ovf), add2(e.master, e.optimizer, &ovf), &ovf),
                   e.transient, &ovf);
    if (ovf)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "acx_memory_estimate: numel = %lld, largest_unit = %lld: the byte counts "
                         "exceed int64",
                         (long long)P, (long long)U);
    *est_p = e;
    return ACX_OK;
}

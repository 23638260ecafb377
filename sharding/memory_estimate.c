/*
 * sharding/memory_estimate.c — acx_memory_estimate: the bytes of model state
 * one rank holds under each sharding strategy, predicted from the model's
 * size by the ZeRO formulas applied to acx's own buffer layout. It lives
 * with the strategies because it must say exactly what they allocate: a
 * strategy that changes its buffers changes the formula here, and the
 * memory tests hold the two against each other (acx_memory_stats measures
 * the same categories, runtime/base/memstat.c).
 *
 * Leaves to others: measuring (memstat.c), reading a model's size from a
 * file and printing tables (`acx estimate-memory`, tools/acx.c).
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
 *       shape of its all-gather and reduce-scatter staging
 *   cb  compute bytes: 4 without mixed precision, 2 for bf16 and fp16
 *   K   optimizer_states: fp32 states per element (AdamW/Adam 2: exp_avg,
 *       exp_avg_sq; SGD with momentum 1; plain SGD 0)
 *   G   units gathered at once: limit_all_gathers, or num_units when it is
 *       0 (no cap); never more than num_units when that is known (> 0)
 *
 * ---- what each strategy allocates ----
 *
 *   category    NO_SHARD        SHARD_GRAD_OP        FULL_SHARD, HYBRID_SHARD
 *   params      cb*P            cb*P                 0
 *   grads       cb*P            cb*U + 4*Sh          cb*U + 4*Sh
 *   master      4*P  (mp only)  4*Sh                 4*Sh
 *   optimizer   4*K*P           4*K*Sh               4*K*Sh
 *   transient   0               2*cb*Up              G*(cb*U + cb*Up) + 2*cb*Up
 *
 * NO_SHARD (DDP) replicates everything. Without mixed precision the fp32
 * parameters are the master weights (the optimizer updates them in place),
 * so master is 0; with bf16/fp16 there are cb-byte compute copies beside the
 * fp32 master. Gradients are all-reduced in place in their buckets, so
 * nothing transient.
 *
 * SHARD_GRAD_OP (ZeRO-2) keeps the compute parameters replicated, but a
 * gradient lives in full only while its unit is being reduced: one unit's
 * cb-byte gradient buffer (cb*U, sized for the largest unit and reused),
 * reduce-scattered into the rank's fp32 gradient shard (4*Sh). Master
 * weights and optimizer state cover the shard only. In flight there are two
 * reduce-scatter stagings of a padded unit (2*cb*Up: one unit's reduction
 * overlaps the next unit's backward); the all-gather after the step reuses
 * one of them, so it adds nothing.
 *
 * FULL_SHARD (ZeRO-3) keeps no parameters at rest: only the fp32 master
 * shard. Acquiring a unit all-gathers it into a staging buffer (cb*Up),
 * casting the master rows while it gathers, and unpacks a full copy (cb*U);
 * up to G units are held that way at once (the one in use plus prefetches,
 * capped by limit_all_gathers). Gradients and reduce-scatter staging are as
 * under SHARD_GRAD_OP. HYBRID_SHARD is FULL_SHARD inside a node of S ranks,
 * with the shards replicated across nodes, so the same formulas with S =
 * ranks_per_node.
 *
 * ---- against the ZeRO paper ----
 *
 * Rajbhandari et al., SC'20, section 5 / figure 1, mixed-precision Adam
 * (2-byte parameters and gradients, K = 12 bytes of fp32 master, momentum
 * and variance per element), N data-parallel ranks:
 *
 *   baseline (DDP)   (2 + 2 + 12) P         = 16P
 *   ZeRO-2 (P_os+g)  2P + (2 + 12) P / N    = 2P + 14P/N
 *   ZeRO-3 (P_os+g+p) (2 + 2 + 12) P / N    = 16P/N
 *
 * acx under bf16/fp16 with AdamW (cb = 2, K = 2), transient buffers and the
 * unit's gradient buffer (2U) set aside, Sh = P/N:
 *
 *   NO_SHARD       2P + 2P + 4P + 8P        = 16P          (the paper's)
 *   SHARD_GRAD_OP  2P + 4P/N + 4P/N + 8P/N  = 2P + 16P/N   (2P/N more)
 *   FULL_SHARD     0 + 4P/N + 4P/N + 8P/N   = 16P/N        (the paper's)
 *
 * The split differs from the paper's: acx keeps the reduced gradient shard
 * in fp32 (4 bytes, the optimizer's input, no second rounding), and under
 * FULL_SHARD it keeps no 2-byte parameter shard at all — the gather casts
 * the fp32 master rows — so FULL_SHARD's 2 + 2 + 12 becomes 0 + 4 + 12 and
 * totals the same 16P/N, while SHARD_GRAD_OP's fp32 gradient shard costs
 * 2P/N over the paper's 14P/N. Without mixed precision (cb = 4) the baseline
 * is also 16P: 4P parameters (the master) + 4P gradients + 8P AdamW state.
 */
#include <stdint.h>

#include "acx/config.h"
#include "acx/memory.h"
#include "runtime/base/error.h"

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
    const int64_t cb = m->mixed_precision == ACX_MP_NO ? 4 : 2;
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
    const int64_t Up = S * ceil_div(U, S); /* <= U + S - 1: no overflow for U <= P */
    int64_t G = m->limit_all_gathers > 0 ? m->limit_all_gathers : m->num_units;
    if (m->num_units > 0 && G > m->num_units) G = m->num_units;

    /* the terms of the table above, in bytes (P-sized ones only where used:
     * a FULL_SHARD estimate may fit where a replicated copy would not) */
    int ovf = 0;
    const int64_t unit = mul3(cb, U, 1, &ovf);        /* a full copy of the largest unit */
    const int64_t staging = mul3(cb, Up, 1, &ovf);    /* its padded collective buffer */
    const int64_t shard = mul3(4, Sh, 1, &ovf);       /* an fp32 shard */
    const int64_t states = mul3(4, K, Sh, &ovf);      /* optimizer state of a shard */
    const int64_t two_rs = mul3(2, staging, 1, &ovf); /* reduce-scatters in flight */

    acx_memory_estimate_t e = {0};
    switch (m->strategy) {
    case ACX_NO_SHARD:
        e.params = mul3(cb, P, 1, &ovf);
        e.grads = e.params;
        e.master = m->mixed_precision == ACX_MP_NO ? 0 : mul3(4, P, 1, &ovf);
        e.optimizer = mul3(4, K, P, &ovf);
        e.transient = 0;
        break;
    case ACX_SHARD_GRAD_OP:
        e.params = mul3(cb, P, 1, &ovf);
        e.grads = add2(unit, shard, &ovf);
        e.master = shard;
        e.optimizer = states;
        e.transient = two_rs;
        break;
    default: /* ACX_FULL_SHARD, ACX_HYBRID_SHARD (S chosen above) */
        e.params = 0;
        e.grads = add2(unit, shard, &ovf);
        e.master = shard;
        e.optimizer = states;
        e.transient = add2(mul3(G, add2(unit, staging, &ovf), 1, &ovf), two_rs, &ovf);
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

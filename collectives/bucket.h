/*
 * collectives/bucket.h — gradient fusion buckets (library-private).
 *
 * Many small gradients are reduced as a few large all-reduces (Horovod's
 * fusion buffer, PyTorch DDP's Reducer). Unlike a fusion buffer, acx's
 * buckets are views: the sharding layer lays gradient storage out so that
 * each bucket is one contiguous range of a flat buffer, in the order
 * gradients become ready (reverse registration order), so a bucket is
 * all-reduced in place with no packing copy.
 *
 * A bucket starts (non-blocking) the moment the last unit touching it
 * reports its gradients ready. The bucket that completes last has nothing
 * left to overlap with, so it is reduced with the blocking call, which MPI
 * implementations run with their faster, tuned algorithms.
 */
#ifndef ACX_BUCKET_H
#define ACX_BUCKET_H

#include <stdint.h>

#include "collectives/coll.h"
#include "device/ops.h"

/* One parameter's gradient range inside the flat buffer, in ready order. */
typedef struct acx_bucket_segment {
    size_t offset; /* elements from the flat buffer's start */
    size_t count;  /* elements */
    int unit;      /* the unit that reports this segment ready (0..num_units-1) */
} acx_bucket_segment_t;

typedef struct acx_buckets acx_buckets_t;

/* Plan buckets over flat [total] gradients of dtype (any acx dtype; offsets
 * and counts are in elements). segs: num_segs segments in ready order,
 * contiguous and increasing in offset. A bucket closes when adding the next
 * segment would exceed bucket_bytes (a segment larger than bucket_bytes gets
 * a bucket of its own). Not collective (every rank plans the same).
 * Errors: ACX_ERR_INVALID_ARG, ACX_ERR_NO_MEMORY. */
acx_status_t acx_buckets_create(acx_comm_t *comm, void *flat, acx_dtype_t dtype, size_t total,
                                int num_units, int num_segs, const acx_bucket_segment_t *segs,
                                size_t bucket_bytes, acx_buckets_t **buckets_p);
void acx_buckets_destroy(acx_buckets_t *b);

/* Reduce float32 gradients in a 16-bit float dtype (mixed precision's
 * reduce_dtype bf16/fp16): each bucket is scaled in float32, rounded to
 * nearest even into wire[range] (half the bytes on the wire), summed there
 * (the MPI backend accumulates 16-bit sums in float32 and rounds once), and
 * widened back into the float32 gradients when it completes. wire: [total]
 * 16-bit elements, caller-owned, outliving the buckets. Errors:
 * ACX_ERR_INVALID_ARG (gradients not float32, wire dtype not 16-bit). */
acx_status_t acx_buckets_set_wire(acx_buckets_t *b, acx_dtype_t wire_dtype, uint16_t *wire);

/* The flat gradients (and the wire buffer) are device memory of `dev`
 * (device/ops.h): the prescale, the rounding onto the wire and the
 * widening back run as dev's kernels on *stream_p (the program's compute
 * stream, read at each use; stream_p must outlive the buckets), after the
 * backward work the program enqueued there. A backend that reads host
 * memory (comm->ops->device_memory == 0: the MPI backend, which stages
 * device buffers with synchronous copies) gets the stream synchronized
 * before each collective; a device backend (NCCL) orders its collectives
 * after the compute stream itself. The widening back is enqueued once the
 * host has seen the collective complete. float32 gradients only. Errors:
 * ACX_ERR_INVALID_ARG. */
acx_status_t acx_buckets_set_device(acx_buckets_t *b, const acx_devops_t *dev,
                                    void *const *stream_p);

/* Called once per bucket and step when its reduction has completed (and
 * its wire values are widened back, enqueued on the compute stream with
 * device gradients): offset and count are the bucket's range in elements.
 * Buckets complete in increasing index order, the same on every rank,
 * some while later units are still reporting (when a new bucket makes
 * room), the rest in acx_buckets_wait_all; the CPU-offloaded optimizer
 * (sharding/no_shard.c) copies each range to the host there, overlapping
 * the reductions still in flight. A hook error is returned by the call
 * that completed the bucket. */
typedef acx_status_t (*acx_bucket_done_fn)(void *arg, size_t offset, size_t count);
acx_status_t acx_buckets_on_done(acx_buckets_t *b, acx_bucket_done_fn fn, void *arg);

int acx_buckets_count(const acx_buckets_t *b);
/* Bucket i's range, for tests and logs. */
void acx_buckets_range(const acx_buckets_t *b, int i, size_t *offset_p, size_t *count_p);

/* Unit `unit` has its gradients ready. Every bucket this completes is
 * scaled by `prescale` (e.g. 1/(world_size x micro-steps); 1 = none) and its
 * all-reduce (sum) started; also drives progress of those in flight.
 * The scaling is float32 x prescale for float32, float64 for float64, and
 * for float16/bfloat16 the exact product rounded once to the 16-bit format;
 * integer buckets take prescale 1 only. Collective in effect.
 * Errors: ACX_ERR_STATE (unit reported twice), ACX_ERR_INVALID_ARG (prescale
 * != 1 on integers), ACX_ERR_MPI. */
acx_status_t acx_buckets_unit_ready(acx_buckets_t *b, int unit, float prescale);

/* Wait for every started bucket; error ACX_ERR_STATE if some bucket never
 * started (a unit did not report). Resets for the next step. Collective. */
acx_status_t acx_buckets_wait_all(acx_buckets_t *b);

/* Forget reports of this step without communicating (non-sync micro-steps). */
void acx_buckets_reset(acx_buckets_t *b);

#endif /* ACX_BUCKET_H */

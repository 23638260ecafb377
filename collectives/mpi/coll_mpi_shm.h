/*
 * collectives/mpi/coll_mpi_shm.h — all-reduce, reduce-scatter and
 * all-gather through a shared-memory segment, for communicators whose ranks
 * all share one node (package-private to collectives/mpi/; coll_mpi.c
 * decides when to use it).
 *
 * Why acx has its own: on one node an MPI library moves a large all-reduce
 * through its shared-memory transport in fragments (Open MPI's vader: a
 * copy into a FIFO, a copy out, per fragment and per step of its
 * algorithm), and with no single-copy mechanism (CMA/XPMEM, often
 * unavailable in containers) that runs at ~1 GB/s here, below the memory
 * bandwidth of one core. NCCL's intra-node transports, Open MPI's own
 * coll/sm and coll/xhc, MPICH's release-gather collectives and DeepSpeed's
 * CPU shm all-reduce (deepspeed/csrc/cpu/comm/shm.cpp) all answer the same
 * way: every rank maps one segment, copies its input in once, and reduces
 * its share straight out of the other ranks' copies.
 *
 * The algorithm, per round of at most slot_bytes of each rank's buffer:
 *
 *   1. copy in: rank r copies the round's elements (all but its own block
 *      r, which only it reads, from its sendbuf) into its slot, then
 *      publishes flag[r] (release);
 *   2. reduce-scatter: once every flag has arrived (acquire), rank r sums
 *      block r of the round over all ranks, in rank order
 *      ((x_0 + x_1) + x_2) + ..., into its own slot's block r and its
 *      output, and publishes flag[r] again;
 *   3. all-gather: once every flag has arrived, rank r copies every other
 *      block q from slot q into its output.
 *
 * Rounds alternate between two slot sets, so a round needs no third
 * synchronization: a rank that has seen every flag of round k + 1 knows
 * every rank finished reading round k's set, which round k + 2 reuses.
 * Rounds of at most ACX_SHM_DIRECT_BYTES skip step 3: every rank sums the
 * whole round itself (one synchronization instead of two; latency wins).
 * Either way each element is summed by one formula in rank order, so the
 * result is bitwise the same on every rank, for every round size and rank
 * count — and equal to a left-to-right sum in rank order computed anywhere.
 *
 * What is reduced: SUM of float32, float64, int32 and int64 in the element
 * type (AVG is the caller's: SUM, then a division); SUM and AVG of float16
 * and bfloat16 as coll_mpi.c's MPI path defines them — widened to float32,
 * summed in rank order, rounded once (AVG: the float32 sum divided by the
 * rank count in float64, rounded once) — so either path gives the same
 * bits. 16-bit PROD, MAX and MIN stay on MPI.
 *
 * Reduce-scatter and all-gather use the same slots with one
 * synchronization per round:
 *
 *   reduce-scatter  rank r copies the round's slice of each of its P
 *                   blocks into its slot (P pieces), publishes, waits for
 *                   all, and reduces piece r of every slot, in rank order
 *                   by the all-reduce's formula, into its output — so an
 *                   all-reduce equals a reduce-scatter and an all-gather,
 *                   bit for bit;
 *   all-gather      rank r copies the round's bytes of its input into its
 *                   slot, publishes, waits for all, and copies every
 *                   rank's slot into that rank's row of its output.
 *
 * The two-set argument needs only that a rank publishes round k + 1 after
 * it has read round k, which a single synchronization per round gives.
 *
 * Collectives through a segment are *ops* that run in the order they were
 * started (a FIFO per communicator, the same order on every rank: MPI's
 * rule for collectives on one communicator). An op advances only when
 * this rank calls acx_shm_progress (which acx_shm_test and acx_shm_wait
 * do): it copies in, finds the flags it needs, reduces, copies out, and
 * returns as soon as it would have to wait — so a started op never blocks,
 * as MPI requires of a non-blocking collective, and one started before a
 * rank's other work is advanced by every later test, like Open MPI's libnbc
 * schedules inside MPI calls.
 *
 * A rank waiting for an op (acx_shm_wait) spins briefly, then yields the
 * CPU (sched_yield) and now and then calls the caller's progress hook
 * (coll_mpi.c's: MPI progress through MPI_Iprobe, its 16-bit queues and
 * every communicator's ops), so the collectives other ranks are waiting on
 * keep moving. When the node has more ranks than online CPUs it yields at
 * once. A rank that dies leaves the others waiting: the stall detector
 * (../watchdog.c), which brackets every call that can wait, ends them.
 *
 * The segment is a POSIX shared-memory object that node rank 0 creates,
 * reserves with posix_fallocate (a full /dev/shm is an error at creation,
 * not a SIGBUS later) and unlinks as soon as every rank has mapped it;
 * freeing is a local munmap, never a collective.
 *
 * Threads: like the rest of the MPI backend, only the thread that makes
 * acx's MPI calls may call these.
 *
 * Environment (NCCL_SHM_DISABLE's counterpart and two tuning knobs; read
 * by rank 0 at creation and broadcast, so every rank agrees):
 *   ACX_SHM_DISABLE=1      never use shared memory (MPI collectives instead);
 *                          unset, empty or 0: use it
 *   ACX_SHM_SLOT_BYTES=N   bytes of each rank's slot (round size), multiple
 *                          of 64, >= 64; default below
 *   ACX_SHM_MIN_BYTES=N    smallest collective routed through shared memory,
 *                          in bytes of its largest buffer (the all-reduce's,
 *                          the reduce-scatter's input, the all-gather's
 *                          output), default ACX_SHM_MIN_BYTES_DEFAULT
 * and, for measuring the argument check's cost only (docs/benchmarks.md),
 *   ACX_TEST_SHM_NO_ARGS_CHECK=1  skip the check (the test suite's prefix:
 *                          never set it in a job)
 */
#ifndef ACX_COLL_MPI_SHM_H
#define ACX_COLL_MPI_SHM_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "acx/status.h"
#include "acx/types.h"

/* The default slot: 1 MiB up to 8 ranks on the node, then 8 MiB / ranks
 * (at least 128 KiB), so a segment stays within 16–32 MiB of /dev/shm. Fewer
 * rounds cost fewer synchronizations: on the development VM a 1 MiB
 * all-reduce of 2 ranks took 73–92 us in one 1 MiB round and 122 us in four
 * of 256 KiB. */
#define ACX_SHM_SLOT_BYTES_MAX         ((size_t)1 << 20)
#define ACX_SHM_SLOT_BYTES_MIN_DEFAULT ((size_t)128 << 10)
#define ACX_SHM_SEGMENT_BUDGET         ((size_t)8 << 20)
#define ACX_SHM_MIN_BYTES_DEFAULT      ((size_t)0)
#ifndef ACX_SHM_DIRECT_BYTES
#define ACX_SHM_DIRECT_BYTES ((size_t)4096)
#endif

typedef struct acx_shm acx_shm_t;

/* Map a segment for comm (size ranks, this one rank). Collective over comm.
 * *shm_p is NULL — not an error — when comm has one rank, spans more than
 * one node, ACX_SHM_DISABLE=1, or the segment cannot be created (one info
 * line says why); every rank gets the same answer. Errors: ACX_ERR_MPI (an
 * MPI call failed), ACX_ERR_NO_MEMORY, ACX_ERR_INVALID_ARG (a malformed
 * ACX_SHM_* value, named). */
acx_status_t acx_shm_create(MPI_Comm comm, acx_shm_t **shm_p);

/* Unmap (local; no communication). NULL is a no-op. */
void acx_shm_free(acx_shm_t *shm);

/* Whether an all-reduce of count elements of dtype with op goes through
 * shm: SUM of float32, float64, int32 or int64 (callers turn their AVG into
 * SUM and a division), SUM or AVG of float16 or bfloat16; count > 0 and
 * count elements >= ACX_SHM_MIN_BYTES. Local, no communication; the same
 * answer on every rank for the same arguments. NULL shm: 0. */
int acx_shm_all_reduce_ok(const acx_shm_t *shm, size_t count, acx_dtype_t dtype, acx_red_op_t op);

/* The same for a reduce-scatter of count elements per rank (sendbuf of size
 * x count elements >= ACX_SHM_MIN_BYTES), and a slot that holds one
 * element of every rank's block. */
int acx_shm_reduce_scatter_ok(const acx_shm_t *shm, size_t count, acx_dtype_t dtype,
                              acx_red_op_t op);

/* Whether an all-gather of count elements of esize bytes per rank goes
 * through shm: count > 0 and the size x count element recvbuf >=
 * ACX_SHM_MIN_BYTES. Any element type (it moves bytes). */
int acx_shm_all_gather_ok(const acx_shm_t *shm, size_t count, size_t esize);

/* One collective through the segment. The caller owns the memory (a
 * request, or the stack of a blocking call) and keeps it, and the buffers,
 * until the op is done; the fields are this file's. */
typedef struct acx_shm_op {
    int kind; /* all-reduce, reduce-scatter, all-gather (coll_mpi_shm.c) */
    const void *sendbuf;
    void *recvbuf;
    size_t count; /* elements per rank (all-gather: bytes per rank) */
    acx_dtype_t dtype;
    acx_red_op_t op;
    size_t esize;              /* bytes per element (all-gather: 1) */
    size_t off, m;             /* the current round: elements [off, off + m) */
    int stage;                 /* where the round is */
    int args_checked;          /* the ranks' arguments were compared (first round) */
    int refused;               /* 0, or ACX_SHM_REFUSED_*: the op ended without data */
    int refused_rank;          /* the first rank whose arguments differ from rank 0's */
    int refused_kind[2];       /* rank 0's and its kinds */
    uint64_t refused_value[2]; /* rank 0's and its dtype, op or count */
    void *owner;               /* the caller's, untouched (coll_mpi.c: the request) */
    struct acx_shm_op *next;   /* in shm's FIFO */
} acx_shm_op_t;

/* What differed between the ranks' arguments of a refused op. */
enum { ACX_SHM_REFUSED_KIND = 1, ACX_SHM_REFUSED_DTYPE, ACX_SHM_REFUSED_OP, ACX_SHM_REFUSED_COUNT };

/* The starts below queue op behind the ops started on shm before it and
 * advance it as far as it goes without waiting. Each is collective over
 * the communicator shm was created for and non-blocking; every rank must
 * pass the same count, dtype and op, which the segment checks (in the
 * first round's synchronization, no extra one: coll_mpi_shm.c): a mismatch
 * ends the op on every rank without touching recvbuf, and
 * acx_shm_op_status says so. owner is stored for the caller. The other
 * arguments are the caller's to check (the _ok functions above).
 *
 * All-reduce: recvbuf[count] = op over ranks of sendbuf[count], in rank
 * order (header comment). op is ACX_OP_SUM, or ACX_OP_AVG: float16/bfloat16
 * divide (the float32 sum divided by the rank count, rounded once); the
 * other types are summed, AVG only compared with the other ranks' op (the
 * caller divides). sendbuf may equal recvbuf (in place), no other overlap. */
void acx_shm_all_reduce_start(acx_shm_t *shm, acx_shm_op_t *op, const void *sendbuf, void *recvbuf,
                              size_t count, acx_dtype_t dtype, acx_red_op_t rop, void *owner);

/* Reduce-scatter: recvbuf[count] = op over ranks q of block `rank` of q's
 * sendbuf[size x count], in rank order, by the all-reduce's formula (so an
 * all-reduce and a reduce-scatter followed by an all-gather give the same
 * bits); op as for the all-reduce. In place: recvbuf == sendbuf + rank x
 * count elements; no other overlap. */
void acx_shm_reduce_scatter_start(acx_shm_t *shm, acx_shm_op_t *op, const void *sendbuf,
                                  void *recvbuf, size_t count, acx_dtype_t dtype, acx_red_op_t rop,
                                  void *owner);

/* All-gather: recvbuf[size x count] = every rank's sendbuf[count], rank q's
 * at element q x count; elements of esize bytes, copied as bytes. In place:
 * sendbuf == recvbuf + rank x count elements (that block is left as it
 * is); no other overlap. */
void acx_shm_all_gather_start(acx_shm_t *shm, acx_shm_op_t *op, const void *sendbuf, void *recvbuf,
                              size_t count, size_t esize, void *owner);

/* Advance shm's ops (oldest first) as far as they go without waiting. Local. */
void acx_shm_progress(acx_shm_t *shm);

/* Whether op is done (after advancing shm's ops). Local, non-blocking. */
int acx_shm_test(acx_shm_t *shm, acx_shm_op_t *op);

/* Until op is done: advance, spin, yield, and call progress (may be NULL)
 * every few yields. Blocking; op must have been started on shm. */
void acx_shm_wait(acx_shm_t *shm, acx_shm_op_t *op, void (*progress)(void));

/* After op is done: ACX_OK, or — when the ranks' arguments differed —
 * ACX_ERR_INVALID_ARG recorded with a message naming what differed, rank
 * 0's value and the first other rank's ("all-reduce count mismatch on the
 * shared-memory path: rank 0 passed 256, rank 1 passed 128 ..."), the same
 * on every rank; recvbuf was not written. Ranks are the communicator's. */
acx_status_t acx_shm_op_status(const acx_shm_op_t *op);

/* The oldest op of shm not yet done, or NULL (for a caller that must give
 * up its ops: freeing shm abandons them). */
acx_shm_op_t *acx_shm_pending(const acx_shm_t *shm);

#endif /* ACX_COLL_MPI_SHM_H */

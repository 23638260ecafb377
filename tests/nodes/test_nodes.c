/*
 * tests/nodes/test_nodes.c — what acx sees and does across real (namespace)
 * nodes; run by the tests in tests/nodes/ under mpirun --host across the bed of
 * scripts/nodes-up. Each mode prints lines that the shell test compares
 * with what it computes itself from the host list; the program itself
 * checks only what needs the data (collective results against plain MPI,
 * training against the double reference).
 *
 *   topo     one line per rank:
 *              TOPO rank R world W host H num_nodes N node_rank NR
 *                   local_rank LR local_size LS mpi_local LR' LS'
 *            (acx's accessors; mpi_local: MPI_Comm_split_type(SHARED),
 *            for the record)
 *   coll     acx's all-reduce (float32, float64, int64 SUM), reduce-scatter,
 *            all-gather and broadcast on the world communicator (MPI
 *            between nodes) and on the node communicator (the node-local
 *            shared-memory path when the node has 2+ ranks), each against
 *            the same operation by plain MPI on MPI_COMM_WORLD or on
 *            MPI_Comm_split_type(SHARED). The inputs are small integers
 *            (times 2^-4 for floats) so every sum is exact in any order:
 *            results must be bitwise equal. Sizes 1 element to 1 MiB, the
 *            large ones above the shared-memory threshold. Prints
 *              COLL rank R ok checks K
 *            and the shared-memory segments this process maps (from
 *            /proc/self/maps; "-" for none):
 *              SHMMAPS rank R host H segments NAME,NAME...
 *   hybrid   HYBRID_SHARD (ranks_per_node unset: the real nodes) trains
 *            tests/mpi/shard_net.h's model 4 steps (SGD with momentum and
 *            AdamW); prints, per rank,
 *              SHARD rank R members a,b,...     (world ranks of the shard group)
 *              REPLICA rank R members a,b,...   (of the replica group)
 *            and checks every gathered parameter against the double
 *            reference (relative 1e-5); rank 0 writes the final parameters
 *            to FILE (one %.9g per line; SGD first) so the shell can
 *            compare them with a 1-rank run's.
 *            Usage: test_nodes hybrid FILE
 *            With uneven nodes acx_prepare must refuse: prints
 *              HYBRID_REFUSED <message>
 *            and exits 3.
 *   bw BYTES plain MPI, no acx: an all-reduce over all ranks (every pair
 *            connected), then rank 0 sends BYTES to the last rank and
 *            waits for a 1-byte reply; prints
 *              BW bytes B seconds S mbit M
 *   sleep S  plain MPI: a barrier, then every rank prints SLEEPING rank R and
 *            sleeps S seconds (a job to kill: the teardown tests)
 *   exit R C plain MPI: a barrier, then rank R exits with code C at once
 *            and the others sleep 60 s (the launcher must end them)
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "collectives/coll.h"
#include "runtime/accelerator.h"
#include "sharding/model.h"
#include "tests/acx_test_mpi.h"
#include "tests/mpi/shard_net.h"

#define MAX_RANKS 64

static int rank_, world_;

/* ---- topo ---- */

static int run_topo(void) {
    acx_accelerator_t *acc = NULL;
    acx_config_t cfg = ACX_CONFIG_DEFAULT;
    CHECK_OK(acx_init(NULL, NULL, &cfg, &acc));
    MPI_Comm shared;
    int lr, ls;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &shared);
    MPI_Comm_rank(shared, &lr);
    MPI_Comm_size(shared, &ls);
    MPI_Comm_free(&shared);
    char host[256];
    gethostname(host, sizeof host);
    host[sizeof host - 1] = '\0';
    printf("TOPO rank %d world %d host %s num_nodes %d node_rank %d local_rank %d local_size %d "
           "mpi_local %d %d\n",
           acx_rank(acc), acx_world_size(acc), host, acx_num_nodes(acc), acx_node_rank(acc),
           acx_local_rank(acc), acx_local_size(acc), lr, ls);
    fflush(stdout);
    CHECK_OK(acx_finalize(acc));
    return 0;
error:
    if (acc) acx_finalize(acc);
    return 1;
}

/* ---- coll ---- */

/* Element i of rank r: an integer in [-64, 63]; floats scale it by 2^-4.
 * Sums of up to 64 ranks stay exact in float32. */
static int64_t gen(int r, size_t i, int salt) {
    return (int64_t)(acx_test_hash3(r, i, salt) % 128u) - 64;
}

static void fill(void *buf, acx_dtype_t dt, size_t n, int r, int salt) {
    for (size_t i = 0; i < n; i++) {
        int64_t v = gen(r, i, salt);
        if (dt == ACX_DTYPE_FLOAT32)
            ((float *)buf)[i] = (float)v / 16.0f;
        else if (dt == ACX_DTYPE_FLOAT64)
            ((double *)buf)[i] = (double)v / 16.0;
        else
            ((int64_t *)buf)[i] = v;
    }
}

static MPI_Datatype mpi_type(acx_dtype_t dt) {
    return dt == ACX_DTYPE_FLOAT32 ? MPI_FLOAT : dt == ACX_DTYPE_FLOAT64 ? MPI_DOUBLE : MPI_INT64_T;
}

static int checks_;

/* One comparison: acx's result against MPI's, bitwise. */
static int same(const char *what, const char *comm, acx_dtype_t dt, size_t n, const void *got,
                const void *want) {
    size_t es = acx_dtype_size(dt);
    checks_++;
    if (memcmp(got, want, n * es) == 0) return 0;
    for (size_t i = 0; i < n; i++)
        if (memcmp((const char *)got + i * es, (const char *)want + i * es, es) != 0) {
            fprintf(stderr,
                    "[r%d] %s on %s (dtype %d, %zu elements): element %zu differs from MPI's\n",
                    rank_, what, comm, (int)dt, n, i);
            break;
        }
    return 1;
}

/* The operations on acx communicator c against plain MPI on m (same members). */
static int coll_on(acx_comm_t *c, MPI_Comm m, const char *name) {
    static const acx_dtype_t dts[] = {ACX_DTYPE_FLOAT32, ACX_DTYPE_FLOAT64, ACX_DTYPE_INT64};
    static const size_t counts[] = {1, 1000, 1 << 17}; /* 1 MiB of float64 */
    int r, p, bad = 0;
    MPI_Comm_rank(m, &r);
    MPI_Comm_size(m, &p);
    if (c->rank != r || c->size != p) {
        fprintf(stderr, "[r%d] %s: acx says rank %d of %d, MPI %d of %d\n", rank_, name, c->rank,
                c->size, r, p);
        return 1;
    }
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
        for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
            acx_dtype_t dt = dts[d];
            size_t n = counts[k], es = acx_dtype_size(dt);
            char *in = malloc(n * p * es), *out = malloc(n * p * es), *ref = malloc(n * p * es);
            if (!in || !out || !ref) return 1;
            /* all-reduce: the world rank in the data, so each node's differ */
            fill(in, dt, n, rank_, (int)(d * 10 + k));
            if (c->ops->all_reduce(c, in, out, n, dt, ACX_OP_SUM) != ACX_OK) {
                fprintf(stderr, "[r%d] all_reduce on %s: %s\n", rank_, name, acx_last_error());
                return 1;
            }
            MPI_Allreduce(in, ref, (int)n, mpi_type(dt), MPI_SUM, m);
            bad |= same("all-reduce", name, dt, n, out, ref);
            /* reduce-scatter: n per rank out of n * p */
            fill(in, dt, n * p, rank_, (int)(d * 10 + k) + 100);
            if (c->ops->reduce_scatter(c, in, out, n, dt, ACX_OP_SUM) != ACX_OK) {
                fprintf(stderr, "[r%d] reduce_scatter on %s: %s\n", rank_, name, acx_last_error());
                return 1;
            }
            MPI_Reduce_scatter_block(in, ref, (int)n, mpi_type(dt), MPI_SUM, m);
            bad |= same("reduce-scatter", name, dt, n, out, ref);
            /* all-gather */
            fill(in, dt, n, rank_, (int)(d * 10 + k) + 200);
            if (c->ops->all_gather(c, in, out, n, dt) != ACX_OK) {
                fprintf(stderr, "[r%d] all_gather on %s: %s\n", rank_, name, acx_last_error());
                return 1;
            }
            MPI_Allgather(in, (int)(n * es), MPI_BYTE, ref, (int)(n * es), MPI_BYTE, m);
            bad |= same("all-gather", name, dt, n * p, out, ref);
            /* broadcast from the last rank */
            fill(out, dt, n, rank_, (int)(d * 10 + k) + 300);
            memcpy(ref, out, n * es);
            if (c->ops->broadcast(c, out, n, dt, p - 1) != ACX_OK) {
                fprintf(stderr, "[r%d] broadcast on %s: %s\n", rank_, name, acx_last_error());
                return 1;
            }
            MPI_Bcast(ref, (int)n, mpi_type(dt), p - 1, m);
            bad |= same("broadcast", name, dt, n, out, ref);
            free(in);
            free(out);
            free(ref);
        }
    }
    return bad;
}

static int run_coll(void) {
    acx_accelerator_t *acc = NULL;
    acx_config_t cfg = ACX_CONFIG_DEFAULT;
    CHECK_OK(acx_init(NULL, NULL, &cfg, &acc));
    MPI_Comm shared;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &shared);
    int bad = coll_on(acc->world, MPI_COMM_WORLD, "world");
    bad |= coll_on(acc->node, shared, "node");
    MPI_Comm_free(&shared);
    int any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    /* The segments this process maps (coll_mpi_shm.c names them
     * /acx-shm-PID-SERIAL and unlinks them at once: they show in the maps
     * as "/dev/shm/acx-shm-... (deleted)"), each name once. */
    char names[1024] = "", line[1024];
    FILE *maps = fopen("/proc/self/maps", "r");
    CHECK(maps != NULL);
    while (fgets(line, sizeof line, maps) != NULL) {
        char *at = strstr(line, "/acx-shm-");
        if (at == NULL) continue;
        size_t len = strcspn(at + 1, " \n");
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)len, at + 1);
        if (strstr(names, name) == NULL && strlen(names) + len + 2 < sizeof names)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s",
                     names[0] ? "," : "", name);
    }
    fclose(maps);
    char host[256];
    gethostname(host, sizeof host);
    host[sizeof host - 1] = '\0';
    printf("SHMMAPS rank %d host %s segments %s\n", rank_, host, names[0] ? names : "-");
    printf("COLL rank %d %s checks %d\n", rank_, any ? "FAILED" : "ok", checks_);
    fflush(stdout);
    CHECK_OK(acx_finalize(acc));
    return any;
error:
    if (acc) acx_finalize(acc);
    return 1;
}

/* ---- hybrid ---- */

/* The world ranks of communicator m's members, comma-separated, in its rank order. */
static void members(MPI_Comm m, char *out, size_t cap) {
    MPI_Group g, w;
    int n, in[MAX_RANKS], to[MAX_RANKS];
    MPI_Comm_group(m, &g);
    MPI_Comm_group(MPI_COMM_WORLD, &w);
    MPI_Group_size(g, &n);
    for (int i = 0; i < n && i < MAX_RANKS; i++)
        in[i] = i;
    MPI_Group_translate_ranks(g, n, in, w, to);
    out[0] = '\0';
    for (int i = 0; i < n && i < MAX_RANKS; i++)
        snprintf(out + strlen(out), cap - strlen(out), "%s%d", i ? "," : "", to[i]);
    MPI_Group_free(&g);
    MPI_Group_free(&w);
}

#define STEPS 4

static int run_hybrid(const char *file) {
    float final[2][SN_NP];
    for (int sgd = 1; sgd >= 0; sgd--) {
        sn_run_cfg_t rc = {.strategy = ACX_HYBRID_SHARD,
                           .sgd = sgd,
                           .accum = 1,
                           .fwd_prefetch = -1,
                           .bwd_prefetch = -1,
                           .limit_all_gathers = -1};
        sn_net_t net = {0};
        acx_status_t st = sn_open(&net, &rc);
        if (st == ACX_ERR_INVALID_CONFIG && net.m != NULL) {
            if (rank_ == 0) printf("HYBRID_REFUSED %s\n", acx_last_error());
            fflush(stdout);
            sn_close(&net);
            return 3;
        }
        CHECK_OK(st);
        if (sgd) {
            char s[512], r[512];
            members(net.m->shard_comm->mpi, s, sizeof s);
            if (net.m->plan.read_group != NULL)
                members(net.m->plan.read_group->mpi, r, sizeof r);
            else
                snprintf(r, sizeof r, "%d", rank_); /* one node: no replica group */
            printf("SHARD rank %d members %s\nREPLICA rank %d members %s\n", rank_, s, rank_, r);
            fflush(stdout);
            CHECK(net.m->plan.replica_size ==
                  (net.m->plan.read_group ? net.m->plan.read_group->size : 1));
        }
        for (int s = 0; s < STEPS; s++) {
            CHECK_OK(acx_accumulate_begin(net.acc));
            CHECK_OK(sn_micro_step(&net, s, 0, 1));
            CHECK_OK(acx_backward_end(net.acc));
            CHECK_OK(acx_optimizer_step(net.opt));
            CHECK_OK(acx_optimizer_zero_grad(net.opt));
            CHECK_OK(acx_accumulate_end(net.acc));
        }
        CHECK_OK(sn_gather(&net, final[sgd]));
        sn_close(&net);

        sn_ref_t ref = {0};
        float init[SN_NP];
        sn_expected_init(init);
        for (int e = 0; e < SN_NP; e++)
            ref.p[e] = init[e];
        for (int s = 0; s < STEPS; s++) {
            double g[SN_NP];
            sn_ref_grad(ref.p, s, g);
            sn_ref_step(&ref, g, sgd);
        }
        CHECK(sn_compare_fd(sgd ? "hybrid sgd vs reference" : "hybrid adamw vs reference",
                            final[sgd], ref.p, 1e-5, NULL) == 0);
    }
    if (rank_ == 0) {
        FILE *f = fopen(file, "w");
        CHECK(f != NULL);
        for (int k = 1; k >= 0; k--)
            for (int e = 0; e < SN_NP; e++)
                fprintf(f, "%.9g\n", (double) final[k][e]);
        CHECK(fclose(f) == 0);
    }
    return 0;
error:
    return 1;
}

/* ---- bw ---- */

static int run_bw(const char *bytes_arg) {
    char *end = NULL;
    long long n = strtoll(bytes_arg, &end, 10);
    if (end == bytes_arg || *end != '\0' || n < 1 || n > (1LL << 30)) {
        if (rank_ == 0) fprintf(stderr, "bw: BYTES '%s': expected 1 .. 2^30\n", bytes_arg);
        return 2;
    }
    char *buf = calloc((size_t)n, 1);
    if (buf == NULL) return 1;
    int one = 1, sum = 0;
    MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    int last = world_ - 1;
    MPI_Barrier(MPI_COMM_WORLD);
    double t = MPI_Wtime();
    if (rank_ == 0 && last > 0) {
        MPI_Send(buf, (int)n, MPI_BYTE, last, 0, MPI_COMM_WORLD);
        MPI_Recv(buf, 1, MPI_BYTE, last, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else if (rank_ == last && last > 0) {
        MPI_Recv(buf, (int)n, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(buf, 1, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
    }
    t = MPI_Wtime() - t;
    if (rank_ == 0) printf("BW bytes %lld seconds %.4f mbit %.1f\n", n, t, (double)n * 8 / t / 1e6);
    free(buf);
    return sum == world_ ? 0 : 1;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &world_);
    int rc = 2;
    if (argc >= 2 && strcmp(argv[1], "topo") == 0)
        rc = run_topo();
    else if (argc >= 2 && strcmp(argv[1], "coll") == 0)
        rc = run_coll();
    else if (argc >= 3 && strcmp(argv[1], "hybrid") == 0)
        rc = run_hybrid(argv[2]);
    else if (argc >= 3 && strcmp(argv[1], "bw") == 0)
        rc = run_bw(argv[2]);
    else if (argc >= 4 && strcmp(argv[1], "exit") == 0) {
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank_ == atoi(argv[2])) _exit(atoi(argv[3]));
        sleep(60);
        rc = 0;
    } else if (argc >= 3 && strcmp(argv[1], "sleep") == 0) {
        MPI_Barrier(MPI_COMM_WORLD);
        printf("SLEEPING rank %d\n", rank_);
        fflush(stdout);
        sleep((unsigned)atoi(argv[2]));
        rc = 0;
    } else if (rank_ == 0)
        fprintf(stderr,
                "usage: test_nodes topo | coll | hybrid FILE | bw BYTES | sleep S | exit R C\n");
    MPI_Finalize();
    return rc;
}

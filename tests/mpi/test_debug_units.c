/*
 * tests/mpi/test_debug_units.c — ACX_DEBUG_MODE=1 (set by debug_units.test)
 * under the sharded strategies: ranks that acquire or reduce different units
 * get an error naming each rank's unit, instead of all-gathers that mix
 * data (units of the same size) or hang (different sizes).
 *
 * Model: units enc [6 x 4] (constant 1), dec [6 x 4] (constant 2) — the
 * same size, so without the check their all-gathers match silently — and
 * head [3 x 5] (constant 3); SGD lr 1.
 *
 *   no false positive  FULL_SHARD (forward and backward prefetch on),
 *                      SHARD_GRAD_OP and, on an even world, HYBRID_SHARD
 *                      with two nodes: two steps in the usual order
 *                      (acquire forward, backward with grads_ready in
 *                      reverse), every call succeeds and the parameters
 *                      after each step are the hand-derived
 *                      c - lr * mean gradient (rank r's gradient is r + 1
 *                      everywhere, so the mean is (p + 1) / 2).
 *   FULL_SHARD         rank 1 acquires dec while the other ranks acquire
 *                      enc: acx_unit_acquire fails with ACX_ERR_INVALID_ARG
 *                      on every rank, the message names "all_gather of unit
 *                      0 'enc'" for the other ranks and "all_gather of unit
 *                      1 'dec'" for rank 1 and says units must be acquired
 *                      in the same order; then every rank acquires enc and
 *                      reads 1.0 (nothing was mixed, the ranks are in step).
 *   SHARD_GRAD_OP      rank 1 reports dec's gradients ready first, the
 *                      others enc's: acx_unit_grads_ready fails the same
 *                      way, naming "reduce_scatter of unit ..." for both.
 *   against a public   under FULL_SHARD rank 0 calls acx_barrier while the
 *   collective         others acquire enc: both calls fail on every rank
 *                      with a report naming the barrier (and its call site)
 *                      and the unit's all-gather; a barrier on every rank
 *                      then succeeds.
 *   stale gradient     under FULL_SHARD and SHARD_GRAD_OP a program keeps
 *   pointer            head's acx_param_grad pointer from step 1 and adds
 *                      into it in step 2 (llm.c-style cached pointers): the
 *                      buffer was handed to the reduce-scatter at step 1's
 *                      boundary, so acx_unit_grads_ready of head fails with
 *                      ACX_ERR_STATE on every rank, naming the parameter and
 *                      "stale"; the same program fetching the pointer anew
 *                      each step passes (the no-false-positive case above).
 * On one rank only the first and last parts run (nothing can differ).
 */
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "tests/acx_test_mpi.h"

#define NUNITS 3

static int rank_, size_;
static const char *const unit_names[NUNITS] = {"enc", "dec", "head"};
static const int64_t shapes[NUNITS][2] = {{6, 4}, {6, 4}, {3, 5}};
static const float init_value[NUNITS] = {1.0f, 2.0f, 3.0f};

typedef struct net {
    acx_accelerator_t *acc;
    acx_model_t *m;
    acx_unit_t *u[NUNITS];
    acx_param_t *p[NUNITS];
    acx_optimizer_t *opt;
} net_t;

#define TRY(call)                                                                                  \
    do {                                                                                           \
        acx_status_t st_ = (call);                                                                 \
        if (st_ != ACX_OK) return st_;                                                             \
    } while (0)

static acx_status_t net_open(net_t *net, int strategy, int ranks_per_node) {
    acx_config_t cfg = ACX_CONFIG_DEFAULT;
    cfg.sharding_strategy = strategy;
    if (ranks_per_node > 0) cfg.ranks_per_node = ranks_per_node;
    cfg.fsdp.forward_prefetch = 1;
    memset(net, 0, sizeof *net);
    TRY(acx_init(NULL, NULL, &cfg, &net->acc));
    TRY(acx_model_create(net->acc, &net->m));
    for (int u = 0; u < NUNITS; u++) {
        char pname[32];
        snprintf(pname, sizeof pname, "%s.weight", unit_names[u]);
        TRY(acx_model_add_unit(net->m, unit_names[u], &net->u[u]));
        TRY(acx_unit_add_param(net->u[u], pname, 2, shapes[u],
                               ACX_INIT_SPEC_CONSTANT(init_value[u]), &net->p[u]));
    }
    acx_sgd_hparams_t hp = {.lr = 1.0};
    TRY(acx_sgd_create(net->m, &hp, &net->opt));
    return acx_prepare(net->acc, net->m, net->opt, NULL);
}

static void net_close(net_t *net) {
    if (net->acc) acx_finalize(net->acc);
    net->acc = NULL;
}

/* msg contains the printf-formatted needle. */
static int has(const char *msg, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int has(const char *msg, const char *fmt, ...) {
    char needle[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(needle, sizeof needle, fmt, ap);
    va_end(ap);
    if (strstr(msg, needle) != NULL) return 1;
    fprintf(stderr, "\n[r%d] message lacks \"%s\": %s\n", rank_, needle, msg);
    return 0;
}

/* "rank 0" on 2 ranks, "ranks 0,2" on 3, "ranks 0,2-3" on 4: every rank but 1. */
static const char *others_text(void) {
    static char buf[32];
    if (size_ == 2)
        snprintf(buf, sizeof buf, "rank 0");
    else if (size_ == 3)
        snprintf(buf, sizeof buf, "ranks 0,2");
    else
        snprintf(buf, sizeof buf, "ranks 0,2-%d", size_ - 1);
    return buf;
}

/* All elements of unit u's parameter (acquired) equal v. */
static int data_is(const net_t *net, int u, float v) {
    const float *w = acx_param_data(net->p[u]);
    if (w == NULL) return 0;
    for (int64_t i = 0; i < shapes[u][0] * shapes[u][1]; i++)
        if (w[i] != v) {
            fprintf(stderr, "\n[r%d] %s[%lld] = %g, expected %g\n", rank_, unit_names[u],
                    (long long)i, (double)w[i], (double)v);
            return 0;
        }
    return 1;
}

/* ---- the usual order passes ---- */

static int normal_order(int strategy, int ranks_per_node) {
    net_t net;
    float *full = NULL;
    CHECK_OK(net_open(&net, strategy, ranks_per_node));
    full = malloc(64 * sizeof *full);
    CHECK(full != NULL);
    const double mean_grad = (size_ + 1) / 2.0;
    for (int step = 0; step < 2; step++) {
        const float now = (float)step; /* steps taken so far */
        CHECK_OK(acx_accumulate_begin(net.acc));
        for (int u = 0; u < NUNITS; u++) { /* forward */
            CHECK_OK(acx_unit_acquire(net.u[u]));
            CHECK(data_is(&net, u, (float)(init_value[u] - now * mean_grad)));
            CHECK_OK(acx_unit_release(net.u[u]));
        }
        for (int u = NUNITS - 1; u >= 0; u--) { /* backward */
            CHECK_OK(acx_unit_acquire(net.u[u]));
            float *g = acx_param_grad(net.p[u]);
            CHECK(g != NULL);
            for (int64_t i = 0; i < shapes[u][0] * shapes[u][1]; i++)
                g[i] += (float)(rank_ + 1);
            CHECK_OK(acx_unit_grads_ready(net.u[u]));
            CHECK_OK(acx_unit_release(net.u[u]));
        }
        CHECK_OK(acx_backward_end(net.acc));
        CHECK_OK(acx_optimizer_step(net.opt));
        CHECK_OK(acx_optimizer_zero_grad(net.opt));
        CHECK_OK(acx_accumulate_end(net.acc));
        for (int u = 0; u < NUNITS; u++) {
            CHECK_OK(acx_param_gather(net.p[u], full));
            for (int64_t i = 0; i < shapes[u][0] * shapes[u][1]; i++)
                CHECK(full[i] == (float)(init_value[u] - (step + 1) * mean_grad));
        }
    }
    free(full);
    net_close(&net);
    return 0;
error:
    free(full);
    net_close(&net);
    return 1;
}

static int test_no_false_positive(void) {
    int failed = normal_order(ACX_FULL_SHARD, 0);
    failed |= normal_order(ACX_SHARD_GRAD_OP, 0);
    if (size_ % 2 == 0) failed |= normal_order(ACX_HYBRID_SHARD, size_ / 2);
    return failed;
}

/* ---- mismatches ---- */

static int test_acquire_mismatch(void) {
    net_t net;
    CHECK_OK(net_open(&net, ACX_FULL_SHARD, 0));
    CHECK_OK(acx_accumulate_begin(net.acc));
    int mine = rank_ == 1 ? 1 : 0;
    double t0 = MPI_Wtime();
    acx_status_t st = acx_unit_acquire(net.u[mine]);
    const char *msg = acx_last_error();
    CHECK(st == ACX_ERR_INVALID_ARG);
    CHECK(MPI_Wtime() - t0 < 5.0);
    if (rank_ == 0) printf("\n  %s\n  ", strstr(msg, "collective mismatch"));
    CHECK(has(msg, "collective mismatch on sharded units"));
    CHECK(has(msg, "%s all_gather of unit 0 'enc' (count %d, float32)", others_text(),
              (int)(((6 + size_ - 1) / size_) * 4)));
    CHECK(has(msg, "rank 1 all_gather of unit 1 'dec' (count %d, float32)",
              (int)(((6 + size_ - 1) / size_) * 4)));
    CHECK(has(msg, "every rank must acquire units and report their gradients ready in the same "
                   "order"));
    /* nothing was gathered or mixed, and the ranks are still in step */
    CHECK_OK(acx_unit_acquire(net.u[0]));
    CHECK(data_is(&net, 0, 1.0f));
    CHECK_OK(acx_unit_release(net.u[0]));
    CHECK_OK(acx_accumulate_end(net.acc));
    net_close(&net);
    return 0;
error:
    net_close(&net);
    return 1;
}

static int test_grads_ready_mismatch(void) {
    net_t net;
    CHECK_OK(net_open(&net, ACX_SHARD_GRAD_OP, 0));
    CHECK_OK(acx_accumulate_begin(net.acc));
    for (int u = 0; u < NUNITS; u++) {
        CHECK_OK(acx_unit_acquire(net.u[u]));
        float *g = acx_param_grad(net.p[u]);
        CHECK(g != NULL);
        g[0] = 1.0f;
    }
    int first = rank_ == 1 ? 1 : 0;
    acx_status_t st = acx_unit_grads_ready(net.u[first]);
    const char *msg = acx_last_error();
    CHECK(st == ACX_ERR_INVALID_ARG);
    CHECK(has(msg, "%s reduce_scatter of unit 0 'enc' (count %d, float32, sum)", others_text(),
              (int)(((6 + size_ - 1) / size_) * 4)));
    CHECK(has(msg, "rank 1 reduce_scatter of unit 1 'dec' (count %d, float32, sum)",
              (int)(((6 + size_ - 1) / size_) * 4)));
    for (int u = 0; u < NUNITS; u++)
        CHECK_OK(acx_unit_release(net.u[u]));
    net_close(&net);
    return 0;
error:
    net_close(&net);
    return 1;
}

static int test_public_against_unit(void) {
    net_t net;
    CHECK_OK(net_open(&net, ACX_FULL_SHARD, 0));
    CHECK_OK(acx_accumulate_begin(net.acc));
    acx_status_t st;
    int line = 0;
    if (rank_ == 0) {
        line = __LINE__ + 1;
        st = acx_barrier(net.acc);
    } else {
        st = acx_unit_acquire(net.u[0]);
    }
    MPI_Bcast(&line, 1, MPI_INT, 0, MPI_COMM_WORLD);
    const char *msg = acx_last_error();
    CHECK(st == ACX_ERR_INVALID_ARG);
    CHECK(has(msg, "collective mismatch (the ranks are at different calls): rank 0 #"));
    CHECK(has(msg, " barrier at test_debug_units.c:%d", line));
    if (size_ == 2)
        CHECK(has(msg, "; rank 1 all_gather of unit 0 'enc' (count 12, float32)"));
    else
        CHECK(has(msg, "; ranks 1-%d all_gather of unit 0 'enc' (count %d, float32)", size_ - 1,
                  (int)(((6 + size_ - 1) / size_) * 4)));
    CHECK(has(msg, "every rank must acquire units"));
    CHECK_OK(acx_barrier(net.acc)); /* in step */
    CHECK_OK(acx_accumulate_end(net.acc));
    net_close(&net);
    return 0;
error:
    net_close(&net);
    return 1;
}

/* ---- a gradient pointer kept across a boundary ---- */

static int stale_pointer(int strategy) {
    net_t net;
    CHECK_OK(net_open(&net, strategy, 0));
    const int h = NUNITS - 1;
    const int64_t n = shapes[h][0] * shapes[h][1];
    float *kept = NULL;
    for (int step = 0; step < 2; step++) {
        CHECK_OK(acx_accumulate_begin(net.acc));
        for (int u = NUNITS - 1; u >= 0; u--) { /* backward only: the gradients matter here */
            CHECK_OK(acx_unit_acquire(net.u[u]));
            float *g = u == h && kept != NULL ? kept : acx_param_grad(net.p[u]);
            CHECK(g != NULL);
            if (u == h) kept = g; /* step 2 uses step 1's pointer */
            for (int64_t i = 0; i < n && u == h; i++)
                g[i] += 1.0f;
            acx_status_t st = acx_unit_grads_ready(net.u[u]);
            if (step == 1 && u == h) {
                CHECK(st == ACX_ERR_STATE);
                CHECK(has(acx_last_error(), "parameter '%s.weight'", unit_names[h]));
                CHECK(has(acx_last_error(), "is stale"));
                net_close(&net);
                return 0;
            }
            CHECK_OK(st);
            CHECK_OK(acx_unit_release(net.u[u]));
        }
        CHECK_OK(acx_backward_end(net.acc));
        CHECK_OK(acx_optimizer_step(net.opt));
        CHECK_OK(acx_accumulate_end(net.acc));
    }
    fprintf(stderr, "\n[r%d] the stale pointer was not reported\n", rank_);
error:
    net_close(&net);
    return 1;
}

static int test_stale_grad_pointer(void) {
    return stale_pointer(ACX_FULL_SHARD) | stale_pointer(ACX_SHARD_GRAD_OP);
}

int main(int argc, char **argv) {
    acx_test_mpi_begin(&argc, &argv, 120, &rank_, &size_);
    int failed = 0;
    failed |= acx_test_run_case("debug mode, sharded units in the usual order: no error",
                                test_no_false_positive);
    if (size_ >= 2) {
        failed |= acx_test_run_case("FULL_SHARD: ranks acquiring different units are named",
                                    test_acquire_mismatch);
        failed |= acx_test_run_case("SHARD_GRAD_OP: grads_ready of different units is named",
                                    test_grads_ready_mismatch);
        failed |= acx_test_run_case("a public collective against a unit's all-gather",
                                    test_public_against_unit);
    }
    failed |= acx_test_run_case("a gradient pointer kept across a boundary is reported stale",
                                test_stale_grad_pointer);
    MPI_Finalize();
    return failed ? 1 : 0;
}

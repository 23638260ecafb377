/*
 * tests/unit/test_sched.c — learning-rate schedules: the factor formulas
 * (base/optim_kernels.c, transformers' get_*_schedule_with_warmup) at
 * chosen steps against numbers worked out by hand, and the scheduler object
 * (runtime/scheduler.c) on an optimizer over an unprepared model: factor(0)
 * applied at creation as LambdaLR does, base_lr * factor(s) after s steps,
 * ownership and the argument checks.
 */
#include <math.h>
#include <stdint.h>

#include "runtime/accelerator.h"
#include "base/optim_kernels.h"
#include "sharding/model.h"
#include "tests/acx_test.h"

/* (1 + cos(pi/4)) / 2 and (1 + cos(3 pi/4)) / 2 */
#define COS_QUARTER  0.85355339059327376
#define COS_3QUARTER 0.14644660940672624

typedef struct point {
    int64_t s;
    double factor;
} point_t;

static int check_points(acx_schedule_kind_t kind, int64_t w, int64_t T, double c,
                        const point_t *pts, int n) {
    for (int i = 0; i < n; i++) {
        double f = acx_schedule_factor(kind, w, T, c, pts[i].s);
        if (!(fabs(f - pts[i].factor) <= 1e-12)) {
            fprintf(stderr, "\nkind %d w=%lld T=%lld c=%g: factor(%lld) = %.17g, expected %.17g\n",
                    (int)kind, (long long)w, (long long)T, c, (long long)pts[i].s, f,
                    pts[i].factor);
            return 1;
        }
    }
    return 0;
}

#define POINTS(kind, w, T, c, ...)                                                                 \
    check_points((kind), (w), (T), (c), (const point_t[]){__VA_ARGS__},                            \
                 (int)(sizeof((const point_t[]){__VA_ARGS__}) / sizeof(point_t)))

/* ---- formulas ---- */

static int test_constant(void) {
    TESTING("constant and constant_with_warmup factors");
    /* constant ignores warmup and total */
    CHECK(POINTS(ACX_SCHED_CONSTANT, 5, 10, 0.5, {0, 1.0}, {3, 1.0}, {1000, 1.0}) == 0);
    /* w = 4: s/4 below 4, then 1 */
    CHECK(POINTS(ACX_SCHED_CONSTANT_WITH_WARMUP, 4, 0, 0.5, {0, 0.0}, {1, 0.25}, {3, 0.75},
                 {4, 1.0}, {1000, 1.0}) == 0);
    /* w = 0: no warmup; w = 1: 0 on the very first step, then 1 */
    CHECK(POINTS(ACX_SCHED_CONSTANT_WITH_WARMUP, 0, 0, 0.5, {0, 1.0}, {7, 1.0}) == 0);
    CHECK(POINTS(ACX_SCHED_CONSTANT_WITH_WARMUP, 1, 0, 0.5, {0, 0.0}, {1, 1.0}) == 0);
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int test_linear(void) {
    TESTING("linear factors with warmup");
    /* w = 10, T = 110: s/10 up to 10, then (110 - s)/100, never below 0 */
    CHECK(POINTS(ACX_SCHED_LINEAR, 10, 110, 0.5, {0, 0.0}, {3, 0.3}, {5, 0.5}, {10, 1.0},
                 {35, 0.75}, {60, 0.5}, {109, 0.01}, {110, 0.0}, {200, 0.0}) == 0);
    /* w = 0, T = 4: 1, 0.75, 0.5, 0.25, 0 */
    CHECK(POINTS(ACX_SCHED_LINEAR, 0, 4, 0.5, {0, 1.0}, {1, 0.75}, {2, 0.5}, {3, 0.25}, {4, 0.0}) ==
          0);
    /* degenerate T = w = 0: (0 - s)/max(1, 0) -> 0 from the start, as transformers */
    CHECK(POINTS(ACX_SCHED_LINEAR, 0, 0, 0.5, {0, 0.0}, {1, 0.0}) == 0);
    /* T = w = 3: warmup, then 0 */
    CHECK(POINTS(ACX_SCHED_LINEAR, 3, 3, 0.5, {2, 2.0 / 3.0}, {3, 0.0}) == 0);
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int test_cosine(void) {
    TESTING("cosine factors: half and whole cycles, warmup, past T");
    /* w = 0, T = 100, half a cycle: 0.5 (1 + cos(pi s/100)) */
    CHECK(POINTS(ACX_SCHED_COSINE, 0, 100, 0.5, {0, 1.0}, {25, COS_QUARTER}, {50, 0.5},
                 {75, COS_3QUARTER}, {100, 0.0},
                 /* not clamped: transformers' cosine rises again after T */
                 {150, 0.5}, {200, 1.0}) == 0);
    /* w = 10, T = 110: s/10, then the same curve over 100 steps */
    CHECK(POINTS(ACX_SCHED_COSINE, 10, 110, 0.5, {0, 0.0}, {5, 0.5}, {10, 1.0}, {35, COS_QUARTER},
                 {60, 0.5}, {110, 0.0}) == 0);
    /* one whole cycle: 0.5 (1 + cos(2 pi s/100)) */
    CHECK(POINTS(ACX_SCHED_COSINE, 0, 100, 1.0, {0, 1.0}, {25, 0.5}, {50, 0.0}, {75, 0.5},
                 {100, 1.0}) == 0);
    /* num_cycles 0: constant 1 after warmup */
    CHECK(POINTS(ACX_SCHED_COSINE, 2, 10, 0.0, {1, 0.5}, {2, 1.0}, {9, 1.0}) == 0);
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

/* ---- the scheduler object ---- */

static int test_scheduler_object(void) {
    TESTING("scheduler on an optimizer: lr at creation and per step");
    acx_model_t *model = NULL;
    acx_optimizer_t *opt = NULL;
    acx_scheduler_t *sched = NULL, *other = NULL;
    acx_shard_context_t ctx = {0}; /* no accelerator: this test frees what it makes */
    CHECK_OK(acx_model_new(&ctx, &model));
    acx_adam_hparams_t hp = ACX_ADAMW_DEFAULT;
    hp.lr = 0.1;
    CHECK_OK(acx_adamw_create(model, &hp, &opt));

    /* LambdaLR semantics: factor(0) = 0 applies at once, base_lr stays 0.1 */
    CHECK_OK(acx_scheduler_create(opt, ACX_SCHED_LINEAR, 10, 110, 0.5, &sched));
    CHECK(acx_optimizer_lr(opt) == 0.0);
    CHECK_CLOSE(acx_scheduler_factor(sched, 60), 0.5, 0, 1e-15);
    for (int s = 1; s <= 5; s++)
        CHECK_OK(acx_scheduler_step(sched));
    CHECK_CLOSE(acx_optimizer_lr(opt), 0.05, 0, 1e-15); /* 0.1 * 5/10 */
    for (int s = 6; s <= 35; s++)
        CHECK_OK(acx_scheduler_step(sched));
    CHECK_CLOSE(acx_optimizer_lr(opt), 0.075, 0, 1e-15); /* 0.1 * (110-35)/100 */
    /* a manual lr lasts until the next scheduler step */
    CHECK_OK(acx_optimizer_set_lr(opt, 1.0));
    CHECK(acx_optimizer_lr(opt) == 1.0);
    CHECK_OK(acx_scheduler_step(sched));
    CHECK_CLOSE(acx_optimizer_lr(opt), 0.074, 0, 1e-15); /* s = 36 */

    /* one schedule per optimizer */
    CHECK_STATUS(acx_scheduler_create(opt, ACX_SCHED_CONSTANT, 0, 0, 0.5, &other), ACX_ERR_STATE,
                 "already has a schedule");
    CHECK(other == NULL);
    acx_optimizer_free(opt); /* frees the scheduler too (valgrind/ASan would see a leak) */
    opt = NULL;

    /* cosine with warmup on a fresh optimizer: base lr 0.1 */
    CHECK_OK(acx_adamw_create(model, &hp, &opt));
    CHECK_OK(acx_scheduler_create(opt, ACX_SCHED_COSINE, 10, 110, 0.5, &sched));
    CHECK(acx_optimizer_lr(opt) == 0.0);
    for (int s = 1; s <= 35; s++)
        CHECK_OK(acx_scheduler_step(sched));
    CHECK_CLOSE(acx_optimizer_lr(opt), 0.1 * COS_QUARTER, 0, 1e-15);
    acx_optimizer_free(opt);
    opt = NULL;

    /* constant: lr untouched at creation */
    CHECK_OK(acx_adamw_create(model, &hp, &opt));
    CHECK_OK(acx_scheduler_create(opt, ACX_SCHED_CONSTANT, 0, 0, 0.5, &sched));
    CHECK(acx_optimizer_lr(opt) == 0.1);
    CHECK_OK(acx_scheduler_step(sched));
    CHECK(acx_optimizer_lr(opt) == 0.1);
    acx_optimizer_free(opt);
    opt = NULL;
    acx_model_free(model);
    PASSED();
    return 0;
error:
    acx_optimizer_free(opt);
    acx_model_free(model);
    FAILED();
    return 1;
}

static int test_scheduler_checks(void) {
    TESTING("scheduler argument checks");
    acx_model_t *model = NULL;
    acx_optimizer_t *opt = NULL;
    acx_scheduler_t *sched = NULL;
    acx_shard_context_t ctx = {0};
    CHECK_OK(acx_model_new(&ctx, &model));
    acx_sgd_hparams_t hp = {.lr = 0.5};
    CHECK_OK(acx_sgd_create(model, &hp, &opt));

    CHECK_STATUS(acx_scheduler_create(opt, (acx_schedule_kind_t)7, 0, 10, 0.5, &sched),
                 ACX_ERR_INVALID_ARG, "invalid schedule kind 7");
    CHECK_STATUS(acx_scheduler_create(opt, ACX_SCHED_LINEAR, -1, 10, 0.5, &sched),
                 ACX_ERR_INVALID_ARG, "warmup_steps -1");
    CHECK_STATUS(acx_scheduler_create(opt, ACX_SCHED_CONSTANT_WITH_WARMUP, -3, 0, 0.5, &sched),
                 ACX_ERR_INVALID_ARG, "warmup_steps -3");
    CHECK_STATUS(acx_scheduler_create(opt, ACX_SCHED_LINEAR, 20, 10, 0.5, &sched),
                 ACX_ERR_INVALID_ARG, "total_steps 10");
    CHECK_STATUS(acx_scheduler_create(opt, ACX_SCHED_COSINE, 20, 19, 0.5, &sched),
                 ACX_ERR_INVALID_ARG, "expected >= warmup_steps (20)");
    CHECK_STATUS(acx_scheduler_create(opt, ACX_SCHED_COSINE, 0, 100, NAN, &sched),
                 ACX_ERR_INVALID_ARG, "num_cycles");
    CHECK_STATUS(acx_scheduler_create(opt, ACX_SCHED_COSINE, 0, 100, -0.5, &sched),
                 ACX_ERR_INVALID_ARG, "num_cycles -0.5");
    CHECK_STATUS(acx_scheduler_create(NULL, ACX_SCHED_CONSTANT, 0, 0, 0.5, &sched),
                 ACX_ERR_INVALID_ARG, "must not be NULL");
    CHECK_STATUS(acx_scheduler_step(NULL), ACX_ERR_INVALID_ARG, "NULL");
    CHECK(sched == NULL);
    CHECK(acx_optimizer_lr(opt) == 0.5); /* failed creations leave the lr alone */

    /* total_steps only matters for LINEAR and COSINE */
    CHECK_OK(acx_scheduler_create(opt, ACX_SCHED_CONSTANT_WITH_WARMUP, 4, 0, 0.5, &sched));
    CHECK(acx_optimizer_lr(opt) == 0.0);
    CHECK_OK(acx_scheduler_step(sched));
    CHECK(acx_optimizer_lr(opt) == 0.125);
    acx_optimizer_free(opt);
    acx_model_free(model);
    PASSED();
    return 0;
error:
    acx_optimizer_free(opt);
    acx_model_free(model);
    FAILED();
    return 1;
}

int main(void) {
    acx_test_watchdog(60);
    int failed = 0;
    failed += test_constant();
    failed += test_linear();
    failed += test_cosine();
    failed += test_scheduler_object();
    failed += test_scheduler_checks();
    return failed ? 1 : 0;
}

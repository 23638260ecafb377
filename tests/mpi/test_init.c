/*
 * tests/mpi/test_init.c — parameter initialization does not depend on the
 * world size: every rank holds bit-identical values, equal across runs with
 * 1..4 ranks (np = 1 writes the reference bits, larger runs compare), and a
 * different seed gives different values. Shapes include a parameter with
 * fewer rows than ranks and a 4-D (conv-like) weight.
 */
#include "tests/acx_test_mpi.h"

static int rank, world;

/* FNV-1a over the raw bytes of every parameter, in registration order. */
static uint64_t model_hash(acx_model_t *m) {
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < acx_model_num_params(m); i++) {
        acx_param_t *p = acx_model_param(m, i);
        const unsigned char *b = (const unsigned char *)acx_param_data(p);
        for (int64_t k = 0; k < acx_param_numel(p) * 4; k++)
            h = (h ^ b[k]) * 1099511628211ull;
    }
    return h;
}

static int build(int64_t seed, uint64_t *hash_p, double *stats_p) {
    acx_config_t cfg = ACX_CONFIG_DEFAULT;
    cfg.seed = seed;
    acx_accelerator_t *acc = NULL;
    acx_model_t *m;
    acx_unit_t *u1, *u2;
    acx_param_t *p;
    CHECK_OK(acx_init(NULL, NULL, &cfg, &acc));
    CHECK_OK(acx_model_create(acc, &m));
    CHECK_OK(acx_model_add_unit(m, "conv", &u1));
    CHECK_OK(acx_unit_add_param(u1, "conv.weight", 4, (int64_t[]){8, 3, 3, 3},
                                (acx_init_spec_t){.kind = ACX_INIT_KAIMING_NORMAL,
                                                  .nonlinearity = ACX_NONLIN_RELU,
                                                  .mode = ACX_FAN_OUT},
                                &p));
    CHECK_OK(acx_unit_add_param(u1, "conv.bias", 1, (int64_t[]){8}, ACX_INIT_SPEC_ZEROS, &p));
    CHECK_OK(acx_model_add_unit(m, "fc", &u2));
    CHECK_OK(acx_unit_add_param(u2, "fc.weight", 2, (int64_t[]){3, 216},
                                ACX_INIT_SPEC_LINEAR_WEIGHT, &p));
    CHECK_OK(
        acx_unit_add_param(u2, "fc.bias", 1, (int64_t[]){3}, ACX_INIT_SPEC_LINEAR_BIAS(216), &p));
    CHECK_OK(acx_unit_add_param(u2, "fc.scale", 2, (int64_t[]){2, 5},
                                ACX_INIT_SPEC_NORMAL(1.0, 0.02), &p));
    CHECK_OK(acx_prepare(acc, m, NULL, NULL));
    *hash_p = model_hash(m);
    /* fc.weight is U(-1/sqrt(216), 1/sqrt(216)): every value inside the bound */
    acx_param_t *fw = acx_model_param(m, 2);
    const float *w = acx_param_data(fw);
    double bound = 1.0 / sqrt(216.0), maxabs = 0;
    for (int64_t k = 0; k < acx_param_numel(fw); k++)
        maxabs = fmax(maxabs, fabs(w[k]));
    CHECK(maxabs <= bound && maxabs > 0.5 * bound);
    /* conv.bias is zeros */
    const float *cb = acx_param_data(acx_model_param(m, 1));
    for (int k = 0; k < 8; k++)
        CHECK(cb[k] == 0.0f);
    *stats_p = maxabs;
    CHECK_OK(acx_finalize(acc));
    return 0;
error:
    if (acc) acx_finalize(acc);
    return 1;
}

int main(int argc, char **argv) {
    acx_test_mpi_begin(&argc, &argv, 120, &rank, &world);
    char path[1100];
    acx_test_tmp_path(path, sizeof path, "init_ref.bin");
    int failed = 0;
    uint64_t h = 0, h2 = 0, lo, hi;
    double st;

    TESTING("initialization identical on every rank and for every world size");
    failed |= build(7, &h, &st);
    MPI_Allreduce(&h, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&h, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    if (lo != hi) {
        fprintf(stderr, "\nranks hold different initial values\n");
        failed = 1;
    }
    if (!failed && world == 1 && rank == 0) {
        FILE *f = fopen(path, "wb");
        failed |= f == NULL || fwrite(&h, sizeof h, 1, f) != 1;
        if (f) fclose(f);
    } else if (!failed) {
        uint64_t want = 0;
        FILE *f = fopen(path, "rb");
        if (f == NULL || fread(&want, sizeof want, 1, f) != 1) {
            fprintf(stderr, "\nno 1-rank reference at %s\n", path);
            failed = 1;
        } else if (want != h) {
            fprintf(stderr, "\nnp=%d initial values differ from np=1 (hash %016llx vs %016llx)\n",
                    world, (unsigned long long)h, (unsigned long long)want);
            failed = 1;
        }
        if (f) fclose(f);
    }
    MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
    if (failed)
        FAILED();
    else
        PASSED();

    TESTING("a different seed gives different values");
    int f2 = build(8, &h2, &st);
    f2 |= h2 == h;
    MPI_Allreduce(MPI_IN_PLACE, &f2, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
    if (f2)
        FAILED();
    else
        PASSED();
    failed |= f2;
    MPI_Finalize();
    return failed ? 1 : 0;
}

/* The README's minimal program: softmax regression (784 -> 10) on
 * Fashion-MNIST, one epoch, on every rank of the job. Build and run it from
 * the repository root after scripts/install:
 *   cc -O2 examples/minimal/train.c $(pkg-config --cflags --libs acx) -lm -o data/train
 *   acx launch -n 2 data/train data/fashion-mnist.h5 data/weights.h5
 * tests/readme.test builds and runs it exactly so, and checks that the
 * README shows this file verbatim. */
#include <math.h>
#include <stdio.h>
#include <acx/acx.h>

int main(int argc, char **argv) {
    acx_config_t cfg = ACX_CONFIG_DEFAULT;
    acx_accelerator_t *acc;
    if (acx_init(&argc, &argv, &cfg, &acc) != ACX_OK) {
        fprintf(stderr, "%s\n", acx_last_error());
        return 1;
    }
    const char *data = argc > 1 ? argv[1] : "fashion-mnist.h5",
               *out = argc > 2 ? argv[2] : "weights.h5";

    acx_model_t *m;
    acx_unit_t *fc;
    acx_param_t *w, *b;
    acx_model_create(acc, &m);
    acx_model_add_unit(m, "fc", &fc);
    acx_unit_add_param(fc, "fc.weight", 2, (int64_t[]){10, 784}, ACX_INIT_SPEC_LINEAR_WEIGHT, &w);
    acx_unit_add_param(fc, "fc.bias", 1, (int64_t[]){10}, ACX_INIT_SPEC_LINEAR_BIAS(784), &b);

    acx_adam_hparams_t hp = ACX_ADAMW_DEFAULT;
    acx_optimizer_t *opt;
    acx_adamw_create(m, &hp, &opt);
    acx_dataloader_options_t lo = ACX_DATALOADER_OPTIONS_DEFAULT;
    lo.batch_size = 64;
    acx_dataloader_t *dl;
    if (acx_dataloader_open(acc, data, 2, (const char *const[]){"/train/images", "/train/labels"},
                            &lo, &dl) != ACX_OK ||
        acx_prepare(acc, m, opt, dl) != ACX_OK) {  /* storage, initial values, gradient buckets */
        fprintf(stderr, "%s\n", acx_last_error()); /* the same error on every rank */
        acx_finalize(acc);
        return 1;
    }

    const acx_batch_t *batch;
    double loss_sum = 0;
    int64_t steps = 0;
    while (acx_dataloader_next(dl, &batch) == ACX_OK &&
           batch != NULL) { /* this rank's share of the epoch */
        const unsigned char *x = batch->tensors[0], *y = batch->tensors[1]; /* [n x 784], [n] */
        acx_accumulate_begin(acc);
        acx_unit_acquire(fc);
        const float *W = acx_param_data(w), *B = acx_param_data(b); /* read-only */
        float *gW = acx_param_grad(w), *gB = acx_param_grad(b);
        double loss = 0;
        for (int64_t s = 0; s < batch->size; s++) { /* forward, then backward ADDING into gW, gB */
            float z[10], zmax = -INFINITY, sum = 0;
            for (int k = 0; k < 10; k++) {
                z[k] = B[k];
                for (int i = 0; i < 784; i++)
                    z[k] += W[k * 784 + i] * (float)x[s * 784 + i] / 255.0f;
                zmax = fmaxf(zmax, z[k]);
            }
            for (int k = 0; k < 10; k++)
                sum += (z[k] = expf(z[k] - zmax));
            loss -= log(z[y[s]] / sum) / (double)batch->size;
            for (int k = 0; k < 10; k++) { /* d(mean cross-entropy)/d(logit k) */
                float d = (z[k] / sum - (k == y[s])) / (float)batch->size;
                gB[k] += d;
                for (int i = 0; i < 784; i++)
                    gW[k * 784 + i] += d * (float)x[s * 784 + i] / 255.0f;
            }
        }
        acx_unit_grads_ready(fc); /* this unit's all-reduce may start now */
        acx_unit_release(fc);
        acx_backward_end(acc); /* gradients are now the mean over ranks */
        if (acx_sync_gradients(acc)) {
            acx_optimizer_step(opt);
            acx_optimizer_zero_grad(opt);
        }
        acx_accumulate_end(acc);
        loss_sum += loss;
        steps++;
    }
    double mean;
    acx_reduce_scalar(acc, loss_sum / (double)(steps > 0 ? steps : 1), ACX_OP_AVG, &mean);
    acx_print(acc, "%lld steps, train_loss %.4f; weights in %s\n", (long long)acx_step(acc), mean,
              out);
    acx_model_save_weights(m, out); /* h5dump -H weights.h5 */
    return acx_finalize(acc) == ACX_OK ? 0 : 1;
}

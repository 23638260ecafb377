/*
 * examples/fashion_mnist/mlp.h — a 3-layer perceptron (in-h1-h2-out, ReLU,
 * softmax cross-entropy) on CBLAS sgemm. Plain C with no acx dependency: the
 * acx program (fmnist.c) and the hand-rolled MPI baseline in benchmarks/ run
 * exactly this arithmetic, so their throughput compares only the runtime.
 *
 * Layouts follow torch.nn.Linear: W is [out x in] row-major, b is [out];
 * activations are [B x features] row-major.
 */
#ifndef ACX_EXAMPLE_MLP_H
#define ACX_EXAMPLE_MLP_H

#include <stddef.h>
#include <stdint.h>

#define MLP_LAYERS 3

/* Fashion-MNIST training-set pixel statistics (pixels scaled to [0,1]);
 * mlp_load_input and its device twin (mlp_cuda.h) normalize with them. */
#define FMNIST_MEAN 0.2860f
#define FMNIST_STD  0.3530f

typedef struct mlp_dims {
    int in, h1, h2, out; /* 784, 256, 128, 10 for Fashion-MNIST */
} mlp_dims_t;

/* Pointers to the 6 tensors (weights or their gradients) of the model:
 * w[l] is [fan_out(l) x fan_in(l)], b[l] is [fan_out(l)]. */
typedef struct mlp_tensors {
    float *w[MLP_LAYERS];
    float *b[MLP_LAYERS];
} mlp_tensors_t;

/* The weights as the passes read them: read-only (acx_param_data hands
 * out const pointers; the optimizer is what changes weights). */
typedef struct mlp_params {
    const float *w[MLP_LAYERS];
    const float *b[MLP_LAYERS];
} mlp_params_t;

/* A read-only view of tensors the caller owns (a test's or benchmark's own
 * weights). */
static inline mlp_params_t mlp_params_of(const mlp_tensors_t *t) {
    mlp_params_t p;
    for (int l = 0; l < MLP_LAYERS; l++) {
        p.w[l] = t->w[l];
        p.b[l] = t->b[l];
    }
    return p;
}

/* Activations for batches of up to max_batch samples. */
typedef struct mlp_workspace {
    int max_batch;
    float *x;               /* [B x in] normalized input */
    float *act[MLP_LAYERS]; /* [B x fan_out(l)]: post-ReLU for hidden layers, logits for the last */
    float *dact;            /* [B x max(fan_out)] gradient w.r.t. the current layer's output */
    float *dtmp;            /* [B x max(fan_out)] gradient w.r.t. the current layer's input */
} mlp_workspace_t;

int mlp_fan_in(const mlp_dims_t *d, int layer);
int mlp_fan_out(const mlp_dims_t *d, int layer);

/* Allocate / free a workspace. Returns 0 on success, -1 on allocation failure. */
int mlp_workspace_init(mlp_workspace_t *ws, const mlp_dims_t *d, int max_batch);
void mlp_workspace_free(mlp_workspace_t *ws);

/* Pixels uint8 [B x in] -> ws->x, normalized with Fashion-MNIST's mean and std. */
void mlp_load_input(mlp_workspace_t *ws, const mlp_dims_t *d, const uint8_t *pixels, int batch);

/* Forward pass over ws->x: fills ws->act[*] (logits in act[2]). */
void mlp_forward(const mlp_dims_t *d, const mlp_params_t *p, mlp_workspace_t *ws, int batch);

/* One layer of mlp_forward (0, 1, 2 in that order): ws->act[l] from its
 * input (ws->x or act[l - 1]); reads p->w[l] and p->b[l] only, so only
 * layer l's parameters need to be acquired. */
void mlp_forward_layer(const mlp_dims_t *d, const mlp_params_t *p, mlp_workspace_t *ws, int layer,
                       int batch);

/* Mean softmax cross-entropy over the batch, and d(loss)/d(logits) into
 * ws->dact ([B x out], already divided by B). Returns the mean loss. */
double mlp_loss(const mlp_dims_t *d, mlp_workspace_t *ws, const uint8_t *labels, int batch);

/* Backward through layer l (2, 1, 0 in that order), ADDING dW, db into g
 * (beta = 1, so micro-batches accumulate) and leaving the gradient w.r.t.
 * layer l's input in ws->dact for the next call. */
void mlp_backward_layer(const mlp_dims_t *d, const mlp_params_t *p, mlp_tensors_t *g,
                        mlp_workspace_t *ws, int layer, int batch);

/* Number of correct argmax predictions among the first n samples. */
int mlp_count_correct(const mlp_dims_t *d, const mlp_workspace_t *ws, const uint8_t *labels, int n,
                      uint8_t *correct);

#endif

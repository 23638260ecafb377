/*
 * examples/fashion_mnist/mlp_cuda.h — the MLP of mlp.h on a CUDA device:
 * the same layer shapes, activations, loss and function shapes, with the
 * parameters, gradients and activations in device memory. Matrix products
 * are cuBLAS sgemm in float32 (CUBLAS_COMPUTE_32F, never TF32); bias,
 * ReLU, softmax cross-entropy and argmax are small kernels
 * (mlp_cuda_kernels.cu). Everything is enqueued on one stream.
 *
 * What matches mlp.c bit for bit: the normalized input, the bias and ReLU
 * arithmetic given the same sgemm result, the bias gradients given the same
 * output gradient (summed over the batch in the same order), the loss and
 * its gradient given the same logits (double exp/log per row, the row sum
 * in row order). What does not: the sgemm themselves — cuBLAS and the CPU's
 * BLAS sum the k products in different orders (and cuBLAS fuses multiply-
 * adds), so a product differs from the CPU's by float rounding, about
 * sqrt(k) * 2^-24 of the magnitude of its terms. tests/gpu/test_mlp_cuda.c
 * checks the agreement.
 *
 * Plain C interface with no acx dependency (like mlp.h) and no CUDA types,
 * so a program that only calls it needs no CUDA headers. Every function
 * returns 0 on success and -1 on failure, with the reason in c->err, e.g.
 *   cublasGemmEx (fc2 forward, 128 x 100 x 256) failed: CUBLAS_STATUS_EXECUTION_FAILED: ...
 *   cudaMalloc (activations of fc1, 512000 bytes) failed: cudaErrorMemoryAllocation: ...
 *
 * A failed launch or an asynchronous device fault may surface only at the
 * next call that waits (mlp_cuda_loss_value, mlp_cuda_count_correct,
 * mlp_cuda_sync).
 *
 * Compiled only in builds with CUDA and cuBLAS (Makefile.am).
 */
#ifndef ACX_EXAMPLE_MLP_CUDA_H
#define ACX_EXAMPLE_MLP_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "mlp.h"

/* mlp_cuda_init flags */
#define MLP_CUDA_PEDANTIC 1 /* cuBLAS in CUBLAS_COMPUTE_32F_PEDANTIC (slower; for tests) */

/* The device workspace for batches of up to max_batch samples: mlp.h's
 * mlp_workspace_t in device memory, plus what the device side needs to
 * receive a batch and hand back the loss. Fields are read-only to callers;
 * device pointers may be copied from (tests do) after mlp_cuda_sync. */
typedef struct mlp_cuda {
    int max_batch, device, flags;
    void *stream;           /* cudaStream_t: every call's work goes here */
    int own_stream;         /* created by mlp_cuda_init (destroyed by mlp_cuda_free) */
    void *cublas;           /* cublasHandle_t, bound to stream */
    void *loss_ready;       /* cudaEvent_t recorded after the loss is copied out */
    uint8_t *pixels;        /* device [B x in]: the batch as read */
    uint8_t *labels;        /* device [B] */
    uint8_t *correct;       /* device [B]: 1 where the argmax is the label */
    float *x;               /* device [B x in]: normalized input */
    float *act[MLP_LAYERS]; /* device [B x fan_out(l)]: post-ReLU; logits for the last */
    float *dact;            /* device [B x max width]: d loss / d (current layer's output) */
    float *dtmp;            /* device [B x max width]: d loss / d (current layer's input) */
    double *row_loss;       /* device [B]: per-sample cross-entropy */
    double *loss;           /* device [1]: mean over the batch */
    double *loss_host;      /* pinned host [1]: copy of *loss */
    uint8_t *correct_host;  /* host [B]: the argmax flags copied back */
    char err[512];          /* why the last call failed */
} mlp_cuda_t;

/* Bind `device` (cudaSetDevice; -1: keep the current one), allocate the
 * workspace for up to max_batch samples, create a cuBLAS handle on `stream`.
 * stream: a cudaStream_t (cudaStreamLegacy / cudaStreamPerThread included),
 * or NULL to have a stream created here — blocking, i.e. ordered with the
 * legacy default stream as acx's staging copies expect — and destroyed by
 * mlp_cuda_free. flags: 0 or MLP_CUDA_PEDANTIC. On failure everything
 * allocated is freed and c->err says why. */
int mlp_cuda_init(mlp_cuda_t *c, const mlp_dims_t *d, int max_batch, int device, void *stream,
                  int flags);

/* Wait for the stream, then free what mlp_cuda_init allocated (c->err kept). */
void mlp_cuda_free(mlp_cuda_t *c);

/* The stream (a cudaStream_t) every call enqueues on: give it to acx
 * (acx_set_compute_stream) so the gradient all-reduce follows the backward. */
void *mlp_cuda_stream(const mlp_cuda_t *c);

/* 1 if p is device memory (cudaMemoryTypeDevice), 0 if host memory (pinned,
 * managed and plain host memory alike), -1 with c->err set on error. */
int mlp_cuda_is_device_pointer(mlp_cuda_t *c, const void *p);

/* Copy a host batch to the device — pixels uint8 [B x in], labels uint8 [B]
 * (NULL: none; then mlp_cuda_loss and mlp_cuda_count_correct must not
 * follow) — and normalize the pixels into c->x as mlp_load_input does.
 * Labels must be < d->out (fmnist.c checks them on the host). The host
 * buffers may be reused when this returns. */
int mlp_cuda_load_batch(mlp_cuda_t *c, const mlp_dims_t *d, const uint8_t *pixels,
                        const uint8_t *labels, int batch);

/* Forward pass over c->x with device tensors p: fills c->act[*] (logits in
 * act[2]), as mlp_forward. */
int mlp_cuda_forward(const mlp_dims_t *d, const mlp_params_t *p, mlp_cuda_t *c, int batch);

/* One layer of mlp_cuda_forward (0, 1, 2 in that order), as
 * mlp_forward_layer: reads p->w[l] and p->b[l] only. */
int mlp_cuda_forward_layer(const mlp_dims_t *d, const mlp_params_t *p, mlp_cuda_t *c, int layer,
                           int batch);

/* Mean softmax cross-entropy over the batch and d(loss)/d(logits) into
 * c->dact ([B x out], divided by B), as mlp_loss; the mean stays on the
 * device until mlp_cuda_loss_value asks for it. */
int mlp_cuda_loss(const mlp_dims_t *d, mlp_cuda_t *c, int batch);

/* The mean loss of the last mlp_cuda_loss: waits for that loss only (not
 * for work enqueued after it, such as the backward). */
int mlp_cuda_loss_value(mlp_cuda_t *c, double *loss_p);

/* Backward through layer l (2, 1, 0 in that order), ADDING dW, db into the
 * device tensors g (beta = 1: micro-batches accumulate) and leaving the
 * gradient w.r.t. layer l's input in c->dact, as mlp_backward_layer. */
int mlp_cuda_backward_layer(const mlp_dims_t *d, const mlp_params_t *p, mlp_tensors_t *g,
                            mlp_cuda_t *c, int layer, int batch);

/* Argmax of the logits of the first n samples against their labels, as
 * mlp_count_correct (ties go to the lower class): *hits_p = number correct,
 * correct (host [n], may be NULL) = 1 where correct. Waits for the stream. */
int mlp_cuda_count_correct(const mlp_dims_t *d, mlp_cuda_t *c, int n, uint8_t *correct,
                           int *hits_p);

/* Wait for everything enqueued so far; reports asynchronous device errors. */
int mlp_cuda_sync(mlp_cuda_t *c);

#endif

/*
 * examples/fashion_mnist/mlp_cuda.c — the MLP of mlp_cuda.h: device memory,
 * the cuBLAS matrix products and the order of the launches. The kernels
 * themselves are in mlp_cuda_kernels.cu; the CPU version this must track is
 * mlp.c.
 *
 * Layout: mlp.h's tensors and activations are row-major; cuBLAS is
 * column-major, where a row-major [r x c] matrix reads as its transpose
 * [c x r] with leading dimension c. Each product of mlp.c is rewritten as
 * the product of the transposes:
 *
 *   forward   out[B x fo] = in[B x fi] . W^T   <=>  out^T = W . in^T
 *             gemm(T, N, m fo, n B, k fi; A W lda fi, B in ldb fi; C out ldc fo)
 *   backward  dW[fo x fi] += dout^T . in       <=>  dW^T += in^T . dout
 *             gemm(N, T, m fi, n fo, k B; A in lda fi, B dout ldb fo; C dW ldc fi), beta 1
 *             din[B x fi] = dout[B x fo] . W   <=>  din^T = W^T . dout^T
 *             gemm(N, N, m fi, n B, k fo; A W lda fi, B dout ldb fo; C din ldc fi)
 *
 * (checked on the CPU: cblas_sgemm in CblasColMajor with these arguments
 * gives mlp.c's CblasRowMajor results exactly.)
 *
 * Precision: cublasGemmEx with float32 data and CUBLAS_COMPUTE_32F (or
 * _PEDANTIC under MLP_CUDA_PEDANTIC) in CUBLAS_DEFAULT_MATH: no TF32
 * (that needs CUBLAS_COMPUTE_32F_FAST_TF32 or CUBLAS_TF32_TENSOR_OP_MATH,
 * and NVIDIA_TF32_OVERRIDE can only turn it off) and no atomics
 * (CUBLAS_ATOMICS_NOT_ALLOWED), so a run is bitwise reproducible on one
 * GPU model and cuBLAS version, as cuBLAS documents.
 */
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlp_cuda.h"
#include "mlp_cuda_kernels.h"

static const char *const layer_names[MLP_LAYERS] = {"fc1", "fc2", "fc3"};

/* ---- errors ---- */

static int fail(mlp_cuda_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int fail(mlp_cuda_t *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof c->err, fmt, ap);
    va_end(ap);
    return -1;
}

/* A failed runtime call leaves a (non-sticky) last error that a later
 * launch check would report again: read it back (device/cuda_check.h does too). */
static int cuda_fail(mlp_cuda_t *c, cudaError_t ret, const char *call, const char *what) {
    (void)cudaGetLastError();
    return fail(c, "%s (%s) failed: %s: %s", call, what, cudaGetErrorName(ret),
                cudaGetErrorString(ret));
}

static int cublas_fail(mlp_cuda_t *c, cublasStatus_t ret, const char *call, const char *what) {
    return fail(c, "%s (%s) failed: %s: %s", call, what, cublasGetStatusName(ret),
                cublasGetStatusString(ret));
}

/* A runtime call or a kernel launcher; `name` is the call without its
 * arguments (reads better in a message), `what` what it was doing. */
#define CU_NAMED(call, name, what)                                                                 \
    do {                                                                                           \
        cudaError_t mlp_cu_ret_ = (call);                                                          \
        if (mlp_cu_ret_ != cudaSuccess) return cuda_fail(c, mlp_cu_ret_, (name), (what));          \
    } while (0)

#define CUBLAS(call, name, what)                                                                   \
    do {                                                                                           \
        cublasStatus_t mlp_cb_ret_ = (call);                                                       \
        if (mlp_cb_ret_ != CUBLAS_STATUS_SUCCESS)                                                  \
            return cublas_fail(c, mlp_cb_ret_, (name), (what));                                    \
    } while (0)

static cudaStream_t stream_of(const mlp_cuda_t *c) { return (cudaStream_t)c->stream; }

static int max_width(const mlp_dims_t *d) {
    int m = d->in;
    if (d->h1 > m) m = d->h1;
    if (d->h2 > m) m = d->h2;
    if (d->out > m) m = d->out;
    return m;
}

static int check_batch(mlp_cuda_t *c, int batch, const char *fn) {
    if (batch < 1 || batch > c->max_batch)
        return fail(c, "%s: batch of %d samples, expected 1..%d (the workspace's max_batch)", fn,
                    batch, c->max_batch);
    return 0;
}

/* ---- setup ---- */

static int alloc(mlp_cuda_t *c, void **p, size_t bytes, const char *what) {
    char desc[96];
    snprintf(desc, sizeof desc, "%s, %zu bytes", what, bytes);
    CU_NAMED(cudaMalloc(p, bytes), "cudaMalloc", desc);
    return 0;
}

int mlp_cuda_init(mlp_cuda_t *c, const mlp_dims_t *d, int max_batch, int device, void *stream,
                  int flags) {
    memset(c, 0, sizeof *c);
    c->max_batch = max_batch;
    c->device = device;
    c->flags = flags;
    if (max_batch < 1) return fail(c, "mlp_cuda_init: max_batch %d, expected >= 1", max_batch);
    if (device >= 0) {
        char what[32];
        snprintf(what, sizeof what, "device %d", device);
        CU_NAMED(cudaSetDevice(device), "cudaSetDevice", what);
    } else {
        CU_NAMED(cudaGetDevice(&c->device), "cudaGetDevice", "the current device");
    }
    size_t b = (size_t)max_batch, w = (size_t)max_width(d), f = sizeof(float);
    cudaStream_t s = (cudaStream_t)stream;
    if (s == NULL) {
        /* cudaStreamDefault flags: blocking, ordered with the legacy default stream */
        CU_NAMED(cudaStreamCreate(&s), "cudaStreamCreate", "the MLP's stream");
        c->own_stream = 1;
    }
    c->stream = s;
    cudaEvent_t ev;
    cublasHandle_t h;
    cublasStatus_t cret;
    cudaError_t ret = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    if (ret != cudaSuccess) {
        cuda_fail(c, ret, "cudaEventCreateWithFlags", "the loss event");
        goto err;
    }
    c->loss_ready = ev;
    if ((cret = cublasCreate(&h)) != CUBLAS_STATUS_SUCCESS) {
        cublas_fail(c, cret, "cublasCreate", "the MLP's cuBLAS handle");
        goto err;
    }
    c->cublas = h;
    if ((cret = cublasSetStream(h, s)) != CUBLAS_STATUS_SUCCESS ||
        (cret = cublasSetMathMode(h, CUBLAS_DEFAULT_MATH)) != CUBLAS_STATUS_SUCCESS ||
        (cret = cublasSetAtomicsMode(h, CUBLAS_ATOMICS_NOT_ALLOWED)) != CUBLAS_STATUS_SUCCESS ||
        (cret = cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST)) != CUBLAS_STATUS_SUCCESS) {
        cublas_fail(c, cret, "cublasSet{Stream,MathMode,AtomicsMode,PointerMode}",
                    "configuring the cuBLAS handle");
        goto err;
    }
    if (alloc(c, (void **)&c->pixels, b * (size_t)d->in, "input pixels") ||
        alloc(c, (void **)&c->labels, b, "labels") ||
        alloc(c, (void **)&c->correct, b, "argmax flags") ||
        alloc(c, (void **)&c->x, b * (size_t)d->in * f, "normalized input"))
        goto err;
    for (int l = 0; l < MLP_LAYERS; l++) {
        char what[48];
        snprintf(what, sizeof what, "activations of %s", layer_names[l]);
        if (alloc(c, (void **)&c->act[l], b * (size_t)mlp_fan_out(d, l) * f, what)) goto err;
    }
    if (alloc(c, (void **)&c->dact, b * w * f, "output gradients") ||
        alloc(c, (void **)&c->dtmp, b * w * f, "input gradients") ||
        alloc(c, (void **)&c->row_loss, b * sizeof(double), "per-sample losses") ||
        alloc(c, (void **)&c->loss, sizeof(double), "mean loss"))
        goto err;
    ret = cudaMallocHost((void **)&c->loss_host, sizeof(double));
    if (ret != cudaSuccess) {
        cuda_fail(c, ret, "cudaMallocHost", "pinned mean loss, 8 bytes");
        goto err;
    }
    *c->loss_host = 0.0;
    if ((c->correct_host = malloc(b)) == NULL) {
        fail(c, "malloc (argmax flags on the host, %zu bytes) failed: out of memory", b);
        goto err;
    }
    return 0;
err:;
    char why[sizeof c->err];
    memcpy(why, c->err, sizeof why);
    mlp_cuda_free(c);
    memcpy(c->err, why, sizeof why);
    return -1;
}

void mlp_cuda_free(mlp_cuda_t *c) {
    if (c->stream) cudaStreamSynchronize(stream_of(c));
    if (c->cublas) cublasDestroy((cublasHandle_t)c->cublas);
    if (c->loss_ready) cudaEventDestroy((cudaEvent_t)c->loss_ready);
    cudaFree(c->pixels);
    cudaFree(c->labels);
    cudaFree(c->correct);
    cudaFree(c->x);
    for (int l = 0; l < MLP_LAYERS; l++)
        cudaFree(c->act[l]);
    cudaFree(c->dact);
    cudaFree(c->dtmp);
    cudaFree(c->row_loss);
    cudaFree(c->loss);
    cudaFreeHost(c->loss_host);
    free(c->correct_host);
    if (c->own_stream && c->stream) cudaStreamDestroy(stream_of(c));
    (void)cudaGetLastError();
    char err[sizeof c->err];
    memcpy(err, c->err, sizeof err);
    memset(c, 0, sizeof *c);
    memcpy(c->err, err, sizeof err);
}

void *mlp_cuda_stream(const mlp_cuda_t *c) { return c->stream; }

int mlp_cuda_is_device_pointer(mlp_cuda_t *c, const void *p) {
    struct cudaPointerAttributes a;
    CU_NAMED(cudaPointerGetAttributes(&a, p), "cudaPointerGetAttributes", "a parameter pointer");
    return a.type == cudaMemoryTypeDevice;
}

/* ---- a batch ---- */

int mlp_cuda_load_batch(mlp_cuda_t *c, const mlp_dims_t *d, const uint8_t *pixels,
                        const uint8_t *labels, int batch) {
    if (check_batch(c, batch, "mlp_cuda_load_batch")) return -1;
    size_t n = (size_t)batch * (size_t)d->in;
    /* From pageable memory: the copy returns once the bytes are staged, so
     * the caller may reuse its buffers (the loader's next batch). */
    CU_NAMED(cudaMemcpyAsync(c->pixels, pixels, n, cudaMemcpyHostToDevice, stream_of(c)),
             "cudaMemcpyAsync", "pixels to the device");
    if (labels)
        CU_NAMED(
            cudaMemcpyAsync(c->labels, labels, (size_t)batch, cudaMemcpyHostToDevice, stream_of(c)),
            "cudaMemcpyAsync", "labels to the device");
    CU_NAMED(mlpk_normalize(c->pixels, c->x, n, FMNIST_MEAN, FMNIST_STD, stream_of(c)),
             "launching mlpk_normalize", "the input");
    return 0;
}

/* C[m x n] = alpha op(A) op(B) + beta C, column-major float32, no TF32. */
static int gemm(mlp_cuda_t *c, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                const float *a, int lda, const float *b, int ldb, float beta, float *out, int ldc,
                const char *layer, const char *pass) {
    const float one = 1.0f;
    cublasComputeType_t ct =
        c->flags & MLP_CUDA_PEDANTIC ? CUBLAS_COMPUTE_32F_PEDANTIC : CUBLAS_COMPUTE_32F;
    cublasStatus_t ret =
        cublasGemmEx((cublasHandle_t)c->cublas, ta, tb, m, n, k, &one, a, CUDA_R_32F, lda, b,
                     CUDA_R_32F, ldb, &beta, out, CUDA_R_32F, ldc, ct, CUBLAS_GEMM_DEFAULT);
    if (ret != CUBLAS_STATUS_SUCCESS) {
        char what[96];
        snprintf(what, sizeof what, "%s %s, %d x %d x %d", layer, pass, m, n, k);
        return cublas_fail(c, ret, "cublasGemmEx", what);
    }
    return 0;
}

int mlp_cuda_forward_layer(const mlp_dims_t *d, const mlp_params_t *p, mlp_cuda_t *c, int l,
                           int batch) {
    if (check_batch(c, batch, "mlp_cuda_forward_layer")) return -1;
    const float *in = l == 0 ? c->x : c->act[l - 1];
    int fi = mlp_fan_in(d, l), fo = mlp_fan_out(d, l);
    if (gemm(c, CUBLAS_OP_T, CUBLAS_OP_N, fo, batch, fi, p->w[l], fi, in, fi, 0.0f, c->act[l], fo,
             layer_names[l], "forward"))
        return -1;
    CU_NAMED(mlpk_bias_act(c->act[l], p->b[l], batch, fo, l < MLP_LAYERS - 1, stream_of(c)),
             "launching mlpk_bias_act", layer_names[l]);
    return 0;
}

int mlp_cuda_forward(const mlp_dims_t *d, const mlp_params_t *p, mlp_cuda_t *c, int batch) {
    for (int l = 0; l < MLP_LAYERS; l++)
        if (mlp_cuda_forward_layer(d, p, c, l, batch)) return -1;
    return 0;
}

int mlp_cuda_loss(const mlp_dims_t *d, mlp_cuda_t *c, int batch) {
    if (check_batch(c, batch, "mlp_cuda_loss")) return -1;
    float inv_b = 1.0f / (float)batch; /* mlp_loss's, rounded once on the host */
    CU_NAMED(mlpk_softmax_xent(c->act[MLP_LAYERS - 1], c->labels, batch, d->out, inv_b, c->dact,
                               c->row_loss, c->loss, stream_of(c)),
             "launching mlpk_softmax_xent", "the loss");
    CU_NAMED(cudaMemcpyAsync(c->loss_host, c->loss, sizeof(double), cudaMemcpyDeviceToHost,
                             stream_of(c)),
             "cudaMemcpyAsync", "the mean loss to the host");
    CU_NAMED(cudaEventRecord((cudaEvent_t)c->loss_ready, stream_of(c)), "cudaEventRecord",
             "after the loss");
    return 0;
}

int mlp_cuda_loss_value(mlp_cuda_t *c, double *loss_p) {
    CU_NAMED(cudaEventSynchronize((cudaEvent_t)c->loss_ready), "cudaEventSynchronize",
             "waiting for the loss");
    *loss_p = *c->loss_host;
    return 0;
}

int mlp_cuda_backward_layer(const mlp_dims_t *d, const mlp_params_t *p, mlp_tensors_t *g,
                            mlp_cuda_t *c, int layer, int batch) {
    if (check_batch(c, batch, "mlp_cuda_backward_layer")) return -1;
    if (layer < 0 || layer >= MLP_LAYERS)
        return fail(c, "mlp_cuda_backward_layer: layer %d, expected 0..%d", layer, MLP_LAYERS - 1);
    int fi = mlp_fan_in(d, layer), fo = mlp_fan_out(d, layer);
    const char *name = layer_names[layer];
    const float *in = layer == 0 ? c->x : c->act[layer - 1];
    const float *dout = c->dact; /* [B x fo] */
    if (gemm(c, CUBLAS_OP_N, CUBLAS_OP_T, fi, fo, batch, in, fi, dout, fo, 1.0f, g->w[layer], fi,
             name, "weight gradient"))
        return -1;
    CU_NAMED(mlpk_bias_grad(dout, g->b[layer], batch, fo, stream_of(c)), "launching mlpk_bias_grad",
             name);
    if (layer == 0) return 0; /* no gradient w.r.t. the input pixels */
    if (gemm(c, CUBLAS_OP_N, CUBLAS_OP_N, fi, batch, fo, p->w[layer], fi, dout, fo, 0.0f, c->dtmp,
             fi, name, "input gradient"))
        return -1;
    CU_NAMED(mlpk_relu_mask(in, c->dtmp, (size_t)batch * (size_t)fi, stream_of(c)),
             "launching mlpk_relu_mask", name);
    float *t = c->dact;
    c->dact = c->dtmp;
    c->dtmp = t;
    return 0;
}

/* ---- accuracy ---- */

int mlp_cuda_count_correct(const mlp_dims_t *d, mlp_cuda_t *c, int n, uint8_t *correct,
                           int *hits_p) {
    if (check_batch(c, n, "mlp_cuda_count_correct")) return -1;
    uint8_t *flags = c->correct_host;
    CU_NAMED(
        mlpk_argmax_correct(c->act[MLP_LAYERS - 1], c->labels, n, d->out, c->correct, stream_of(c)),
        "launching mlpk_argmax_correct", "accuracy");
    CU_NAMED(cudaMemcpyAsync(flags, c->correct, (size_t)n, cudaMemcpyDeviceToHost, stream_of(c)),
             "cudaMemcpyAsync", "argmax flags to the host");
    CU_NAMED(cudaStreamSynchronize(stream_of(c)), "cudaStreamSynchronize", "argmax flags");
    int hits = 0;
    for (int i = 0; i < n; i++)
        hits += flags[i];
    if (correct) memcpy(correct, flags, (size_t)n);
    *hits_p = hits;
    return 0;
}

int mlp_cuda_sync(mlp_cuda_t *c) {
    CU_NAMED(cudaStreamSynchronize(stream_of(c)), "cudaStreamSynchronize", "the MLP's stream");
    return 0;
}

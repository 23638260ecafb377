/*
 * tests/unit/cuda_shim/cublas_v2.h — the CPU test double of the one cuBLAS
 * product acx-gpt's device model uses (cublasGemmStridedBatchedEx on
 * float32), as CBLAS column-major sgemm per batch entry; see
 * cuda_runtime_api.h beside it for what the double is for.
 */
#ifndef ACX_TEST_CUDA_SHIM_CUBLAS_H
#define ACX_TEST_CUDA_SHIM_CUBLAS_H

#include <cblas.h>
#include <stdint.h>

#include "cuda_runtime_api.h"

typedef enum { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_INVALID_VALUE = 7 } cublasStatus_t;
typedef struct shim_cublas *cublasHandle_t;
typedef enum { CUBLAS_OP_N, CUBLAS_OP_T } cublasOperation_t;
typedef enum { CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_32F_PEDANTIC } cublasComputeType_t;
typedef enum { CUDA_R_32F } cudaDataType;
typedef enum { CUBLAS_GEMM_DEFAULT = -1 } cublasGemmAlgo_t;

static char shim_cublas_token_;
static inline cublasStatus_t cublasCreate(cublasHandle_t *h) {
    *h = (cublasHandle_t)(void *)&shim_cublas_token_;
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasDestroy(cublasHandle_t h) {
    (void)h;
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
    (void)h, (void)s;
    return CUBLAS_STATUS_SUCCESS;
}
static inline const char *cublasGetStatusName(cublasStatus_t s) {
    return s == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS" : "CUBLAS_STATUS_INVALID_VALUE";
}
static inline const char *cublasGetStatusString(cublasStatus_t s) {
    return s == CUBLAS_STATUS_SUCCESS ? "success" : "an invalid value was used as an argument";
}

/* cuBLAS's argument rules that matter here (leading dimensions at least the
 * rows of the stored operand), then C_i = alpha op(A_i) op(B_i) + beta C_i. */
static inline cublasStatus_t
cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                           int n, int k, const void *alpha, const void *A, cudaDataType at, int lda,
                           long long sa, const void *B, cudaDataType bt, int ldb, long long sb,
                           const void *beta, void *C, cudaDataType ct, int ldc, long long sc,
                           int batch, cublasComputeType_t comp, cublasGemmAlgo_t algo) {
    (void)h, (void)at, (void)bt, (void)ct, (void)comp, (void)algo;
    if (m < 0 || n < 0 || k < 0 || batch < 0 || lda < (ta == CUBLAS_OP_N ? m : k) ||
        ldb < (tb == CUBLAS_OP_N ? k : n) || ldc < m || lda < 1 || ldb < 1 || ldc < 1)
        return CUBLAS_STATUS_INVALID_VALUE;
    for (int i = 0; i < batch; i++)
        cblas_sgemm(CblasColMajor, ta == CUBLAS_OP_T ? CblasTrans : CblasNoTrans,
                    tb == CUBLAS_OP_T ? CblasTrans : CblasNoTrans, m, n, k, *(const float *)alpha,
                    (const float *)A + i * sa, lda, (const float *)B + i * sb, ldb,
                    *(const float *)beta, (float *)C + i * sc, ldc);
    return CUBLAS_STATUS_SUCCESS;
}

#endif

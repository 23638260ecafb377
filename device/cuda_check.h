/*
 * device/cuda_check.h — ACX_CUDA_CHECK: a failed CUDA runtime call becomes
 * ACX_ERR_CUDA with the call, cudaGetErrorName and cudaGetErrorString
 * (library-private; for files compiled only with CUDA: device/, the NCCL
 * backend, the CUDA half of device/device.c).
 *
 * The macro also reads the error back with cudaGetLastError: a failed
 * runtime call leaves its (non-sticky) error as the thread's "last error",
 * and a later, unrelated launch check would report it again.
 */
#ifndef ACX_CUDA_CHECK_H
#define ACX_CUDA_CHECK_H

#include <cuda_runtime_api.h>

#include "base/error.h"

#define ACX_CUDA_ERROR(ret, call)                                                                  \
    (cudaGetLastError(), ACX_ERROR(ACX_ERR_CUDA, "%s failed: %s: %s", (call),                      \
                                   cudaGetErrorName(ret), cudaGetErrorString(ret)))

#define ACX_CUDA_CHECK(call)                                                                       \
    do {                                                                                           \
        cudaError_t acx_cuda_ret_ = (call);                                                        \
        if (acx_cuda_ret_ != cudaSuccess) return ACX_CUDA_ERROR(acx_cuda_ret_, #call);             \
    } while (0)

#define ACX_CUDA_CHECK_GOTO(call, status, label)                                                   \
    do {                                                                                           \
        cudaError_t acx_cuda_ret_ = (call);                                                        \
        if (acx_cuda_ret_ != cudaSuccess) {                                                        \
            (status) = ACX_CUDA_ERROR(acx_cuda_ret_, #call);                                       \
            goto label;                                                                            \
        }                                                                                          \
    } while (0)

#endif /* ACX_CUDA_CHECK_H */

/* Helpers shared by the CUDA kernels (ops/<op>_cuda.cu): error checks that
 * return from the enclosing int function, and a grid size for 1-D loops. */
#ifndef HYFI_OPS_CUDA_COMMON_H
#define HYFI_OPS_CUDA_COMMON_H

#include "kernels_cuda.h"

#define HYFI_CUDA_CHECK(call)                                                   \
    do {                                                                        \
        cudaError_t hyfi_e_ = (call);                                           \
        if (hyfi_e_ != cudaSuccess) return -1000 - (int)hyfi_e_;                \
    } while (0)
#define HYFI_CUDNN_CHECK(call)                                                  \
    do {                                                                        \
        cudnnStatus_t hyfi_s_ = (call);                                         \
        if (hyfi_s_ != CUDNN_STATUS_SUCCESS) return -2000 - (int)hyfi_s_;       \
    } while (0)
#define HYFI_CUBLAS_CHECK(call)                                                 \
    do {                                                                        \
        cublasStatus_t hyfi_b_ = (call);                                        \
        if (hyfi_b_ != CUBLAS_STATUS_SUCCESS) return -3000 - (int)hyfi_b_;      \
    } while (0)
/* After a kernel launch: report a launch error. */
#define HYFI_CUDA_LAUNCHED() HYFI_CUDA_CHECK(cudaGetLastError())

#define HYFI_CUDA_THREADS 256
static inline unsigned hyfi_cuda_blocks(size_t count)
{
    size_t b = (count + HYFI_CUDA_THREADS - 1) / HYFI_CUDA_THREADS;
    if (b > 65535u * 16u) b = 65535u * 16u; /* kernels use grid-stride loops */
    return b ? (unsigned)b : 1u;
}

#endif

// concat_cuda.cu: CUDA path of channel concatenation: one grid-stride copy
// kernel over the N*c_part*HW elements of the part, indexing its channel range
// [c_offset, c_offset + c_part) of the (N, c_total, H, W) tensor. Backward
// copies (acc == 0) or adds (acc == 1) that range into dx.
#include "cuda_common.h"

// Index of part element i (part layout (N, c_part, HW)) inside (N, c_total, HW).
static __device__ __forceinline__ size_t hyfi_concat_index(size_t i, size_t block,
                                                           size_t ystride, size_t yoff)
{
    size_t n = i / block;
    return n * ystride + yoff + (i - n * block);
}

// y (N,c_total,HW) channel range = x (N,c_part,HW)
static __global__ void hyfi_concat_fwd_kernel(float *y, const float *x, size_t total,
                                              size_t block, size_t ystride, size_t yoff)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x)
        y[hyfi_concat_index(i, block, ystride, yoff)] = x[i];
}

// dx (N,c_part,HW) (+)= dy (N,c_total,HW) channel range
static __global__ void hyfi_concat_bwd_kernel(float *dx, const float *dy, size_t total,
                                              size_t block, size_t ystride, size_t yoff,
                                              int acc)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        float g = dy[hyfi_concat_index(i, block, ystride, yoff)];
        dx[i] = acc ? dx[i] + g : g;
    }
}

extern "C" int hyfi_concat_forward_cuda(hyfi_cuda_env *env, float *y, const float *x,
                                        const hyfi_concat_args *a)
{
    size_t block = (size_t)a->c_part * a->hw;
    size_t total = (size_t)a->n * block;
    if (total == 0) return 0;
    hyfi_concat_fwd_kernel<<<hyfi_cuda_blocks(total), HYFI_CUDA_THREADS, 0, env->stream>>>(
        y, x, total, block, (size_t)a->c_total * a->hw, (size_t)a->c_offset * a->hw);
    HYFI_CUDA_LAUNCHED();
    return 0;
}

extern "C" int hyfi_concat_backward_cuda(hyfi_cuda_env *env, float *dx, const float *dy,
                                         const hyfi_concat_args *a, int acc)
{
    size_t block = (size_t)a->c_part * a->hw;
    size_t total = (size_t)a->n * block;
    if (total == 0) return 0;
    hyfi_concat_bwd_kernel<<<hyfi_cuda_blocks(total), HYFI_CUDA_THREADS, 0, env->stream>>>(
        dx, dy, total, block, (size_t)a->c_total * a->hw, (size_t)a->c_offset * a->hw, acc);
    HYFI_CUDA_LAUNCHED();
    return 0;
}

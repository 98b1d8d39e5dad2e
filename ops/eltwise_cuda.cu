// eltwise_cuda.cu: CUDA path of the element-wise ops (relu forward/backward,
// add, accumulate, fill): own grid-stride kernels on env->stream; accumulate
// with acc == 0 is an asynchronous device-to-device copy. Same semantics as
// ops/eltwise_ref.c (index i only, so in-place calls are fine).
#include "cuda_common.h"

// y (count) = max(x, 0)
static __global__ void hyfi_relu_fwd_kernel(float *y, const float *x, size_t count)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = x[i];
        y[i] = v > 0.0f ? v : 0.0f;
    }
}

// dx (count) (+)= y > 0 ? dy : 0
static __global__ void hyfi_relu_bwd_kernel(float *dx, const float *dy, const float *y, size_t count,
                                     int acc)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x) {
        float g = y[i] > 0.0f ? dy[i] : 0.0f;
        dx[i] = acc ? dx[i] + g : g;
    }
}

// y (count) = a + b
static __global__ void hyfi_add_kernel(float *y, const float *a, const float *b, size_t count)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] = a[i] + b[i];
}

// dst (count) += src
static __global__ void hyfi_accumulate_kernel(float *dst, const float *src, size_t count)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] += src[i];
}

// dst (count) = value
static __global__ void hyfi_fill_kernel(float *dst, float value, size_t count)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = value;
}

extern "C" int hyfi_relu_forward_cuda(hyfi_cuda_env *env, float *y, const float *x, size_t count)
{
    if (count == 0) return 0;
    hyfi_relu_fwd_kernel<<<hyfi_cuda_blocks(count), HYFI_CUDA_THREADS, 0, env->stream>>>(y, x,
                                                                                        count);
    HYFI_CUDA_LAUNCHED();
    return 0;
}

extern "C" int hyfi_relu_backward_cuda(hyfi_cuda_env *env, float *dx, const float *dy,
                                       const float *y, size_t count, int acc)
{
    if (count == 0) return 0;
    hyfi_relu_bwd_kernel<<<hyfi_cuda_blocks(count), HYFI_CUDA_THREADS, 0, env->stream>>>(
        dx, dy, y, count, acc);
    HYFI_CUDA_LAUNCHED();
    return 0;
}

extern "C" int hyfi_add_forward_cuda(hyfi_cuda_env *env, float *y, const float *a,
                                     const float *b, size_t count)
{
    if (count == 0) return 0;
    hyfi_add_kernel<<<hyfi_cuda_blocks(count), HYFI_CUDA_THREADS, 0, env->stream>>>(y, a, b,
                                                                                   count);
    HYFI_CUDA_LAUNCHED();
    return 0;
}

extern "C" int hyfi_accumulate_cuda(hyfi_cuda_env *env, float *dst, const float *src,
                                    size_t count, int acc)
{
    if (count == 0) return 0;
    if (!acc) {
        if (dst != src)
            HYFI_CUDA_CHECK(cudaMemcpyAsync(dst, src, count * sizeof(float),
                                            cudaMemcpyDeviceToDevice, env->stream));
        return 0;
    }
    hyfi_accumulate_kernel<<<hyfi_cuda_blocks(count), HYFI_CUDA_THREADS, 0, env->stream>>>(
        dst, src, count);
    HYFI_CUDA_LAUNCHED();
    return 0;
}

extern "C" int hyfi_fill_cuda(hyfi_cuda_env *env, float *dst, float value, size_t count)
{
    if (count == 0) return 0;
    hyfi_fill_kernel<<<hyfi_cuda_blocks(count), HYFI_CUDA_THREADS, 0, env->stream>>>(dst, value,
                                                                                    count);
    HYFI_CUDA_LAUNCHED();
    return 0;
}

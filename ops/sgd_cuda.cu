// sgd_cuda.cu: CUDA path of the PyTorch SGD step (see sgd_ref.c), one
// grid-stride kernel: g' = g + wd * w; v = momentum * v + g' (v = g' when
// momentum == 0, v may then be NULL); w -= lr * v. With norms, each block
// sums g^2 and the new w^2 in double and adds them into norms (zeroed first)
// with atomics: the sums' rounding depends on the order, the update does not.
#include "cuda_common.h"

// w (count), v (count) or NULL when momentum == 0, norms (2) or NULL, g (count)
static __global__ void hyfi_sgd_kernel(float *w, float *v, float *norms, const float *g,
                                       size_t count, float lr, float mom, float wd)
{
    double gg = 0, ww = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x) {
        float gd = g[i] + wd * w[i];
        float vel = mom != 0.0f ? mom * v[i] + gd : gd;
        if (v) v[i] = vel;
        const float nw = w[i] - lr * vel;
        w[i] = nw;
        gg += (double)g[i] * g[i];
        ww += (double)nw * nw;
    }
    if (!norms) return;
    __shared__ double sg[HYFI_CUDA_THREADS], sw[HYFI_CUDA_THREADS];
    sg[threadIdx.x] = gg;
    sw[threadIdx.x] = ww;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            sg[threadIdx.x] += sg[threadIdx.x + s];
            sw[threadIdx.x] += sw[threadIdx.x + s];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        atomicAdd(&norms[0], (float)sg[0]);
        atomicAdd(&norms[1], (float)sw[0]);
    }
}

extern "C" int hyfi_sgd_update_cuda(hyfi_cuda_env *env, float *w, float *v, float *norms,
                                    const float *g, const hyfi_sgd_args *a)
{
    if (norms) HYFI_CUDA_CHECK(cudaMemsetAsync(norms, 0, 2 * sizeof(float), env->stream));
    if (a->count == 0) return 0;
    hyfi_sgd_kernel<<<hyfi_cuda_blocks(a->count), HYFI_CUDA_THREADS, 0, env->stream>>>(
        w, v, norms, g, a->count, a->lr, a->momentum, a->weight_decay);
    HYFI_CUDA_LAUNCHED();
    return 0;
}

// sgd_cuda.cu: CUDA path of the PyTorch SGD step (see sgd_ref.c), one
// grid-stride kernel: g' = g + wd * w; v = momentum * v + g' (v = g' when
// momentum == 0, v may then be NULL); w -= lr * v.
#include "cuda_common.h"

// w (count), v (count) or NULL when momentum == 0, g (count)
static __global__ void hyfi_sgd_kernel(float *w, float *v, const float *g, size_t count,
                                       float lr, float mom, float wd)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x) {
        float gd = g[i] + wd * w[i];
        float vel = mom != 0.0f ? mom * v[i] + gd : gd;
        if (v) v[i] = vel;
        w[i] -= lr * vel;
    }
}

extern "C" int hyfi_sgd_update_cuda(hyfi_cuda_env *env, float *w, float *v, const float *g,
                                    const hyfi_sgd_args *a)
{
    if (a->count == 0) return 0;
    hyfi_sgd_kernel<<<hyfi_cuda_blocks(a->count), HYFI_CUDA_THREADS, 0, env->stream>>>(
        w, v, g, a->count, a->lr, a->momentum, a->weight_decay);
    HYFI_CUDA_LAUNCHED();
    return 0;
}

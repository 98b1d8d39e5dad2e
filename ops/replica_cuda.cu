// replica_cuda.cu: CUDA path of the replica kernels (see replica_ref.c): an
// asynchronous device copy for slices; the running-statistics combine as one
// grid-stride kernel in double with the replicas' pointers passed by value.
#include "cuda_common.h"

// dst (dst_off + count), src (src_off + count)
extern "C" int hyfi_copy_slice_cuda(hyfi_cuda_env *env, float *dst, const float *src,
                                    const hyfi_slice_args *a)
{
    if (a->count == 0) return 0;
    HYFI_CUDA_CHECK(cudaMemcpyAsync(dst + a->dst_off, src + a->src_off, a->count * sizeof(float),
                                    cudaMemcpyDeviceToDevice, env->stream));
    return 0;
}

struct rcomb_ptrs {
    const float *r[HYFI_RCOMB_MAX];
};

// x (count) in/out, r0 (count), p.r[0 .. nrep-2] (count)
static __global__ void hyfi_running_combine_kernel(float *x, const float *r0, rcomb_ptrs p,
                                                   size_t count, int nrep, double decay)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x) {
        double v = x[i];
        for (int k = 1; k < nrep; k++) v = decay * v + ((double)p.r[k - 1][i] - decay * (double)r0[i]);
        x[i] = (float)v;
    }
}

extern "C" int hyfi_running_combine_cuda(hyfi_cuda_env *env, float *x, const float *r0,
                                         const float *const *r, const hyfi_rcomb_args *a)
{
    if (a->nrep < 1 || a->nrep - 1 > HYFI_RCOMB_MAX) return -1;
    if (a->count == 0) return 0;
    rcomb_ptrs p = {};
    for (int k = 0; k < a->nrep - 1; k++) p.r[k] = r[k];
    hyfi_running_combine_kernel<<<hyfi_cuda_blocks(a->count), HYFI_CUDA_THREADS, 0,
                                  env->stream>>>(x, r0, p, a->count, a->nrep, a->decay);
    HYFI_CUDA_LAUNCHED();
    return 0;
}

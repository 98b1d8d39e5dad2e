// xent_cuda.cu: CUDA path of softmax cross-entropy, own kernels.
// Forward: one warp per row (8 rows per 256-thread block, grid-stride over
// rows): warp max, sum of exponentials, probabilities, and the row's -log p
// stored as a double in the worker workspace; then one single-block kernel sums
// the N row losses in a fixed order (deterministic) and writes loss[0] = scale *
// sum. Bad labels (outside [0,K)) contribute 0 to the loss; unlike the CPU
// paths the forward cannot report them (-2) without synchronising, so it
// returns 0. Backward: grid-stride over N*K, dlogits = scale * dloss[0] *
// (p - onehot), zero for bad-label rows; dloss is read on the device.
#include "cuda_common.h"

#include <math.h>

#define HYFI_XENT_WARPS 8 // rows per forward block
#define HYFI_XENT_REDUCE_THREADS 256

static __device__ __forceinline__ float hyfi_warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Butterfly sum: every lane ends with the same, order-fixed value.
static __device__ __forceinline__ float hyfi_warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// prob (N,K) = softmax(logits (N,K)) per row; rowloss (N) = -log p[label] or 0
static __global__ void hyfi_xent_fwd_kernel(float *prob, double *rowloss, const float *logits,
                                            const int32_t *labels, int n, int k)
{
    int lane = threadIdx.x & 31;
    int warp = threadIdx.x >> 5;
    for (int r = blockIdx.x * HYFI_XENT_WARPS + warp; r < n; r += gridDim.x * HYFI_XENT_WARPS) {
        const float *z = logits + (size_t)r * k;
        float *p = prob + (size_t)r * k;
        float m = -INFINITY;
        for (int c = lane; c < k; c += 32) m = fmaxf(m, z[c]);
        m = hyfi_warp_max(m);
        float s = 0.0f;
        for (int c = lane; c < k; c += 32) s += expf(z[c] - m);
        s = hyfi_warp_sum(s);
        float inv = 1.0f / s;
        for (int c = lane; c < k; c += 32) p[c] = expf(z[c] - m) * inv;
        if (lane == 0) {
            int32_t l = labels[r];
            rowloss[r] = (l < 0 || l >= k) ? 0.0 : (double)logf(s) - (double)(z[l] - m);
        }
    }
}

// loss[0] = scale * sum of rowloss (N), one block, fixed summation order
static __global__ void hyfi_xent_reduce_kernel(float *loss, const double *rowloss, int n,
                                               float scale)
{
    __shared__ double part[HYFI_XENT_REDUCE_THREADS];
    double s = 0.0;
    for (int i = threadIdx.x; i < n; i += HYFI_XENT_REDUCE_THREADS) s += rowloss[i];
    part[threadIdx.x] = s;
    __syncthreads();
    for (int h = HYFI_XENT_REDUCE_THREADS / 2; h > 0; h >>= 1) {
        if (threadIdx.x < h) part[threadIdx.x] += part[threadIdx.x + h];
        __syncthreads();
    }
    if (threadIdx.x == 0) loss[0] = (float)(part[0] * (double)scale);
}

// dlogits (N,K) (+)= scale * dloss[0] * (prob - onehot(label)); 0 for bad labels
static __global__ void hyfi_xent_bwd_kernel(float *dlogits, const float *prob,
                                            const int32_t *labels, const float *dloss,
                                            size_t total, int k, float scale, int acc)
{
    float s = scale * dloss[0];
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / (size_t)k;
        int c = (int)(i - r * (size_t)k);
        int32_t l = labels[r];
        float g = (l < 0 || l >= k) ? 0.0f : s * (prob[i] - (c == l ? 1.0f : 0.0f));
        dlogits[i] = acc ? dlogits[i] + g : g;
    }
}

extern "C" int hyfi_xent_forward_cuda(hyfi_cuda_env *env, float *loss, float *prob,
                                      const float *logits, const int32_t *labels,
                                      const hyfi_xent_args *a)
{
    if (a->n <= 0 || a->k <= 0) {
        HYFI_CUDA_CHECK(cudaMemsetAsync(loss, 0, sizeof(float), env->stream));
        return 0;
    }
    double *rowloss = (double *)hyfi_cuda_workspace(env, (size_t)a->n * sizeof(double));
    if (!rowloss) return -1;
    size_t blocks = ((size_t)a->n + HYFI_XENT_WARPS - 1) / HYFI_XENT_WARPS;
    if (blocks > 65535u * 16u) blocks = 65535u * 16u; // grid-stride over rows
    hyfi_xent_fwd_kernel<<<(unsigned)blocks, 32 * HYFI_XENT_WARPS, 0, env->stream>>>(
        prob, rowloss, logits, labels, a->n, a->k);
    HYFI_CUDA_LAUNCHED();
    hyfi_xent_reduce_kernel<<<1, HYFI_XENT_REDUCE_THREADS, 0, env->stream>>>(loss, rowloss, a->n,
                                                                            a->scale);
    HYFI_CUDA_LAUNCHED();
    return 0;
}

extern "C" int hyfi_xent_backward_cuda(hyfi_cuda_env *env, float *dlogits, const float *prob,
                                       const int32_t *labels, const float *dloss,
                                       const hyfi_xent_args *a, int acc)
{
    size_t total = (size_t)a->n * (size_t)a->k;
    if (a->n <= 0 || a->k <= 0) return 0;
    hyfi_xent_bwd_kernel<<<hyfi_cuda_blocks(total), HYFI_CUDA_THREADS, 0, env->stream>>>(
        dlogits, prob, labels, dloss, total, a->k, a->scale, acc);
    HYFI_CUDA_LAUNCHED();
    return 0;
}

// batchnorm_cuda.cu: CUDA batch normalisation with own kernels (no cuDNN), the
// formulas of batchnorm_ref.c.
//
// Training forward: one block per channel; two passes over the channel's
// M = N*H*W values (sum -> mean, sum of squared deviations -> biased variance),
// accumulated per thread in double and reduced in a fixed order (deterministic),
// then the block normalises its channel, saves mean and variance and updates
// the running statistics on the device (unbiased variance, factor 1 when M == 1).
// Eval forward: elementwise with the running statistics.
// Backward: one block per channel reduces sum(dy) and sum(dy*xhat), writes
// dbeta and dgamma, then dx = gamma*invstd*(dy - sum(dy)/M - xhat*sum(dy*xhat)/M).
// acc == 1 adds to dx, dgamma and dbeta. N*H*W and N*C*H*W must fit in int.
#include "cuda_common.h"

#define BN_THREADS 512

// Sum of v over the block (blockDim.x a multiple of 32, at most 1024); every
// thread gets the result. `sh` holds 32 doubles; safe to call repeatedly.
__device__ static double bn_block_sum(double v, double *sh)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    __syncthreads(); // sh may still be read by a previous call
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < nwarps ? sh[lane] : 0.0;
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
        if (lane == 0) sh[0] = v;
    }
    __syncthreads();
    return sh[0];
}

// grid (C), block (BN_THREADS). y, x (N,C,H,W); mean, var, run_mean, run_var,
// gamma, beta (C).
__global__ static void bn_forward_train_kernel(float *y, float *mean, float *var,
                                               float *run_mean, float *run_var,
                                               const float *x, const float *gamma,
                                               const float *beta, int n, int c_total, int hw,
                                               float eps, float momentum, float unbias)
{
    __shared__ double sh[32];
    const int c = blockIdx.x;
    const int m = n * hw;
    double s = 0.0;
    for (int i = threadIdx.x; i < m; i += blockDim.x) {
        const int b = i / hw, j = i - b * hw;
        s += (double)x[((size_t)b * c_total + c) * hw + j];
    }
    const double mu = bn_block_sum(s, sh) / (double)m;
    double ss = 0.0;
    for (int i = threadIdx.x; i < m; i += blockDim.x) {
        const int b = i / hw, j = i - b * hw;
        const double d = (double)x[((size_t)b * c_total + c) * hw + j] - mu;
        ss += d * d;
    }
    const double v = bn_block_sum(ss, sh) / (double)m;
    const float muf = (float)mu;
    const float scale = (float)((double)gamma[c] / sqrt(v + (double)eps));
    const float shift = beta[c];
    for (int i = threadIdx.x; i < m; i += blockDim.x) {
        const int b = i / hw, j = i - b * hw;
        const size_t k = ((size_t)b * c_total + c) * hw + j;
        y[k] = (x[k] - muf) * scale + shift;
    }
    if (threadIdx.x == 0) {
        mean[c] = muf;
        var[c] = (float)v;
        run_mean[c] = (1.0f - momentum) * run_mean[c] + momentum * muf;
        run_var[c] = (1.0f - momentum) * run_var[c] + momentum * ((float)v * unbias);
    }
}

// Elementwise. y, x (N,C,H,W); gamma, beta, run_mean, run_var (C).
__global__ static void bn_forward_eval_kernel(float *y, const float *x, const float *gamma,
                                              const float *beta, const float *run_mean,
                                              const float *run_var, size_t count, int c_total,
                                              int hw, float eps)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x) {
        const int c = (int)((i / (size_t)hw) % (size_t)c_total);
        const float scale = gamma[c] * rsqrtf(run_var[c] + eps);
        y[i] = (x[i] - run_mean[c]) * scale + beta[c];
    }
}

// grid (C), block (BN_THREADS). dx, dy, x (N,C,H,W); dgamma, dbeta, gamma, mean, var (C).
__global__ static void bn_backward_kernel(float *dx, float *dgamma, float *dbeta,
                                          const float *dy, const float *x, const float *gamma,
                                          const float *mean, const float *var, int n,
                                          int c_total, int hw, float eps, int acc)
{
    __shared__ double sh[32];
    const int c = blockIdx.x;
    const int m = n * hw;
    const float mu = mean[c];
    const float invstd = (float)(1.0 / sqrt((double)var[c] + (double)eps));
    double sdy = 0.0, sdyx = 0.0;
    for (int i = threadIdx.x; i < m; i += blockDim.x) {
        const int b = i / hw, j = i - b * hw;
        const size_t k = ((size_t)b * c_total + c) * hw + j;
        const double g = (double)dy[k];
        sdy += g;
        sdyx += g * (((double)x[k] - (double)mu) * (double)invstd);
    }
    sdy = bn_block_sum(sdy, sh);
    sdyx = bn_block_sum(sdyx, sh);
    const float mdy = (float)(sdy / (double)m), mdyx = (float)(sdyx / (double)m);
    const float k0 = gamma[c] * invstd;
    for (int i = threadIdx.x; i < m; i += blockDim.x) {
        const int b = i / hw, j = i - b * hw;
        const size_t k = ((size_t)b * c_total + c) * hw + j;
        const float xhat = (x[k] - mu) * invstd;
        const float g = k0 * (dy[k] - mdy - xhat * mdyx);
        dx[k] = (acc & HYFI_BN_ACC_DX) ? dx[k] + g : g;
    }
    if (threadIdx.x == 0) {
        dgamma[c] = (acc & HYFI_BN_ACC_PARAMS) ? dgamma[c] + (float)sdyx : (float)sdyx;
        dbeta[c] = (acc & HYFI_BN_ACC_PARAMS) ? dbeta[c] + (float)sdy : (float)sdy;
    }
}

extern "C" int hyfi_batchnorm_forward_train_cuda(hyfi_cuda_env *env, float *y, float *mean,
                                                 float *var, float *run_mean, float *run_var,
                                                 const float *x, const float *gamma,
                                                 const float *beta,
                                                 const hyfi_batchnorm_args *a, int blk)
{
    if (blk || a->relu) return -1; /* blocked layouts, fused ReLU: CPU only (engine/layout.c) */
    const int hw = a->h * a->w;
    const double m = (double)a->n * (double)hw;
    const float unbias = m > 1.0 ? (float)(m / (m - 1.0)) : 1.0f;
    bn_forward_train_kernel<<<a->c, BN_THREADS, 0, env->stream>>>(
        y, mean, var, run_mean, run_var, x, gamma, beta, a->n, a->c, hw, a->eps, a->momentum,
        unbias);
    HYFI_CUDA_LAUNCHED();
    return 0;
}

extern "C" int hyfi_batchnorm_forward_eval_cuda(hyfi_cuda_env *env, float *y, const float *x,
                                                const float *gamma, const float *beta,
                                                const float *run_mean, const float *run_var,
                                                const hyfi_batchnorm_args *a, int blk)
{
    if (blk || a->relu) return -1;
    const int hw = a->h * a->w;
    const size_t count = (size_t)a->n * a->c * hw;
    bn_forward_eval_kernel<<<hyfi_cuda_blocks(count), HYFI_CUDA_THREADS, 0, env->stream>>>(
        y, x, gamma, beta, run_mean, run_var, count, a->c, hw, a->eps);
    HYFI_CUDA_LAUNCHED();
    return 0;
}

extern "C" int hyfi_batchnorm_backward_cuda(hyfi_cuda_env *env, float *dx, float *dgamma,
                                            float *dbeta, const float *dy, const float *x,
                                            const float *gamma, const float *y,
                                            const float *mean, const float *var,
                                            const hyfi_batchnorm_args *a, int acc, int blk)
{
    (void)y;
    if (blk || a->relu) return -1; /* fused ReLU: CPU only (hyfi_fuse_plan) */
    bn_backward_kernel<<<a->c, BN_THREADS, 0, env->stream>>>(
        dx, dgamma, dbeta, dy, x, gamma, mean, var, a->n, a->c, a->h * a->w, a->eps, acc);
    HYFI_CUDA_LAUNCHED();
    return 0;
}

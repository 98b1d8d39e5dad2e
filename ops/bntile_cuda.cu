// bntile_cuda.cu: batch normalisation over tiles on the GPU, the semantics of
// bntile_ref.c. Per-tile reductions: one block per channel, sums per thread in
// double reduced in a fixed order (deterministic). The combines are O(C *
// tiles): one thread per channel, the tiles' part pointers passed by value.
#include "cuda_common.h"

#define BNT_THREADS 512

__device__ static double bnt_block_sum(double v, double *sh)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    __syncthreads();
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

// grid (C). part (2C), x (N,C,H,W) of the tile.
__global__ static void bnt_stats_kernel(double *part, const float *x, int n, int C, int hw)
{
    __shared__ double sh[32];
    const int c = blockIdx.x, m = n * hw;
    double s = 0.0;
    for (int i = threadIdx.x; i < m; i += blockDim.x) {
        const int b = i / hw, j = i - b * hw;
        s += (double)x[((size_t)b * C + c) * hw + j];
    }
    const double mu = m > 0 ? bnt_block_sum(s, sh) / (double)m : 0.0;
    double ss = 0.0;
    for (int i = threadIdx.x; i < m; i += blockDim.x) {
        const int b = i / hw, j = i - b * hw;
        const double d = (double)x[((size_t)b * C + c) * hw + j] - mu;
        ss += d * d;
    }
    ss = bnt_block_sum(ss, sh);
    if (threadIdx.x == 0) {
        part[c] = mu;
        part[C + c] = ss;
    }
}

// grid (C). part (2C): sum(dy), sum(dy (x - mean)); dy, x (N,C,H,W); mean (C).
__global__ static void bnt_bwd_stats_kernel(double *part, const float *dy, const float *x,
                                            const float *mean, int n, int C, int hw)
{
    __shared__ double sh[32];
    const int c = blockIdx.x, m = n * hw;
    const double mu = mean[c];
    double s = 0.0, t = 0.0;
    for (int i = threadIdx.x; i < m; i += blockDim.x) {
        const int b = i / hw, j = i - b * hw;
        const size_t k = ((size_t)b * C + c) * hw + j;
        s += (double)dy[k];
        t += (double)dy[k] * ((double)x[k] - mu);
    }
    s = bnt_block_sum(s, sh);
    t = bnt_block_sum(t, sh);
    if (threadIdx.x == 0) {
        part[c] = s;
        part[C + c] = t;
    }
}

struct bnt_parts {
    const double *p[HYFI_MAX_TILES];
    double count[HYFI_MAX_TILES];
};

__global__ static void bnt_combine_kernel(float *mean, float *var, float *run_mean,
                                          float *run_var, bnt_parts parts, int nparts, int C,
                                          float momentum)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    double n = 0, mu = 0, m2 = 0;
    for (int i = 0; i < nparts; i++) {
        const double ni = parts.count[i];
        if (ni <= 0) continue;
        const double nn = n + ni, d = parts.p[i][c] - mu;
        mu += d * ni / nn;
        m2 += parts.p[i][C + c] + d * d * n * ni / nn;
        n = nn;
    }
    const double v = n > 0 ? m2 / n : 0, unbias = n > 1 ? n / (n - 1) : 1.0;
    mean[c] = (float)mu;
    var[c] = (float)v;
    run_mean[c] = (float)((1.0 - momentum) * run_mean[c] + momentum * mu);
    run_var[c] = (float)((1.0 - momentum) * run_var[c] + momentum * v * unbias);
}

__global__ static void bnt_bwd_combine_kernel(float *tot, float *dgamma, float *dbeta,
                                              bnt_parts parts, int nparts, const float *var,
                                              int C, float eps, int acc)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    double s = 0, t = 0;
    for (int i = 0; i < nparts; i++) {
        s += parts.p[i][c];
        t += parts.p[i][C + c];
    }
    tot[c] = (float)s;
    tot[C + c] = (float)t;
    const float dg = (float)(t / sqrt((double)var[c] + (double)eps)), db = (float)s;
    dgamma[c] = (acc & HYFI_BN_ACC_PARAMS) ? dgamma[c] + dg : dg;
    dbeta[c] = (acc & HYFI_BN_ACC_PARAMS) ? dbeta[c] + db : db;
}

// Elementwise. dx, dy, x (N,C,H,W) of the tile; gamma, mean, var (C); tot (2C).
__global__ static void bnt_bwd_apply_kernel(float *dx, const float *dy, const float *x,
                                            const float *gamma, const float *mean,
                                            const float *var, const float *tot, double total,
                                            size_t count, int C, int hw, float eps, int acc)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x) {
        const int c = (int)((i / (size_t)hw) % (size_t)C);
        const double invstd = 1.0 / sqrt((double)var[c] + (double)eps);
        const double k = gamma[c] * invstd / total;
        const double xhat = ((double)x[i] - mean[c]) * invstd;
        const double g = k * (total * dy[i] - tot[c] - xhat * (double)tot[C + c] * invstd);
        dx[i] = (acc & HYFI_BN_ACC_DX) ? dx[i] + (float)g : (float)g;
    }
}

static bnt_parts pack_parts(const double *const *parts, const hyfi_bn_combine_args *a)
{
    bnt_parts p;
    for (int i = 0; i < HYFI_MAX_TILES; i++) {
        p.p[i] = i < a->nparts ? parts[i] : nullptr;
        p.count[i] = i < a->nparts ? a->count[i] : 0.0;
    }
    return p;
}

extern "C" int hyfi_bn_stats_cuda(hyfi_cuda_env *env, double *part, const float *x,
                                  const hyfi_batchnorm_args *a)
{
    bnt_stats_kernel<<<a->c, BNT_THREADS, 0, env->stream>>>(part, x, a->n, a->c, a->h * a->w);
    HYFI_CUDA_LAUNCHED();
    return 0;
}

extern "C" int hyfi_bn_combine_cuda(hyfi_cuda_env *env, float *mean, float *var,
                                    float *run_mean, float *run_var, const double *const *parts,
                                    const hyfi_bn_combine_args *a)
{
    bnt_combine_kernel<<<(a->c + 127) / 128, 128, 0, env->stream>>>(
        mean, var, run_mean, run_var, pack_parts(parts, a), a->nparts, a->c, a->momentum);
    HYFI_CUDA_LAUNCHED();
    return 0;
}

extern "C" int hyfi_bn_bwd_stats_cuda(hyfi_cuda_env *env, double *part, const float *dy,
                                      const float *x, const float *mean,
                                      const hyfi_batchnorm_args *a)
{
    bnt_bwd_stats_kernel<<<a->c, BNT_THREADS, 0, env->stream>>>(part, dy, x, mean, a->n, a->c,
                                                                 a->h * a->w);
    HYFI_CUDA_LAUNCHED();
    return 0;
}

extern "C" int hyfi_bn_bwd_combine_cuda(hyfi_cuda_env *env, float *tot, float *dgamma,
                                        float *dbeta, const double *const *parts,
                                        const float *var, const hyfi_bn_combine_args *a,
                                        int acc)
{
    bnt_bwd_combine_kernel<<<(a->c + 127) / 128, 128, 0, env->stream>>>(
        tot, dgamma, dbeta, pack_parts(parts, a), a->nparts, var, a->c, a->eps, acc);
    HYFI_CUDA_LAUNCHED();
    return 0;
}

extern "C" int hyfi_bn_bwd_apply_cuda(hyfi_cuda_env *env, float *dx, const float *dy,
                                      const float *x, const float *gamma, const float *mean,
                                      const float *var, const float *tot, double total,
                                      const hyfi_batchnorm_args *a, int acc)
{
    const int hw = a->h * a->w;
    const size_t count = (size_t)a->n * a->c * hw;
    bnt_bwd_apply_kernel<<<hyfi_cuda_blocks(count), HYFI_CUDA_THREADS, 0, env->stream>>>(
        dx, dy, x, gamma, mean, var, tot, total, count, a->c, hw, a->eps, acc);
    HYFI_CUDA_LAUNCHED();
    return 0;
}

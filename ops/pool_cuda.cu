// pool_cuda.cu: CUDA pooling with own kernels, the formulas of pool_ref.c.
//
// Forwards: one thread per output element (global average pooling: one warp
// per (n, c) plane with a shuffle reduction).
// Backwards: one thread per input element gathers over the output windows
// that cover it, in ascending (oh, ow) order: deterministic, no atomics. For
// max pooling each covering window's argmax is recomputed from x with the
// reference's tie rule (first maximum in row-major window order, strictly
// greater replaces, padding never chosen) and the thread takes dy of the
// windows whose argmax is itself. acc == 1 adds to dx.
#include "cuda_common.h"

#include <math.h>

struct pool_geom {
    int h, w, ho, wo, kh, kw, sh, sw, ph, pw, cip;
};

static pool_geom pool_geom_of(const hyfi_pool_args *a)
{
    pool_geom g = {a->h, a->w, a->ho, a->wo, a->kh, a->kw, a->sh, a->sw, a->ph, a->pw,
                   a->count_include_pad};
    return g;
}

// Clipped window [h0, h1) x [w0, w1) of output (oh, ow).
__device__ static inline void pool_window(const pool_geom &g, int oh, int ow, int &h0, int &h1,
                                          int &w0, int &w1)
{
    const int hs = oh * g.sh - g.ph, ws = ow * g.sw - g.pw;
    h0 = hs < 0 ? 0 : hs;
    w0 = ws < 0 ? 0 : ws;
    h1 = hs + g.kh > g.h ? g.h : hs + g.kh;
    w1 = ws + g.kw > g.w ? g.w : ws + g.kw;
}

// Range [lo, hi] of outputs along one axis whose window covers input index i.
__device__ static inline void pool_cover(int i, int k, int s, int p, int nout, int &lo, int &hi)
{
    const int t = i + p - k + 1;
    lo = t <= 0 ? 0 : (t + s - 1) / s;
    hi = (i + p) / s;
    if (hi > nout - 1) hi = nout - 1;
}

// Argmax (plane offset ih*W + iw) of window (oh, ow); -1 when it has no in-image position.
__device__ static inline int pool_argmax(const float *xp, const pool_geom &g, int oh, int ow,
                                         float *maxval)
{
    int h0, h1, w0, w1;
    pool_window(g, oh, ow, h0, h1, w0, w1);
    float m = -INFINITY;
    int arg = -1;
    for (int ih = h0; ih < h1; ih++)
        for (int iw = w0; iw < w1; iw++) {
            const float v = xp[ih * g.w + iw];
            if (v > m) {
                m = v;
                arg = ih * g.w + iw;
            }
        }
    *maxval = m;
    return arg;
}

__device__ static inline int pool_divisor(const pool_geom &g, int h0, int h1, int w0, int w1)
{
    return g.cip ? g.kh * g.kw : (h1 - h0) * (w1 - w0);
}

// y (N,C,Ho,Wo), x (N,C,H,W); count = N*C*Ho*Wo.
__global__ static void maxpool_forward_kernel(float *y, const float *x, pool_geom g,
                                              size_t count)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x) {
        const int ow = (int)(i % (size_t)g.wo);
        const int oh = (int)((i / (size_t)g.wo) % (size_t)g.ho);
        const size_t plane = i / ((size_t)g.wo * g.ho);
        float m;
        pool_argmax(x + plane * g.h * g.w, g, oh, ow, &m);
        y[i] = m;
    }
}

// dx (N,C,H,W), dy (N,C,Ho,Wo), x (N,C,H,W); count = N*C*H*W.
__global__ static void maxpool_backward_kernel(float *dx, const float *dy, const float *x,
                                               pool_geom g, size_t count, int acc)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x) {
        const int iw = (int)(i % (size_t)g.w);
        const int ih = (int)((i / (size_t)g.w) % (size_t)g.h);
        const size_t plane = i / ((size_t)g.w * g.h);
        const float *xp = x + plane * g.h * g.w;
        const float *dyp = dy + plane * g.ho * g.wo;
        const int me = ih * g.w + iw;
        int oh0, oh1, ow0, ow1;
        pool_cover(ih, g.kh, g.sh, g.ph, g.ho, oh0, oh1);
        pool_cover(iw, g.kw, g.sw, g.pw, g.wo, ow0, ow1);
        float s = 0.0f;
        for (int oh = oh0; oh <= oh1; oh++)
            for (int ow = ow0; ow <= ow1; ow++) {
                float m;
                if (pool_argmax(xp, g, oh, ow, &m) == me) s += dyp[oh * g.wo + ow];
            }
        dx[i] = acc ? dx[i] + s : s;
    }
}

// y (N,C,Ho,Wo), x (N,C,H,W); count = N*C*Ho*Wo.
__global__ static void avgpool_forward_kernel(float *y, const float *x, pool_geom g,
                                              size_t count)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x) {
        const int ow = (int)(i % (size_t)g.wo);
        const int oh = (int)((i / (size_t)g.wo) % (size_t)g.ho);
        const size_t plane = i / ((size_t)g.wo * g.ho);
        const float *xp = x + plane * g.h * g.w;
        int h0, h1, w0, w1;
        pool_window(g, oh, ow, h0, h1, w0, w1);
        float s = 0.0f;
        for (int ih = h0; ih < h1; ih++)
            for (int iw = w0; iw < w1; iw++) s += xp[ih * g.w + iw];
        const int d = pool_divisor(g, h0, h1, w0, w1);
        y[i] = d > 0 ? s / (float)d : 0.0f;
    }
}

// dx (N,C,H,W), dy (N,C,Ho,Wo); count = N*C*H*W.
__global__ static void avgpool_backward_kernel(float *dx, const float *dy, pool_geom g,
                                               size_t count, int acc)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x) {
        const int iw = (int)(i % (size_t)g.w);
        const int ih = (int)((i / (size_t)g.w) % (size_t)g.h);
        const size_t plane = i / ((size_t)g.w * g.h);
        const float *dyp = dy + plane * g.ho * g.wo;
        int oh0, oh1, ow0, ow1;
        pool_cover(ih, g.kh, g.sh, g.ph, g.ho, oh0, oh1);
        pool_cover(iw, g.kw, g.sw, g.pw, g.wo, ow0, ow1);
        float s = 0.0f;
        for (int oh = oh0; oh <= oh1; oh++)
            for (int ow = ow0; ow <= ow1; ow++) {
                int h0, h1, w0, w1;
                pool_window(g, oh, ow, h0, h1, w0, w1);
                const int d = pool_divisor(g, h0, h1, w0, w1);
                if (d > 0) s += dyp[oh * g.wo + ow] / (float)d;
            }
        dx[i] = acc ? dx[i] + s : s;
    }
}

// One warp per plane. y (N,C), x (N,C,H,W); planes = N*C.
__global__ static void gap_forward_kernel(float *y, const float *x, size_t planes, int hw)
{
    const size_t warps = ((size_t)gridDim.x * blockDim.x) >> 5;
    const int lane = threadIdx.x & 31;
    for (size_t p = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) >> 5; p < planes;
         p += warps) {
        const float *xp = x + p * (size_t)hw;
        float s = 0.0f;
        for (int j = lane; j < hw; j += 32) s += xp[j];
        for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
        if (lane == 0) y[p] = s / (float)hw;
    }
}

// dx (N,C,H,W), dy (N,C); count = N*C*H*W.
__global__ static void gap_backward_kernel(float *dx, const float *dy, size_t count, int hw,
                                           int acc)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x) {
        const float g = dy[i / (size_t)hw] / (float)hw;
        dx[i] = acc ? dx[i] + g : g;
    }
}

extern "C" int hyfi_maxpool_forward_cuda(hyfi_cuda_env *env, float *y, const float *x,
                                         const hyfi_pool_args *a)
{
    if (a->blk) return -1; /* CPU layouts only: the engine keeps CUDA runs NCHW */
    const size_t count = (size_t)a->n * a->c * a->ho * a->wo;
    maxpool_forward_kernel<<<hyfi_cuda_blocks(count), HYFI_CUDA_THREADS, 0, env->stream>>>(
        y, x, pool_geom_of(a), count);
    HYFI_CUDA_LAUNCHED();
    return 0;
}

extern "C" int hyfi_maxpool_backward_cuda(hyfi_cuda_env *env, float *dx, const float *dy,
                                          const float *x, const hyfi_pool_args *a, int acc)
{
    if (a->blk) return -1; /* CPU layouts only: the engine keeps CUDA runs NCHW */
    const size_t count = (size_t)a->n * a->c * a->h * a->w;
    maxpool_backward_kernel<<<hyfi_cuda_blocks(count), HYFI_CUDA_THREADS, 0, env->stream>>>(
        dx, dy, x, pool_geom_of(a), count, acc);
    HYFI_CUDA_LAUNCHED();
    return 0;
}

extern "C" int hyfi_avgpool_forward_cuda(hyfi_cuda_env *env, float *y, const float *x,
                                         const hyfi_pool_args *a)
{
    if (a->blk) return -1; /* CPU layouts only: the engine keeps CUDA runs NCHW */
    const size_t count = (size_t)a->n * a->c * a->ho * a->wo;
    avgpool_forward_kernel<<<hyfi_cuda_blocks(count), HYFI_CUDA_THREADS, 0, env->stream>>>(
        y, x, pool_geom_of(a), count);
    HYFI_CUDA_LAUNCHED();
    return 0;
}

extern "C" int hyfi_avgpool_backward_cuda(hyfi_cuda_env *env, float *dx, const float *dy,
                                          const hyfi_pool_args *a, int acc)
{
    if (a->blk) return -1; /* CPU layouts only: the engine keeps CUDA runs NCHW */
    const size_t count = (size_t)a->n * a->c * a->h * a->w;
    avgpool_backward_kernel<<<hyfi_cuda_blocks(count), HYFI_CUDA_THREADS, 0, env->stream>>>(
        dx, dy, pool_geom_of(a), count, acc);
    HYFI_CUDA_LAUNCHED();
    return 0;
}

extern "C" int hyfi_gap_forward_cuda(hyfi_cuda_env *env, float *y, const float *x,
                                     const hyfi_pool_args *a)
{
    if (a->blk) return -1; /* CPU layouts only: the engine keeps CUDA runs NCHW */
    const size_t planes = (size_t)a->n * a->c;
    gap_forward_kernel<<<hyfi_cuda_blocks(planes * 32), HYFI_CUDA_THREADS, 0, env->stream>>>(
        y, x, planes, a->h * a->w);
    HYFI_CUDA_LAUNCHED();
    return 0;
}

extern "C" int hyfi_gap_backward_cuda(hyfi_cuda_env *env, float *dx, const float *dy,
                                      const hyfi_pool_args *a, int acc)
{
    if (a->blk) return -1; /* CPU layouts only: the engine keeps CUDA runs NCHW */
    const size_t count = (size_t)a->n * a->c * a->h * a->w;
    gap_backward_kernel<<<hyfi_cuda_blocks(count), HYFI_CUDA_THREADS, 0, env->stream>>>(
        dx, dy, count, a->h * a->w, acc);
    HYFI_CUDA_LAUNCHED();
    return 0;
}

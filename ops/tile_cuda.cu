// tile_cuda.cu: rectangle copies between spatial tiles on the GPU, the
// semantics of tile_ref.c. One launch per piece, a grid-stride loop over the
// piece's N*C*h*w elements; the zero fill of assemble is a cudaMemsetAsync.
#include "cuda_common.h"

// dst (planes, dh, dw) [.., dy0 + y, dx0 + x] (+)= src (planes, sh, sw) [.., sy0 + y, sx0 + x]
__global__ static void rect_kernel(float *dst, const float *src, size_t count, int h, int w,
                                   int dh, int dw, int dy0, int dx0, int sh, int sw, int sy0,
                                   int sx0, int acc)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x) {
        const int x = (int)(i % (size_t)w);
        const int y = (int)((i / (size_t)w) % (size_t)h);
        const size_t pl = i / ((size_t)w * h);
        const float v = src[(pl * sh + (size_t)(sy0 + y)) * sw + (sx0 + x)];
        float *d = &dst[(pl * dh + (size_t)(dy0 + y)) * dw + (dx0 + x)];
        *d = acc ? *d + v : v;
    }
}

extern "C" int hyfi_tile_assemble_cuda(hyfi_cuda_env *env, float *dst, const float *const *src,
                                       const hyfi_tile_args *a)
{
    const size_t planes = (size_t)a->n * a->c;
    if (a->zero_fill)
        HYFI_CUDA_CHECK(cudaMemsetAsync(dst, 0, planes * a->dst_h * a->dst_w * sizeof(float),
                                        env->stream));
    for (int i = 0; i < a->npieces; i++) {
        const hyfi_piece *p = &a->p[i];
        const size_t count = planes * p->h * p->w;
        rect_kernel<<<hyfi_cuda_blocks(count), HYFI_CUDA_THREADS, 0, env->stream>>>(
            dst, src[i], count, p->h, p->w, a->dst_h, a->dst_w, p->dst_y, p->dst_x, p->src_h,
            p->src_w, p->src_y, p->src_x, 0);
        HYFI_CUDA_LAUNCHED();
    }
    return 0;
}

extern "C" int hyfi_tile_scatter_cuda(hyfi_cuda_env *env, float *const *dst, const float *src,
                                      const hyfi_tile_args *a, unsigned acc_mask)
{
    const size_t planes = (size_t)a->n * a->c;
    for (int i = 0; i < a->npieces; i++) {
        const hyfi_piece *p = &a->p[i];
        const size_t count = planes * p->h * p->w;
        rect_kernel<<<hyfi_cuda_blocks(count), HYFI_CUDA_THREADS, 0, env->stream>>>(
            dst[i], src, count, p->h, p->w, p->src_h, p->src_w, p->src_y, p->src_x, a->dst_h,
            a->dst_w, p->dst_y, p->dst_x, (int)((acc_mask >> i) & 1u));
        HYFI_CUDA_LAUNCHED();
    }
    return 0;
}

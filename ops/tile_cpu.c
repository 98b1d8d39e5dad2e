/* tile_cpu.c: rectangle copies between spatial tiles, row by row with memcpy
 * (or a vectorised add), planes split over the calling worker's OpenMP
 * threads. Same semantics as tile_ref.c. */
#include "kernels.h"

#include <string.h>

int hyfi_tile_assemble_cpu(float *dst, const float *const *src, const hyfi_tile_args *a)
{
    const long planes = (long)a->n * a->c;
    const size_t dhw = (size_t)a->dst_h * a->dst_w;
#pragma omp parallel for schedule(static) if (planes * (long)dhw >= 65536)
    for (long pl = 0; pl < planes; pl++) {
        float *d = dst + (size_t)pl * dhw; /* dst (N,C,dst_h,dst_w) plane */
        if (a->zero_fill) memset(d, 0, dhw * sizeof(float));
        for (int i = 0; i < a->npieces; i++) {
            const hyfi_piece *p = &a->p[i];
            const float *s = src[i] + (size_t)pl * p->src_h * p->src_w; /* src[i] plane */
            for (int y = 0; y < p->h; y++)
                memcpy(d + (size_t)(p->dst_y + y) * a->dst_w + p->dst_x,
                       s + (size_t)(p->src_y + y) * p->src_w + p->src_x,
                       (size_t)p->w * sizeof(float));
        }
    }
    return 0;
}

int hyfi_tile_scatter_cpu(float *const *dst, const float *src, const hyfi_tile_args *a,
                          unsigned acc_mask)
{
    const long planes = (long)a->n * a->c;
    const size_t shw = (size_t)a->dst_h * a->dst_w;
#pragma omp parallel for schedule(static) if (planes * (long)shw >= 65536)
    for (long pl = 0; pl < planes; pl++) {
        const float *s = src + (size_t)pl * shw; /* src (N,C,dst_h,dst_w) plane */
        for (int i = 0; i < a->npieces; i++) {
            const hyfi_piece *p = &a->p[i];
            float *d = dst[i] + (size_t)pl * p->src_h * p->src_w; /* dst[i] plane */
            const int acc = (acc_mask >> i) & 1u;
            for (int y = 0; y < p->h; y++) {
                float *dr = d + (size_t)(p->src_y + y) * p->src_w + p->src_x;
                const float *sr = s + (size_t)(p->dst_y + y) * a->dst_w + p->dst_x;
                if (acc) {
#pragma omp simd
                    for (int x = 0; x < p->w; x++) dr[x] += sr[x];
                } else {
                    memcpy(dr, sr, (size_t)p->w * sizeof(float));
                }
            }
        }
    }
    return 0;
}

/* tile_ref.c: reference rectangle copies between spatial tiles (assemble,
 * scatter), element by element. */
#include "kernels.h"

#include <string.h>

int hyfi_tile_assemble_ref(float *dst, const float *const *src, const hyfi_tile_args *a)
{
    const size_t planes = (size_t)a->n * a->c, dhw = (size_t)a->dst_h * a->dst_w;
    if (a->zero_fill) memset(dst, 0, planes * dhw * sizeof(float));
    for (int i = 0; i < a->npieces; i++) {
        const hyfi_piece *p = &a->p[i];
        const size_t shw = (size_t)p->src_h * p->src_w;
        for (size_t pl = 0; pl < planes; pl++)
            for (int y = 0; y < p->h; y++)
                for (int x = 0; x < p->w; x++)
                    dst[pl * dhw + (size_t)(p->dst_y + y) * a->dst_w + (p->dst_x + x)] =
                        src[i][pl * shw + (size_t)(p->src_y + y) * p->src_w + (p->src_x + x)];
    }
    return 0;
}

int hyfi_tile_scatter_ref(float *const *dst, const float *src, const hyfi_tile_args *a,
                          unsigned acc_mask)
{
    const size_t planes = (size_t)a->n * a->c, shw_all = (size_t)a->dst_h * a->dst_w;
    for (int i = 0; i < a->npieces; i++) {
        const hyfi_piece *p = &a->p[i];
        const size_t thw = (size_t)p->src_h * p->src_w;
        const int acc = (acc_mask >> i) & 1u;
        for (size_t pl = 0; pl < planes; pl++)
            for (int y = 0; y < p->h; y++)
                for (int x = 0; x < p->w; x++) {
                    float *d = &dst[i][pl * thw + (size_t)(p->src_y + y) * p->src_w + (p->src_x + x)];
                    const float v =
                        src[pl * shw_all + (size_t)(p->dst_y + y) * a->dst_w + (p->dst_x + x)];
                    *d = acc ? *d + v : v;
                }
    }
    return 0;
}

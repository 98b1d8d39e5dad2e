/* concat_ref.c: reference (specification) of channel concatenation, one part
 * at a time: part x (N,c_part,H,W) occupies channels [c_offset, c_offset +
 * c_part) of y (N,c_total,H,W). The forward copies x in, the backward copies
 * that channel range of dy out (acc adds). */
#include "kernels.h"

/* y (N,c_total,H,W): channels [c_offset, c_offset+c_part) = x (N,c_part,H,W) */
int hyfi_concat_forward_ref(float *y, const float *x, const hyfi_concat_args *a)
{
    for (int n = 0; n < a->n; n++)
        for (int c = 0; c < a->c_part; c++)
            for (int p = 0; p < a->hw; p++)
                y[((size_t)n * a->c_total + a->c_offset + c) * a->hw + p] =
                    x[((size_t)n * a->c_part + c) * a->hw + p];
    return 0;
}

/* dx (N,c_part,H,W) (+)= channels [c_offset, c_offset+c_part) of dy (N,c_total,H,W) */
int hyfi_concat_backward_ref(float *dx, const float *dy, const hyfi_concat_args *a, int acc)
{
    for (int n = 0; n < a->n; n++)
        for (int c = 0; c < a->c_part; c++)
            for (int p = 0; p < a->hw; p++) {
                size_t i = ((size_t)n * a->c_part + c) * a->hw + p;
                float g = dy[((size_t)n * a->c_total + a->c_offset + c) * a->hw + p];
                dx[i] = acc ? dx[i] + g : g;
            }
    return 0;
}

/* concat_cpu.c: CPU path of channel concatenation. Per sample n the part's
 * channels are one contiguous block of c_part*H*W floats on both sides, so the
 * forward (and the backward with acc == 0) is one memcpy per sample; the
 * backward with acc == 1 is a vectorised add per sample. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-vectorize")
#endif

#include "kernels.h"

#include <string.h>

/* The forward in either storage: per sample, the part's block of elem-byte
 * values copied into its channels of y. */
static void forward_copy(void *y, const void *x, const hyfi_concat_args *a, size_t elem)
{
    const size_t block = (size_t)a->c_part * a->hw * elem;
    const size_t ystride = (size_t)a->c_total * a->hw * elem;
    const size_t yoff = (size_t)a->c_offset * a->hw * elem;
    for (int n = 0; n < a->n; n++)
        memcpy((char *)y + n * ystride + yoff, (const char *)x + n * block, block);
}

/* y (N,c_total,H,W): channels [c_offset, c_offset+c_part) = x (N,c_part,H,W) */
int hyfi_concat_forward_cpu(float *y, const float *x, const hyfi_concat_args *a)
{
    forward_copy(y, x, a, sizeof(float));
    return 0;
}

/* dx (N,c_part,H,W) (+)= channels [c_offset, c_offset+c_part) of dy (N,c_total,H,W) */
int hyfi_concat_backward_cpu(float *dx, const float *dy, const hyfi_concat_args *a, int acc)
{
    size_t block = (size_t)a->c_part * a->hw;
    size_t ystride = (size_t)a->c_total * a->hw, yoff = (size_t)a->c_offset * a->hw;
    for (int n = 0; n < a->n; n++) {
        float *d = dx + n * block;
        const float *s = dy + n * ystride + yoff;
        if (!acc) {
            memcpy(d, s, block * sizeof(float));
        } else {
            for (size_t i = 0; i < block; i++) d[i] += s[i];
        }
    }
    return 0;
}

/* The same on bf16 storage (kernels.h "bfloat16"): copies move the 2-byte
 * values as they are; the accumulation widens, adds in float32 and rounds
 * (hyfi_accumulate_bf16): bitwise the staged float32 calls. */
/* y (N,c_total,H,W) bf16: channels [c_offset, c_offset+c_part) = x (N,c_part,H,W) bf16 */
int hyfi_concat_forward_bf16(uint16_t *y, const uint16_t *x, const hyfi_concat_args *a)
{
    forward_copy(y, x, a, sizeof(uint16_t));
    return 0;
}

/* dx (N,c_part,H,W) bf16 (+)= channels [c_offset, c_offset+c_part) of dy (N,c_total,H,W) bf16 */
int hyfi_concat_backward_bf16(uint16_t *dx, const uint16_t *dy, const hyfi_concat_args *a,
                              int acc)
{
    size_t block = (size_t)a->c_part * a->hw;
    size_t ystride = (size_t)a->c_total * a->hw, yoff = (size_t)a->c_offset * a->hw;
    for (int n = 0; n < a->n; n++) {
        const int rc = hyfi_accumulate_bf16(dx + n * block, dy + n * ystride + yoff, block, acc);
        if (rc) return rc;
    }
    return 0;
}

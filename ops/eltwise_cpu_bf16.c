/* eltwise_cpu_bf16.c: the element-wise ops on bf16 storage (kernels.h
 * "bfloat16"): each value widened exactly, the float32 operation of
 * eltwise_cpu.c, the result rounded to nearest even, in one pass: bitwise what
 * staging the buffers in float32 around eltwise_cpu.c gives, without the two
 * extra passes and the scratch. Split over the worker's OpenMP threads as
 * eltwise_cpu.c. */
#include "kernels.h"
#include "isa.h"
#include "bf16_inline.h"

#include <string.h>

#define PAR_MIN ((long)1 << 16)

/* y (count) = max(x, 0); x (count); bf16 */
int HYFI_ISA(hyfi_relu_forward_bf16)(uint16_t *y, const uint16_t *x, size_t count)
{
    const long n = (long)count;
#pragma omp parallel for simd schedule(static) if (n >= PAR_MIN)
    for (long i = 0; i < n; i++) {
        const float v = hyfi_bf16_widen(x[i]);
        y[i] = hyfi_bf16_narrow(v > 0.0f ? v : 0.0f);
    }
    return 0;
}

/* dx (count) (+)= dy where y > 0 else 0; dy, y (count); bf16 */
int HYFI_ISA(hyfi_relu_backward_bf16)(uint16_t *dx, const uint16_t *dy, const uint16_t *y, size_t count,
                            int acc)
{
    const long n = (long)count;
    if (acc) {
#pragma omp parallel for simd schedule(static) if (n >= PAR_MIN)
        for (long i = 0; i < n; i++) {
            const float g = hyfi_bf16_widen(dy[i]);
            dx[i] = hyfi_bf16_narrow(hyfi_bf16_widen(dx[i]) +
                                     (hyfi_bf16_widen(y[i]) > 0.0f ? g : 0.0f));
        }
    } else {
#pragma omp parallel for simd schedule(static) if (n >= PAR_MIN)
        for (long i = 0; i < n; i++) {
            const float g = hyfi_bf16_widen(dy[i]);
            dx[i] = hyfi_bf16_narrow(hyfi_bf16_widen(y[i]) > 0.0f ? g : 0.0f);
        }
    }
    return 0;
}

/* y (count) = a + b; a, b (count); bf16 */
int HYFI_ISA(hyfi_add_forward_bf16)(uint16_t *y, const uint16_t *a, const uint16_t *b, size_t count)
{
    const long n = (long)count;
#pragma omp parallel for simd schedule(static) if (n >= PAR_MIN)
    for (long i = 0; i < n; i++)
        y[i] = hyfi_bf16_narrow(hyfi_bf16_widen(a[i]) + hyfi_bf16_widen(b[i]));
    return 0;
}

/* dst (count) = acc ? dst + src : src; src (count); bf16 */
int HYFI_ISA(hyfi_accumulate_bf16)(uint16_t *dst, const uint16_t *src, size_t count, int acc)
{
    const long n = (long)count;
    if (!acc) {
        memcpy(dst, src, count * sizeof *dst);
        return 0;
    }
#pragma omp parallel for simd schedule(static) if (n >= PAR_MIN)
    for (long i = 0; i < n; i++)
        dst[i] = hyfi_bf16_narrow(hyfi_bf16_widen(dst[i]) + hyfi_bf16_widen(src[i]));
    return 0;
}

/* dst (count) = round(src_0 + ... + src_(nsrc-1)), with acc round(dst + src_0
 * + ...): the float32 sums in that order, one rounding (accumulate_n's chain
 * on widened buffers, then rounded), in blocks of 1,024 values on the stack */
int HYFI_ISA(hyfi_accumulate_n_bf16)(uint16_t *dst, const uint16_t *const *src, int nsrc,
                                     size_t count, int acc)
{
    if (nsrc < 1) return -1;
    const long n = (long)count, nblk = (n + 1023) / 1024;
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (long b = 0; b < nblk; b++) {
        const long i0 = b * 1024, m = n - i0 < 1024 ? n - i0 : 1024;
        float f[1024];
        if (acc)
            for (long i = 0; i < m; i++)
                f[i] = hyfi_bf16_widen(dst[i0 + i]) + hyfi_bf16_widen(src[0][i0 + i]);
        else
            for (long i = 0; i < m; i++) f[i] = hyfi_bf16_widen(src[0][i0 + i]);
        for (int k = 1; k < nsrc; k++)
            for (long i = 0; i < m; i++) f[i] += hyfi_bf16_widen(src[k][i0 + i]);
        for (long i = 0; i < m; i++) dst[i0 + i] = hyfi_bf16_narrow(f[i]);
    }
    return 0;
}

/* dst (count) bf16 = round(dst + src), src (count) float32: one rounding (a
 * float32 result added into bf16 storage: the accumulating bf16 convolution) */
int HYFI_ISA(hyfi_accumulate_f32_bf16)(uint16_t *dst, const float *src, size_t count)
{
    const long n = (long)count;
#pragma omp parallel for simd schedule(static) if (n >= PAR_MIN)
    for (long i = 0; i < n; i++) dst[i] = hyfi_bf16_narrow(hyfi_bf16_widen(dst[i]) + src[i]);
    return 0;
}

/* dst (count) = value rounded to bf16 */
int HYFI_ISA(hyfi_fill_bf16)(uint16_t *dst, float value, size_t count)
{
    const uint16_t v = hyfi_bf16_narrow(value);
    const long n = (long)count;
#pragma omp parallel for simd schedule(static) if (n >= PAR_MIN)
    for (long i = 0; i < n; i++) dst[i] = v;
    return 0;
}

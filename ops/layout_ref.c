/* layout_ref.c: plain NCHW <-> oneDNN's channel-blocked layouts (nChw8c,
 * nChw16c), and the channel block this CPU's convolutions prefer.
 *
 * Blocked layout of channel block B: element (n, c, h, w) of an (N, C, H, W)
 * tensor at ((n C/B + c/B) H W + h W + w) B + c % B, C a multiple of B. The
 * engine keeps the activations between oneDNN convolutions, batch norms and
 * element-wise ops in it (hyfi_layout_plan), so that a convolution reads
 * and writes them as they are instead of reordering from and to NCHW. */
#include "kernels.h"

#include <stddef.h>
#include <string.h>

/* dst (N, C/B, H, W, B), src (N, C, H, W) */
void hyfi_layout_to_blocked(float *dst, const float *src, int n, int c, int hw, int blk)
{
    const size_t HW = (size_t)hw;
    if (blk <= 1) {
        memcpy(dst, src, (size_t)n * (size_t)c * HW * sizeof *dst);
        return;
    }
    const size_t B = (size_t)blk, CB = (size_t)c / B;
    for (size_t i = 0; i < (size_t)n * CB; i++) /* (n, cb) */
        for (size_t j = 0; j < B; j++) {
            const float *s = src + (i * B + j) * HW; /* plane (n, cb B + j) */
            float *d = dst + i * HW * B + j;
            for (size_t p = 0; p < HW; p++) d[p * B] = s[p];
        }
}

/* dst (N, C, H, W), src (N, C/B, H, W, B) */
void hyfi_layout_to_plain(float *dst, const float *src, int n, int c, int hw, int blk)
{
    const size_t HW = (size_t)hw;
    if (blk <= 1) {
        memcpy(dst, src, (size_t)n * (size_t)c * HW * sizeof *dst);
        return;
    }
    const size_t B = (size_t)blk, CB = (size_t)c / B;
    for (size_t i = 0; i < (size_t)n * CB; i++)
        for (size_t j = 0; j < B; j++) {
            const float *s = src + i * HW * B + j;
            float *d = dst + (i * B + j) * HW;
            for (size_t p = 0; p < HW; p++) d[p] = s[p * B];
        }
}

int hyfi_cpu_channel_block(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return 16;
    if (__builtin_cpu_supports("avx2")) return 8;
#endif
    return 0;
}

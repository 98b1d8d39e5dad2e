/* layout_ref.c: plain NCHW <-> oneDNN's channel-blocked layouts (nChw8c,
 * nChw16c), and the channel block this CPU's convolutions prefer.
 *
 * Blocked layout of channel block B: element (n, c, h, w) of an (N, C, H, W)
 * tensor at ((n C/B + c/B) H W + h W + w) B + c % B, C a multiple of B. The
 * engine keeps the activations between oneDNN convolutions, batch norms and
 * element-wise ops in it (hyfi_layout_plan), so that a convolution reads
 * and writes them as they are instead of reordering from and to NCHW.
 *
 * Convolution weights of block B (oneDNN's OIhw8i8o / OIhw16i16o): element
 * (o, i, kh, kw) of (O, I, KH, KW) at ((o/B I/B + i/B) KH KW + kh KW + kw) B B
 * + (i % B) B + o % B. The engine keeps the weights of the convolutions on
 * blocked activations in it, with their gradients and momenta (the optimizer
 * and the all-reduce are element-wise), so that oneDNN's forward and
 * backward-weights kernels use them as they are. */
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

/* Weights between plain (O, I, K) and blocked (O/B, I/B, K, B i, B o): one
 * B x B transpose per (ob, ib, k), either way (to_plain). */
static void wei_copy(float *dst, const float *src, int o, int i, int k, int blk, int to_plain)
{
    const size_t I = (size_t)i, K = (size_t)k;
    if (blk <= 1) {
        memcpy(dst, src, (size_t)o * I * K * sizeof *dst);
        return;
    }
    const size_t B = (size_t)blk, OB = (size_t)o / B, IB = I / B;
    for (size_t ob = 0; ob < OB; ob++)
        for (size_t ib = 0; ib < IB; ib++)
            for (size_t kk = 0; kk < K; kk++) {
                const size_t bo = ((ob * IB + ib) * K + kk) * B * B; /* the block */
                const size_t po = (ob * B * I + ib * B) * K + kk;   /* (ob B, ib B, kk) */
                for (size_t oi = 0; oi < B; oi++)
                    for (size_t ii = 0; ii < B; ii++) {
                        const size_t b = bo + ii * B + oi, q = po + (oi * I + ii) * K;
                        if (to_plain) dst[q] = src[b];
                        else dst[b] = src[q];
                    }
            }
}

/* dst (O/B, I/B, K, B i, B o), src (O, I, K) */
void hyfi_layout_wei_to_blocked(float *dst, const float *src, int o, int i, int k, int blk)
{
    wei_copy(dst, src, o, i, k, blk, 0);
}

/* dst (O, I, K), src (O/B, I/B, K, B i, B o) */
void hyfi_layout_wei_to_plain(float *dst, const float *src, int o, int i, int k, int blk)
{
    wei_copy(dst, src, o, i, k, blk, 1);
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

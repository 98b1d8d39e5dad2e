/* pool_cpu_bf16.c: pooling on bf16 storage (kernels.h "bfloat16"): x, y, dx, dy
 * bf16. Every pooling op works on independent units, an image's channel plane
 * (NCHW) or its block of B channels (nChw8c / nChw16c), so each unit is widened
 * into a float32 buffer of the calling thread, pooled by pool_cpu.c's own loops
 * (the same function on a one-unit problem) and its output rounded back to
 * nearest even: bitwise what staging the whole buffers in float32 gives, with
 * scratch of one unit per thread instead of whole float32 copies (a max pool's
 * backward sums several windows' gradients into one dx value: in float32, then
 * one rounding, as staged). Units split over the worker's OpenMP threads as
 * pool_cpu.c splits planes. */
#include "kernels.h"
#include "isa.h"
#include "bf16_inline.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_FWD, AVG_FWD, GAP_FWD, MAX_BWD, AVG_BWD, GAP_BWD };


static void widen_n(float *out, const uint16_t *in, size_t n)
{
    for (size_t i = 0; i < n; i++) out[i] = hyfi_bf16_widen(in[i]);
}

static void narrow_n(uint16_t *out, const float *in, size_t n)
{
    for (size_t i = 0; i < n; i++) out[i] = hyfi_bf16_narrow(in[i]);
}

/* One unit (a1: n = 1, c = 1 or B) on float buffers: big (H, W[, B]) holds x
 * or dx, small (Ho, Wo[, B]) or (B) holds y or dy. */
static int unit_run(int op, float *big, float *big2, float *small, const hyfi_pool_args *a1,
                    int acc)
{
    switch (op) {
    case MAX_FWD: return hyfi_maxpool_forward_cpu(small, big, a1);
    case AVG_FWD: return hyfi_avgpool_forward_cpu(small, big, a1);
    case GAP_FWD: return hyfi_gap_forward_cpu(small, big, a1);
    case MAX_BWD: return hyfi_maxpool_backward_cpu(big, small, big2, a1, acc);
    case AVG_BWD: return hyfi_avgpool_backward_cpu(big, small, a1, acc);
    default: return hyfi_gap_backward_cpu(big, small, a1, acc);
    }
}

/* fwd: out = y (small), in = x (big). bwd: out = dx (big), in = dy (small),
 * x = the forward's input (big, max pooling only). */
static int pool_bf16(int op, uint16_t *out, const uint16_t *in, const uint16_t *x,
                     const hyfi_pool_args *a, int acc)
{
    const int cu = a->blk > 1 ? a->blk : 1;
    if (a->blk > 1 && ((a->blk != 8 && a->blk != 16) || a->c % a->blk)) return -1;
    const int gap = op == GAP_FWD || op == GAP_BWD, bwd = op >= MAX_BWD;
    const size_t units = (size_t)a->n * (size_t)(a->c / cu);
    const size_t big = (size_t)a->h * a->w * cu;
    const size_t small = gap ? (size_t)cu : (size_t)a->ho * a->wo * cu;
    hyfi_pool_args a1 = *a;
    a1.n = 1, a1.c = cu;
    const int par = (long)a->n * a->c * a->h * a->w >= (1L << 16) && units > 1;
    int bad = 0;
#pragma omp parallel if (par) reduction(| : bad)
    {
        float *fb = malloc((2 * big + small) * sizeof(float));
        float *fb2 = fb + big, *fs = fb + 2 * big; /* x (max backward), y or dy */
        if (!fb) bad = 1;
#pragma omp for schedule(static)
        for (size_t u = 0; u < units; u++) {
            if (!fb) continue;
            if (!bwd) {
                widen_n(fb, in + u * big, big);
                bad |= unit_run(op, fb, NULL, fs, &a1, 0) != 0;
                narrow_n(out + u * small, fs, small);
            } else {
                widen_n(fs, in + u * small, small);
                if (op == MAX_BWD) widen_n(fb2, x + u * big, big);
                if (acc) widen_n(fb, out + u * big, big);
                bad |= unit_run(op, fb, fb2, fs, &a1, acc) != 0;
                narrow_n(out + u * big, fb, big);
            }
        }
        free(fb);
    }
    return bad ? -1 : 0;
}

int HYFI_ISA(hyfi_maxpool_forward_bf16)(uint16_t *y, const uint16_t *x, const hyfi_pool_args *a)
{
    return pool_bf16(MAX_FWD, y, x, NULL, a, 0);
}

int HYFI_ISA(hyfi_avgpool_forward_bf16)(uint16_t *y, const uint16_t *x, const hyfi_pool_args *a)
{
    return pool_bf16(AVG_FWD, y, x, NULL, a, 0);
}

int HYFI_ISA(hyfi_gap_forward_bf16)(uint16_t *y, const uint16_t *x, const hyfi_pool_args *a)
{
    return pool_bf16(GAP_FWD, y, x, NULL, a, 0);
}

int HYFI_ISA(hyfi_maxpool_backward_bf16)(uint16_t *dx, const uint16_t *dy, const uint16_t *x,
                               const hyfi_pool_args *a, int acc)
{
    return pool_bf16(MAX_BWD, dx, dy, x, a, acc);
}

int HYFI_ISA(hyfi_avgpool_backward_bf16)(uint16_t *dx, const uint16_t *dy, const hyfi_pool_args *a, int acc)
{
    return pool_bf16(AVG_BWD, dx, dy, NULL, a, acc);
}

int HYFI_ISA(hyfi_gap_backward_bf16)(uint16_t *dx, const uint16_t *dy, const hyfi_pool_args *a, int acc)
{
    return pool_bf16(GAP_BWD, dx, dy, NULL, a, acc);
}

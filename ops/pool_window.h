/* pool_window.h: a pooling window, the one rule of pool_ref.c shared by the
 * CPU loops (pool_cpu.c, pool_cpu_bf16.c): padding ph / pw on the low side,
 * floor output size. */
#ifndef HYFI_POOL_WINDOW_H
#define HYFI_POOL_WINDOW_H

#include "kernels.h"

/* Window of output (oh, ow) clipped to the image: rows [h0, h1), cols [w0, w1);
 * *full is the unclipped window size (count_include_pad divisor, clipped to
 * the padded image as PyTorch does). */
static inline void pool_window(const hyfi_pool_args *a, int oh, int ow, int *h0, int *h1,
                               int *w0, int *w1, int *full)
{
    const int hs = oh * a->sh - a->ph, ws = ow * a->sw - a->pw;
    int he = hs + a->kh, we = ws + a->kw;
    const int hp = he > a->h + a->ph ? a->h + a->ph : he, wp = we > a->w + a->pw ? a->w + a->pw : we;
    *full = (hp - hs) * (wp - ws);
    *h0 = hs < 0 ? 0 : hs;
    *w0 = ws < 0 ? 0 : ws;
    *h1 = he > a->h ? a->h : he;
    *w1 = we > a->w ? a->w : we;
}

#endif

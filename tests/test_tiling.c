/* Tiling geometry (partitioners/tiling.c), without StarPU: for random axes,
 * tile counts and windows (kernel, stride, padding), a 1-D convolution and a
 * 1-D max pool computed tile by tile — each tile's input assembled from its own
 * rows, the halo rows of its neighbours and the border padding the spans give —
 * equal the untiled result exactly; the spans' need ranges are exactly what the
 * outputs read; bad geometries are refused with a message naming the fix. */
#include "tiling.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define MAXL 64

/* out[o] = sum_j w[j] x[o s - p + j] (zero padding), or max over the window
 * (-inf padding) when maxpool. */
static int window1d(float *out, const float *x, int len, const float *w, int k, int s, int p,
                    int q, int maxpool)
{
    const int olen = (len + p + q - k) / s + 1;
    for (int o = 0; o < olen; o++) {
        float acc = maxpool ? -INFINITY : 0.f;
        for (int j = 0; j < k; j++) {
            const int i = o * s - p + j;
            const float v = i >= 0 && i < len ? x[i] : (maxpool ? -INFINITY : 0.f);
            if (maxpool) acc = v > acc ? v : acc;
            else acc += w[j] * v;
        }
        out[o] = acc;
    }
    return olen;
}

int main(void)
{
    uint64_t st = 11;
    int bad = 0, cases = 0, skipped = 0;
    char err[256];
    for (int trial = 0; trial < 3000; trial++) {
        const int n = tu_randint(&st, 1, 5), k = tu_randint(&st, 1, 7), s = tu_randint(&st, 1, 3);
        const int p = tu_randint(&st, 0, k - 1), q = tu_randint(&st, 0, k - 1);
        const int len = n * tu_randint(&st, 1, 12) * s;
        const int maxpool = trial % 3 == 0;
        if (len + p + q < k) continue;
        int cuts[8], ocuts[8];
        hyfi_tile_span sp[8];
        if (hyfi_tile_cuts(len, n, cuts, "axis", err, sizeof err)) {
            bad++;
            continue;
        }
        if (hyfi_tile_window(cuts, n, len, k, s, p, q, sp, ocuts, "op", err, sizeof err)) {
            skipped++; /* halo wider than a tile, empty tile: refused is fine here */
            continue;
        }
        cases++;
        float x[MAXL * 3], w[8], ref[MAXL * 3], got[MAXL * 3];
        tu_fill(x, (size_t)len, &st, -1.f, 1.f);
        tu_fill(w, (size_t)k, &st, -1.f, 1.f);
        const int olen = window1d(ref, x, len, w, k, s, p, q, maxpool);
        if (ocuts[n] != olen) bad++;
        for (int t = 0; t < n; t++) {
            /* assemble: padding, previous tile's halo, own rows, next tile's halo */
            float buf[MAXL * 3 + 32];
            int m = 0;
            for (int i = 0; i < sp[t].pad_before; i++) buf[m++] = maxpool ? -INFINITY : 0.f;
            for (int i = sp[t].in_begin - sp[t].halo_before; i < sp[t].in_begin; i++)
                buf[m++] = x[i];
            for (int i = sp[t].in_begin; i < sp[t].in_end; i++) buf[m++] = x[i];
            for (int i = sp[t].in_end; i < sp[t].in_end + sp[t].halo_after; i++) buf[m++] = x[i];
            for (int i = 0; i < sp[t].pad_after; i++) buf[m++] = maxpool ? -INFINITY : 0.f;
            /* the assembled buffer starts at need_begin when that is in range */
            const int start = sp[t].in_begin - sp[t].halo_before - sp[t].pad_before;
            const int lo = sp[t].need_begin - start; /* rows to skip at the front (k-p-s < 0) */
            if (lo < 0) bad++;
            const int avail = m - lo, need = sp[t].need_end - sp[t].need_begin;
            if (avail < need) {
                bad++;
                continue;
            }
            const int on = window1d(got + sp[t].out_begin, buf + lo, need, w, k, s, 0, 0, maxpool);
            if (on != sp[t].out_end - sp[t].out_begin) bad++;
        }
        for (int o = 0; o < olen; o++)
            if (!(got[o] == ref[o])) {
                if (bad < 5) printf("n=%d k=%d s=%d p=%d q=%d len=%d: out[%d] %g vs %g\n", n, k,
                                    s, p, q, len, o, got[o], ref[o]);
                bad++;
                break;
            }
    }
    printf("%d tiled 1-D windows (%d refused geometries), %d mismatches\n", cases, skipped, bad);
    tu_check(bad, "tiled windows equal the untiled ones exactly");
    tu_check(cases < 1000, "enough geometries tried");

    int r, c, cuts[8], oc[8];
    hyfi_tile_span sp[8];
    tu_check(hyfi_tile_grid(4, HYFI_TILES_SQUARE, &r, &c, err, sizeof err) || r != 2 || c != 2,
             "square grid of 4");
    tu_check(hyfi_tile_grid(4, HYFI_TILES_VERTICAL, &r, &c, err, sizeof err) || r != 1 || c != 4,
             "vertical grid of 4");
    tu_check(hyfi_tile_grid(3, HYFI_TILES_HORIZONTAL, &r, &c, err, sizeof err) || r != 3 ||
                 c != 1, "horizontal grid of 3");
    tu_check(hyfi_tile_grid(8, HYFI_TILES_SQUARE, &r, &c, err, sizeof err) == 0 ||
                 !strstr(err, "perfect square"), "square grid of 8 refused");
    printf("message: %s\n", err);
    tu_check(hyfi_tile_cuts(30, 4, cuts, "height of the image", err, sizeof err) == 0 ||
                 !strstr(err, "multiple of 4"), "30 rows in 4 tiles refused");
    printf("message: %s\n", err);
    /* 3x3 stride 2 on 4 tiles of 6 rows: cut 6 is not even */
    hyfi_tile_cuts(24, 4, cuts, "height", err, sizeof err);
    tu_check(hyfi_tile_window(cuts, 4, 24, 3, 2, 1, 1, sp, oc, "conv1", err, sizeof err) != 0,
             "3x3/2 on tiles of 6 rows");
    tu_check(hyfi_tile_window(oc, 4, 12, 3, 2, 1, 1, sp, cuts, "conv2", err, sizeof err) == 0 ||
                 !strstr(err, "not a multiple of its stride 2"), "odd cut refused");
    printf("message: %s\n", err);
    /* 7-wide kernel on tiles of 2 rows: halo 3 > 2 */
    hyfi_tile_cuts(8, 4, cuts, "height", err, sizeof err);
    tu_check(hyfi_tile_window(cuts, 4, 8, 7, 1, 3, 3, sp, oc, "conv7x1", err, sizeof err) == 0 ||
                 !strstr(err, "halo of 3 rows"), "halo wider than a tile refused");
    printf("message: %s\n", err);
    /* known halos: 3x3/1 p1 -> 1, 1; 3x3/2 p1 -> 1, 0; 7x7/2 p3 -> 3, 2 */
    hyfi_tile_cuts(32, 2, cuts, "height", err, sizeof err);
    hyfi_tile_window(cuts, 2, 32, 3, 1, 1, 1, sp, oc, "c", err, sizeof err);
    tu_check(sp[0].halo_after != 1 || sp[1].halo_before != 1 || sp[0].pad_before != 1,
             "3x3/1 halos 1, 1");
    hyfi_tile_window(cuts, 2, 32, 3, 2, 1, 1, sp, oc, "c", err, sizeof err);
    tu_check(sp[0].halo_after != 0 || sp[1].halo_before != 1, "3x3/2 halos 1, 0");
    hyfi_tile_window(cuts, 2, 32, 7, 2, 3, 3, sp, oc, "c", err, sizeof err);
    tu_check(sp[0].halo_after != 2 || sp[1].halo_before != 3 || sp[1].pad_after != 2,
             "7x7/2 halos 3, 2");
    return tu_finish();
}

/* Spatial tiling geometry: tile grids, cut points, halos through windowed ops. */
#include "tiling.h"

#include <stdio.h>
#include <string.h>

int hyfi_tile_layout_from_name(const char *name, hyfi_tile_layout *m)
{
    if (!name || !m) return -1;
    if (!strcmp(name, "square")) *m = HYFI_TILES_SQUARE;
    else if (!strcmp(name, "vertical")) *m = HYFI_TILES_VERTICAL;
    else if (!strcmp(name, "horizontal")) *m = HYFI_TILES_HORIZONTAL;
    else return -1;
    return 0;
}

const char *hyfi_tile_layout_name(hyfi_tile_layout m)
{
    return m == HYFI_TILES_SQUARE     ? "square"
           : m == HYFI_TILES_VERTICAL ? "vertical"
           : m == HYFI_TILES_HORIZONTAL ? "horizontal"
                                        : "?";
}

int hyfi_tile_grid(int parts, hyfi_tile_layout m, int *rows, int *cols, char *err,
                   size_t errlen)
{
    if (parts < 1) {
        if (err) snprintf(err, errlen, "%d spatial parts: use at least 1", parts);
        return -1;
    }
    switch (m) {
    case HYFI_TILES_SQUARE: {
        int r = 1;
        while ((r + 1) * (r + 1) <= parts) r++;
        if (r * r != parts) {
            if (err)
                snprintf(err, errlen, "%d spatial parts cannot be cut into a square grid; use "
                                      "a perfect square (4, 9, 16, ...) or --slice-method "
                                      "vertical or horizontal", parts);
            return -1;
        }
        *rows = *cols = r;
        return 0;
    }
    case HYFI_TILES_VERTICAL:
        *rows = 1;
        *cols = parts;
        return 0;
    case HYFI_TILES_HORIZONTAL:
        *rows = parts;
        *cols = 1;
        return 0;
    }
    if (err) snprintf(err, errlen, "unknown slice method %d; use square, vertical or horizontal",
                      (int)m);
    return -1;
}

int hyfi_tile_cuts(int len, int n, int *cuts, const char *what, char *err, size_t errlen)
{
    if (n < 1 || len < n || len % n != 0) {
        if (err)
            snprintf(err, errlen, "the %s (%d) cannot be cut into %d equal tiles; use a size "
                                  "that is a multiple of %d, or fewer spatial parts", what, len,
                     n, n);
        return -1;
    }
    for (int i = 0; i <= n; i++) cuts[i] = len / n * i;
    return 0;
}

int hyfi_tile_window(const int *in_cuts, int n, int in_len, int k, int s, int p, int q,
                     hyfi_tile_span *spans, int *out_cuts, const char *what, char *err,
                     size_t errlen)
{
    if (k < 1 || s < 1 || p < 0 || q < 0 || n < 1) {
        if (err) snprintf(err, errlen, "%s: bad window (kernel %d, stride %d, padding %d/%d)",
                          what, k, s, p, q);
        return -1;
    }
    const int out_len = (in_len + p + q - k) / s + 1;
    out_cuts[0] = 0;
    out_cuts[n] = out_len;
    for (int i = 1; i < n; i++) {
        if (in_cuts[i] % s != 0) {
            if (err)
                snprintf(err, errlen, "%s: a tile boundary at %d is not a multiple of its "
                                      "stride %d; use an image size divisible by (tiles per "
                                      "axis x the product of the strides), or fewer spatial "
                                      "parts or tiled stages", what, in_cuts[i], s);
            return -1;
        }
        out_cuts[i] = in_cuts[i] / s;
    }
    for (int i = 0; i < n; i++) {
        if (out_cuts[i + 1] <= out_cuts[i]) {
            if (err)
                snprintf(err, errlen, "%s: tile %d would have no output rows (output length "
                                      "%d for %d tiles); use fewer spatial parts or tiled "
                                      "stages", what, i, out_len, n);
            return -1;
        }
    }
    for (int i = 0; i < n; i++) {
        hyfi_tile_span *t = &spans[i];
        t->out_begin = out_cuts[i];
        t->out_end = out_cuts[i + 1];
        t->in_begin = in_cuts[i];
        t->in_end = in_cuts[i + 1];
        t->need_begin = t->out_begin * s - p;
        t->need_end = (t->out_end - 1) * s - p + k; /* exclusive */
        /* rows before the tile: from the previous tile, or padding at the border */
        int before = t->in_begin - t->need_begin, after = t->need_end - t->in_end;
        if (i == 0) {
            t->halo_before = 0;
            t->pad_before = before > 0 ? before : 0;
        } else {
            t->halo_before = before > 0 ? before : 0;
            t->pad_before = 0;
        }
        if (i == n - 1) {
            t->halo_after = 0;
            t->pad_after = after > 0 ? after : 0;
        } else {
            t->halo_after = after > 0 ? after : 0;
            t->pad_after = 0;
        }
        const int prev = i > 0 ? in_cuts[i] - in_cuts[i - 1] : 0;
        const int next = i < n - 1 ? in_cuts[i + 2] - in_cuts[i + 1] : 0;
        if (t->halo_before > prev || t->halo_after > next) {
            if (err)
                snprintf(err, errlen, "%s: tile %d needs a halo of %d rows but its neighbour "
                                      "has only %d; use fewer spatial parts (larger tiles) or "
                                      "a larger image", what, i,
                         t->halo_before > prev ? t->halo_before : t->halo_after,
                         t->halo_before > prev ? prev : next);
            return -1;
        }
    }
    return 0;
}

/* Spatial tiling geometry (spatial parallelism). Plain C, no StarPU.
 *
 * An image axis of length L cut into n tiles has cut points c[0] = 0 < c[1] <
 * ... < c[n] = L; tile i holds [c[i], c[i+1]). A windowed op (convolution or
 * pooling: kernel k, stride s, padding p before and q after, output length
 * (L + p + q - k) / s + 1) maps output rows [a, b) to the input rows
 *     [a s - p, (b - 1) s - p + k - 1]
 * so a tile whose input is [c[i], c[i+1]) computes outputs [c[i] / s,
 * c[i+1] / s) (the last one up to the output length) and needs, beyond its own
 * rows, a halo of p rows before and k - p - s after (clamped at 0) from its
 * neighbours, or padding where the range leaves the image: the layer's own
 * padding at the image border, the neighbour's data inside.
 *
 * Interior cut points must stay multiples of every stride they pass through,
 * and a halo must come from the adjacent tile only (not wider than it); both
 * give an error naming the fix.
 */
#ifndef HYFI_PARTITIONERS_TILING_H
#define HYFI_PARTITIONERS_TILING_H

#include <stddef.h>

typedef enum hyfi_tile_layout {
    HYFI_TILES_SQUARE = 0,     /* sqrt(P) x sqrt(P) tiles (P a perfect square) */
    HYFI_TILES_VERTICAL = 1,   /* P vertical strips: 1 x P (cuts along the width) */
    HYFI_TILES_HORIZONTAL = 2  /* P horizontal strips: P x 1 (cuts along the height) */
} hyfi_tile_layout;

/* "square" | "vertical" | "horizontal" <-> method; from_name returns 0 or -1. */
int hyfi_tile_layout_from_name(const char *name, hyfi_tile_layout *m);
const char *hyfi_tile_layout_name(hyfi_tile_layout m);

/* Tiles per axis for `parts` tiles: *rows x *cols. Returns 0, or -1 with a
 * message naming the fix (parts < 1, or not a perfect square for square). */
int hyfi_tile_grid(int parts, hyfi_tile_layout m, int *rows, int *cols, char *err,
                   size_t errlen);

/* Equal cut points of an axis of length len into n tiles (cuts[0..n]). Returns
 * 0, or -1 with a message when n does not divide len or len / n < 1. `what`
 * names the axis in the message ("height of image"). */
int hyfi_tile_cuts(int len, int n, int *cuts, const char *what, char *err, size_t errlen);

/* One tile's part of a windowed op along one axis. */
typedef struct hyfi_tile_span {
    int out_begin, out_end;     /* output rows of the tile */
    int in_begin, in_end;       /* the tile's own input rows */
    int need_begin, need_end;   /* input rows its outputs read, [need_begin, need_end) */
    int halo_before, halo_after;/* rows read from the previous / next tile */
    int pad_before, pad_after;  /* rows outside the image: the op's padding */
} hyfi_tile_span;

/* Through a windowed op (kernel k, stride s, padding p before and q after) on
 * an axis of input length in_len cut at in_cuts[0..n]: fills spans[0..n) and
 * the output cut points out_cuts[0..n]. Returns 0, or -1 with a message naming
 * the op (`what`) and the fix when an interior cut is not a multiple of s, a
 * tile's output would be empty, or a halo is wider than the adjacent tile. */
int hyfi_tile_window(const int *in_cuts, int n, int in_len, int k, int s, int p, int q,
                     hyfi_tile_span *spans, int *out_cuts, const char *what, char *err,
                     size_t errlen);

#endif

#!/usr/bin/env python3
"""Make a data set of large images (hyfi-train --dataset slides) as mosaics of
real tissue.

Source: a real histology image, by default the 512x512 immunohistochemistry
image of human colon tissue of Debian's python3-skimage (skimage/data/ihc.png,
stained with haematoxylin and DAB; scripts/setup.sh puts it in
$HYFI_DEPS/data/ihc.png). More sources can be given (--source A --source B).

Patches: every source is cut into --patch x --patch patches (stride half a
patch). Each patch gets a DAB score: the mean DAB optical density of its pixels
after colour deconvolution with Ruifrok and Johnston's haematoxylin-eosin-DAB
stain vectors (the ones of skimage.color.rgb2hed). The patches below the median
score form pool 0 ("0-dab-low": little DAB-stained, i.e. antigen-positive,
tissue), the others pool 1 ("1-dab-high").

Labels: a slide of class c is a mosaic of patches drawn only from pool c, each
placed in one of its 8 orientations (rotations by 90 degrees, mirror images:
lossless moves of real pixels), all drawn from a seeded generator. So the
label is the staining level of the tissue the slide is made of, and the data
set is reproducible from (--seed, --size, --patch, the sources). No pixel is
synthetic: every one is a pixel of a source image.

Layout (the folder layout hyfi-train reads): OUT/CLASS/slide-NNNN.EXT, or with
--val K, OUT/train/CLASS/... and OUT/val/CLASS/...; with several --format
values, one such tree per format under OUT/FORMAT/, holding the same pixels.

Formats, written band by band (memory: one band of rows, never the image):
  png         8-bit RGB, not interlaced, zlib --level
  tiff        striped TIFF, --rows-per-strip rows a strip, deflate
  tiff-tiled  tiled TIFF, --tile x --tile tiles, deflate (OpenSlide reads it as
              generic-tiff, libtiff as tiled)
Classic TIFF: a file must stay under 4 GiB (a 16,384^2 mosaic compresses to a
fraction of its 768 MiB).

Sizes: CI uses 256^2; bench/highres.sh needs 1,024^2 to 16,384^2, made on
demand (a 16,384^2 PNG takes about a minute; see docs/user-guide.md).

usage: make_slides.py --out DIR --size N [--per-class K] [--val K]
                      [--format png,tiff,tiff-tiled] [--seed S] [--patch P]
                      [--source IMG ...] [--level L]
Needs numpy (python3-numpy) and Pillow (python3-pil, to read the sources).
"""
import argparse
import os
import struct
import sys
import time
import zlib

import numpy as np

# ----------------------------------------------------------------- sources
def read_png(path):
    """A source image -> (H, W, 3) uint8 (Pillow: python3-pil)."""
    from PIL import Image
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


def dab_score(patch):
    """Mean DAB optical density (Ruifrok & Johnston stain vectors)."""
    rgb_from_hed = np.array([[0.65, 0.70, 0.29], [0.07, 0.99, 0.11], [0.27, 0.57, 0.78]])
    hed_from_rgb = np.linalg.inv(rgb_from_hed)
    od = -np.log10(np.maximum(patch.astype(np.float64), 1.0) / 255.0)
    return float((od.reshape(-1, 3) @ hed_from_rgb)[:, 2].mean())


def make_pools(sources, p):
    patches = []
    for src in sources:
        img = read_png(src)
        h, w, _ = img.shape
        if h < p or w < p:
            sys.exit(f"make_slides: {src} is {w}x{h}, smaller than --patch {p}")
        for y in range(0, h - p + 1, p // 2):
            for x in range(0, w - p + 1, p // 2):
                patches.append(np.ascontiguousarray(img[y:y + p, x:x + p]))
    scores = np.array([dab_score(q) for q in patches])
    order = np.argsort(scores, kind="stable")
    half = len(order) // 2
    pools = [[patches[i] for i in order[:half]], [patches[i] for i in order[half:]]]
    # the 8 orientations of every patch
    return [[np.ascontiguousarray(v) for q in pool
             for v in (q, q[::-1], np.rot90(q, 1), np.rot90(q, 1)[::-1], np.rot90(q, 2),
                       np.rot90(q, 2)[::-1], np.rot90(q, 3), np.rot90(q, 3)[::-1])]
            for pool in pools], scores[order[half - 1]]

# ------------------------------------------------------------------ mosaic
class Mosaic:
    """Rows of an n x n mosaic of p x p patches drawn from one pool."""

    def __init__(self, pool, n, p, rng):
        self.pool, self.n, self.p = pool, n, p
        g = (n + p - 1) // p
        self.pick = rng.integers(0, len(pool), size=(g, g))

    def rows(self, y0, y1):
        p, n = self.p, self.n
        out = np.empty((y1 - y0, n, 3), np.uint8)
        for gy in range(y0 // p, (y1 - 1) // p + 1):
            a, b = max(y0, gy * p), min(y1, gy * p + p)
            for gx in range(self.pick.shape[1]):
                x1 = min(n, gx * p + p)
                out[a - y0:b - y0, gx * p:x1] = \
                    self.pool[self.pick[gy, gx]][a - gy * p:b - gy * p, :x1 - gx * p]
        return out

# ----------------------------------------------------------------- writers
def write_png(path, m, n, level, band=256):
    def chunk(f, kind, body):
        f.write(struct.pack(">I", len(body)) + kind + body)
        f.write(struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF))
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n")
        chunk(f, b"IHDR", struct.pack(">IIBBBBB", n, n, 8, 2, 0, 0, 0))
        z = zlib.compressobj(level)
        for y in range(0, n, band):
            rows = m.rows(y, min(n, y + band))
            filt = np.zeros((rows.shape[0], 1), np.uint8)  # filter type 0 on each row
            data = z.compress(np.hstack([filt, rows.reshape(rows.shape[0], -1)]).tobytes())
            if data:
                chunk(f, b"IDAT", data)
        chunk(f, b"IDAT", z.flush())
        chunk(f, b"IEND", b"")


def write_tiff(path, m, n, level, tile=None, rows_per_strip=16):
    """Baseline little-endian TIFF, RGB, deflate, striped or tiled."""
    seg = []  # (offset, count) of every strip or tile in order
    with open(path, "wb") as f:
        f.write(b"II*\x00" + struct.pack("<I", 0))  # IFD offset patched below
        if tile:
            across = (n + tile - 1) // tile
            for ty in range(0, n, tile):
                band = m.rows(ty, min(n, ty + tile))
                if band.shape[0] < tile:  # tiles are whole: pad the last band
                    band = np.concatenate([band, np.zeros((tile - band.shape[0], n, 3),
                                                          np.uint8)])
                band = np.concatenate([band, np.zeros((tile, across * tile - n, 3), np.uint8)],
                                      axis=1)
                for tx in range(across):
                    data = zlib.compress(
                        np.ascontiguousarray(band[:, tx * tile:tx * tile + tile]).tobytes(),
                        level)
                    seg.append((f.tell(), len(data)))
                    f.write(data)
        else:
            for y in range(0, n, rows_per_strip):
                data = zlib.compress(m.rows(y, min(n, y + rows_per_strip)).tobytes(), level)
                seg.append((f.tell(), len(data)))
                f.write(data)
        if f.tell() % 2:
            f.write(b"\x00")
        # out-of-line values: bits per sample, then the offsets and counts
        bps_at = f.tell()
        f.write(struct.pack("<3H", 8, 8, 8))
        off_at = f.tell()
        f.write(struct.pack(f"<{len(seg)}I", *[o for o, _ in seg]))
        cnt_at = f.tell()
        f.write(struct.pack(f"<{len(seg)}I", *[c for _, c in seg]))
        if f.tell() >= 1 << 32:
            sys.exit(f"make_slides: {path} would pass 4 GiB, beyond classic TIFF; raise --level")
        SHORT, LONG = 3, 4
        tags = [(256, LONG, 1, n), (257, LONG, 1, n), (258, SHORT, 3, bps_at),
                (259, SHORT, 1, 8), (262, SHORT, 1, 2), (277, SHORT, 1, 3),
                (284, SHORT, 1, 1)]
        one = len(seg) == 1  # a single offset/count is stored in the entry itself
        if tile:
            tags += [(322, LONG, 1, tile), (323, LONG, 1, tile),
                     (324, LONG, len(seg), seg[0][0] if one else off_at),
                     (325, LONG, len(seg), seg[0][1] if one else cnt_at)]
        else:
            tags += [(273, LONG, len(seg), seg[0][0] if one else off_at),
                     (278, LONG, 1, rows_per_strip),
                     (279, LONG, len(seg), seg[0][1] if one else cnt_at)]
        tags.sort()
        ifd = f.tell()
        f.write(struct.pack("<H", len(tags)))
        for tag, typ, count, value in tags:
            if typ == SHORT and count == 1:
                f.write(struct.pack("<HHIHH", tag, typ, count, value, 0))
            else:
                f.write(struct.pack("<HHII", tag, typ, count, value))
        f.write(struct.pack("<I", 0))
        f.seek(4)
        f.write(struct.pack("<I", ifd))

# -------------------------------------------------------------------- main
EXT = {"png": "png", "tiff": "tif", "tiff-tiled": "tif"}
CLASSES = ["0-dab-low", "1-dab-high"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--size", type=int, required=True, help="side of the square slides")
    ap.add_argument("--per-class", type=int, default=2, help="train slides per class [2]")
    ap.add_argument("--val", type=int, default=0, help="validation slides per class [0]")
    ap.add_argument("--format", default="png", help="png, tiff, tiff-tiled, comma-separated")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--patch", type=int, default=128)
    ap.add_argument("--tile", type=int, default=256, help="tiff-tiled tile side [256]")
    ap.add_argument("--rows-per-strip", type=int, default=16)
    ap.add_argument("--level", type=int, default=6, help="zlib level [6]")
    ap.add_argument("--source", action="append")
    a = ap.parse_args()
    formats = a.format.split(",")
    for fmt in formats:
        if fmt not in EXT:
            sys.exit(f"make_slides: --format {fmt}: not png, tiff or tiff-tiled")
    if a.size < 16 or a.size > 1 << 17:
        sys.exit("make_slides: --size must be 16..131072")
    if a.tile % 16:
        sys.exit("make_slides: --tile must be a multiple of 16 (TIFF)")
    sources = a.source or [os.path.join(os.environ.get("HYFI_DEPS", "/opt/hyfi-deps"), "data",
                                        "ihc.png")]
    for s in sources:
        if not os.path.isfile(s):
            sys.exit(f"make_slides: no source image {s} (bash scripts/setup.sh fetches ihc.png; "
                     "or pass --source)")
    pools, cut = make_pools(sources, a.patch)
    print(f"make_slides: {sum(len(p) // 8 for p in pools)} patches of {a.patch}^2 from "
          f"{len(sources)} source(s); DAB score split at {cut:.4f}")
    rng = np.random.default_rng(a.seed)
    t0 = time.time()
    for split, count in (("train", a.per_class), ("val", a.val)):
        for k in range(count):
            for c, name in enumerate(CLASSES):
                m = Mosaic(pools[c], a.size, a.patch, rng)
                for fmt in formats:
                    root = os.path.join(a.out, fmt) if len(formats) > 1 else a.out
                    # without a validation split the classes are OUT's own subfolders
                    d = os.path.join(root, split, name) if a.val else os.path.join(root, name)
                    os.makedirs(d, exist_ok=True)
                    path = os.path.join(d, f"slide-{k:04d}.{EXT[fmt]}")
                    if fmt == "png":
                        write_png(path, m, a.size, a.level)
                    else:
                        write_tiff(path, m, a.size, a.level,
                                   tile=a.tile if fmt == "tiff-tiled" else None,
                                   rows_per_strip=a.rows_per_strip)
    print(f"make_slides: {2 * (a.per_class + a.val)} slides of {a.size}^2 x {len(formats)} "
          f"format(s) in {a.out} ({time.time() - t0:.1f} s)")


if __name__ == "__main__":
    main()

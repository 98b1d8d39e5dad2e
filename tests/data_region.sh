#!/bin/bash
# 'data_region': region reading of large images, at CI size.
#  1. scripts/make_slides.py makes 256^2 mosaics of the real histology image
#     (python3-skimage's ihc.png) as PNG, striped TIFF and tiled TIFF, and
#     test_data_region checks every region against the whole-image path
#     bitwise (with openslide-python's small.svs when scripts/setup.sh fetched
#     it).
#  2. Memory and reading: one 2,048^2 mosaic per format; region_rss reads the
#     whole image, a quarter and one pixel. A quarter must cost under 40% of
#     the whole's peak memory (above the one-pixel baseline); of the whole's
#     bytes read, the tiled TIFF's bottom-right quarter under 40% (libtiff and
#     OpenSlide), the striped TIFF's top-left quarter (half of the strips)
#     under 55%. PNG rows above a region must be decoded: its bytes read are
#     printed, not bounded.
# Skipped (77) without the histology image or numpy and Pillow.
# usage: data_region.sh TEST_DATA_REGION REGION_RSS
set -u
test_bin=${1:?usage: data_region.sh TEST_DATA_REGION REGION_RSS}
rss_bin=${2:?usage: data_region.sh TEST_DATA_REGION REGION_RSS}
deps="${HYFI_DEPS:-/opt/hyfi-deps}"
# shellcheck source=slides_python.sh
source "$(dirname "$0")/slides_python.sh"
root="${HYFI_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fails=0
"$py" "$root/scripts/make_slides.py" --source "$src" --out "$dir/s" --size 256 --per-class 2 \
    --format png,tiff,tiff-tiled --tile 64 || exit 1
# two sizes in one split: refused by the loader
"$py" "$root/scripts/make_slides.py" --source "$src" --out "$dir/s/mixed" --size 256 \
    --per-class 1 >/dev/null || exit 1
"$py" "$root/scripts/make_slides.py" --source "$src" --out "$dir/m2" --size 128 \
    --per-class 1 >/dev/null || exit 1
mv "$dir/m2/0-dab-low/slide-0000.png" "$dir/s/mixed/0-dab-low/slide-0001.png"
svs="$deps/data/small.svs"
"$test_bin" "$dir/s" $([ -f "$svs" ] && echo "$svs") || fails=$((fails + 1))

N=2048
"$py" "$root/scripts/make_slides.py" --source "$src" --out "$dir/big" --size $N --per-class 1 \
    --format png,tiff,tiff-tiled --level 1 >/dev/null || exit 1
measure() { # file kind x0 y0 w h -> "maxrss rchar"
    "$rss_bin" "$1" "$2" "$3" "$4" "$5" "$6" | sed -E 's/maxrss_kib=([0-9]+) rchar=([0-9]+).*/\1 \2/'
}
H=$((N / 2))
for f in png:png:png:0:$H tiff:tiff:tif:0:0 tiff-tiled:tiff:tif:$H:$H tiff-tiled:openslide:tif:$H:$H; do
    IFS=: read -r fmt kind ext qx qy <<<"$f"
    file="$dir/big/$fmt/0-dab-low/slide-0000.$ext"
    read -r base_m base_r <<<"$(measure "$file" "$kind" 0 0 1 1)"
    read -r whole_m whole_r <<<"$(measure "$file" "$kind" 0 0 $N $N)"
    read -r q_m q_r <<<"$(measure "$file" "$kind" "$qx" "$qy" $H $H)"
    verdict=$("$py" - "$fmt/$kind" "$base_m" "$whole_m" "$q_m" "$whole_r" "$q_r" <<'PY'
import sys
name, base, whole, q, wr, qr = sys.argv[1], *map(int, sys.argv[2:])
mem = (q - base) / max(1, whole - base)
io = qr / max(1, wr)
limit = {"tiff-tiled/tiff": 0.40, "tiff-tiled/openslide": 0.40, "tiff/tiff": 0.55}.get(name)
ok = mem < 0.40 and (limit is None or io < limit)
print("%-22s peak memory above baseline: whole %6.1f MiB, quarter %6.1f MiB (%.0f%%); "
      "bytes read: whole %6.1f MiB, quarter %6.1f MiB (%.0f%%%s): %s" % (
      name, (whole - base) / 1024, (q - base) / 1024, 100 * mem, wr / 2**20, qr / 2**20,
      100 * io, "" if limit else ", not bounded", "ok" if ok else "TOO MUCH"))
sys.exit(0 if ok else 1)
PY
) || fails=$((fails + 1))
    echo "$verdict"
done
[ "$fails" = 0 ] && echo "data_region: ok"
exit $((fails > 0))

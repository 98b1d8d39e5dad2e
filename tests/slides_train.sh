#!/bin/bash
# 'slides_train': hyfi-train on 256^2 mosaics of the real histology image
# (scripts/make_slides.py, with a validation split) with the input tiled into
# 4 vertical strips on 2 ranks: the whole-image path (--dataset folder on the
# PNGs: every rank decodes whole images, hyfi_set_input) against the region
# path (--dataset slides: each rank reads only its own strips,
# hyfi_set_input_fn) on the same PNGs and on tiled TIFFs of the same pixels.
# The per-step losses and gradient norms and the test accuracy must be equal
# (the same floats). Skipped (77) without the image or numpy and Pillow.
# usage: slides_train.sh HYFI_TRAIN MPIEXEC
set -u
train=${1:?usage: slides_train.sh HYFI_TRAIN MPIEXEC}
mpiexec=${2:?usage: slides_train.sh HYFI_TRAIN MPIEXEC}
# shellcheck source=slides_python.sh
source "$(dirname "$0")/slides_python.sh"
root="${HYFI_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}"
export HYFI_CPU_THREADS=1 HYFI_LEND_MIN_BYTES=0
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$py" "$root/scripts/make_slides.py" --source "$src" --out "$dir/d" --size 256 --per-class 3 \
    --val 1 --format png,tiff-tiled --tile 64 || exit 1
common=(--model resnet --depth 8 --num-classes 2 --batch-size 2 --steps 3 --print-freq 1
        --split-size 2 --spatial-size 1 --num-spatial-parts 4 --slice-method vertical)
fails=0
run() { # name dataset datadir
    if ! "$mpiexec" -n 2 "$train" "${common[@]}" --dataset "$2" --datapath "$3" \
            --metrics "$dir/$1.json" >"$dir/$1.log" 2>&1; then
        echo "FAILED: $1"; tail -5 "$dir/$1.log"; fails=$((fails + 1)); return
    fi
    grep -E "test accuracy" "$dir/$1.log" | sed "s/^/$1: /"
}
run whole folder "$dir/d/png"
run regions_png slides "$dir/d/png"
run regions_tiff slides "$dir/d/tiff-tiled"
"$py" - "$dir" <<'PY' || fails=$((fails + 1))
import json, sys
d = sys.argv[1]
def steps(name):
    rows = [json.loads(l) for l in open(f"{d}/{name}.json")]
    return ([(r["loss"], r["grad_norm"]) for r in rows if "step" in r],
            [r.get("test_accuracy") for r in rows if "step" not in r])
ref = steps("whole")
ok = len(ref[0]) == 3
for name in ("regions_png", "regions_tiff"):
    got = steps(name)
    good = got == ref
    ok &= good
    print("%s: (loss, grad norm) per step %s, summary %s vs whole-image %s %s: %s" % (
        name, got[0], got[1], ref[0], ref[1], "equal" if good else "DIFFERENT"))
sys.exit(0 if ok else 1)
PY
[ "$fails" = 0 ] && echo "slides_train: ok"
exit $((fails > 0))

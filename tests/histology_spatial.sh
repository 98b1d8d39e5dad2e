#!/bin/bash
# 'histology_spatial': the real 512x512 histology image of Debian's
# python3-skimage (data/ihc.png, colon tissue; scripts/setup.sh takes it out of
# the package into $HYFI_DEPS/data) trained at full resolution by ResNet v1-8
# on 2 stages: untiled, tiled into 4 (square) in one process, and tiled into 4
# vertical strips on 2 ranks. The per-step losses of the tiled runs equal the
# untiled ones to float32 round-off (relative 1e-5). Skipped (77) without the
# image.
# usage: histology_spatial.sh HYFI_TRAIN MPIEXEC
set -u
train=${1:?usage: histology_spatial.sh HYFI_TRAIN MPIEXEC}
mpiexec=${2:?usage: histology_spatial.sh HYFI_TRAIN MPIEXEC}
img="${HYFI_DEPS:-/opt/hyfi-deps}/data/ihc.png"
[ -f "$img" ] || { echo "skip: no $img (bash scripts/setup.sh fetches it)"; exit 77; }
export HYFI_CPU_THREADS=1 HYFI_LEND_MIN_BYTES=0
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir -p "$dir/data/tissue"
ln -s "$img" "$dir/data/tissue/ihc.png"
common=(--model resnet --depth 8 --dataset folder --datapath "$dir/data" --num-classes 2
        --batch-size 1 --steps 3 --print-freq 1 --split-size 2)
fails=0
run() { # name, launcher..., -- extra flags
    local name=$1; shift
    local launch=()
    while [ "$1" != -- ]; do launch+=("$1"); shift; done
    shift
    if ! "${launch[@]}" "$train" "${common[@]}" "$@" --metrics "$dir/$name.json" \
            >"$dir/$name.log" 2>&1; then
        echo "FAILED: $name"; tail -5 "$dir/$name.log"; fails=$((fails + 1)); return
    fi
    grep -E "images of|^plan|stage [0-9]|spatial:" "$dir/$name.log"
}
run untiled -- 
run tiled4 -- --spatial-size 1 --num-spatial-parts 4
run tiled4v_2ranks "$mpiexec" -n 2 -- --spatial-size 1 --num-spatial-parts 4 --slice-method vertical
python3 - "$dir" <<'PY' || fails=$((fails + 1))
import json, sys
d = sys.argv[1]
def losses(name):
    return [json.loads(l)["loss"] for l in open(f"{d}/{name}.json") if '"step"' in l]
ref = losses("untiled")
ok = len(ref) == 3
for name in ("tiled4", "tiled4v_2ranks"):
    got = losses(name)
    worst = max(abs(a - b) / abs(b) for a, b in zip(got, ref)) if got else 1
    good = len(got) == len(ref) and worst <= 1e-5
    ok &= good
    print("%s: losses %s vs untiled %s, worst rel. diff %.2g: %s" % (
        name, got, ref, worst, "ok" if good else "MISMATCH"))
sys.exit(0 if ok else 1)
PY
[ "$fails" = 0 ] && echo "histology_spatial: ok"
exit $((fails > 0))

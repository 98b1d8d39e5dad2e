#!/bin/bash
# 'driver_pipeline': hyfi-train with layer + pipeline parallelism gives the
# losses of the one-process run with the same micro-batches:
#   mpiexec -n 2 hyfi-train --model resnet ... --split-size 2 --parts 4 --metrics m2.json
#   hyfi-train --model resnet ... --parts 4 --metrics m1.json
# (and the same for AmoebaNet with 1F1B). One thread per kernel, so the
# per-step losses agree to the last digit of --metrics' %.9g.
# usage: driver_pipeline.sh HYFI_TRAIN MPIEXEC
set -u
train=${1:?usage: driver_pipeline.sh HYFI_TRAIN MPIEXEC}
mpiexec=${2:?usage: driver_pipeline.sh HYFI_TRAIN MPIEXEC}
export HYFI_CPU_THREADS=1 HYFI_LEND_MIN_BYTES=0
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fails=0
check() { # name, common flags...
    local name=$1; shift
    "$train" "$@" --metrics "$dir/$name.one.json" >"$dir/$name.one.log" 2>&1 ||
        { echo "FAILED: one process: $*"; cat "$dir/$name.one.log"; fails=$((fails + 1)); return; }
    "$mpiexec" -n 2 "$train" "$@" --split-size 2 --metrics "$dir/$name.two.json" \
        >"$dir/$name.two.log" 2>&1 ||
        { echo "FAILED: 2 ranks: $*"; cat "$dir/$name.two.log"; fails=$((fails + 1)); return; }
    grep -E "^plan|stage [0-9]|predicted" "$dir/$name.two.log"
    python3 - "$name" "$dir/$name.one.json" "$dir/$name.two.json" <<'PY' || fails=$((fails + 1))
import json, sys
name, a, b = sys.argv[1:]
la = [json.loads(l)["loss"] for l in open(a) if '"step"' in l]
lb = [json.loads(l)["loss"] for l in open(b) if '"step"' in l]
worst = max(abs(x - y) / max(abs(x), 1e-12) for x, y in zip(la, lb)) if la else 1
ok = len(la) == len(lb) > 0 and worst <= 1e-6
print("%s: %d steps, losses one process %s, 2 ranks %s, worst rel. diff %.2g: %s" % (
    name, len(la), la, lb, worst, "ok" if ok else "MISMATCH"))
sys.exit(0 if ok else 1)
PY
}
check resnet --model resnet --depth 8 --dataset synthetic --image-size 16 --batch-size 16 \
    --parts 4 --steps 4 --print-freq 1
check amoebanet --model amoebanet --num-layers 3 --num-filters 16 --dataset synthetic \
    --image-size 64 --batch-size 8 --parts 2 --schedule 1f1b --steps 3 --print-freq 1
# a plan the ranks cannot hold is refused with the fix
if "$mpiexec" -n 2 "$train" --model resnet --depth 8 --dataset synthetic --image-size 16 \
        --steps 1 >"$dir/bad.log" 2>&1; then
    echo "FAILED: 2 ranks with one stage ran"; fails=$((fails + 1))
elif ! grep -q "mpiexec -n 1" "$dir/bad.log"; then
    echo "FAILED: no fix named for 2 ranks with one stage:"; cat "$dir/bad.log"; fails=$((fails + 1))
else
    grep -m1 "places\|place" "$dir/bad.log"
fi
[ "$fails" = 0 ] && echo "driver_pipeline: ok"
exit $((fails > 0))

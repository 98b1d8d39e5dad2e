#!/bin/bash
# 'spatial_memory': with StarPU's per-process memory limit
# (STARPU_LIMIT_CPU_MEM=800, MB) and one place per rank, ResNet v1-8 on the
# histology image scaled to 1024x1024 on 2 stages:
#   untiled on 2 ranks: refused at compile with a message naming the limit and
#     the fix (stage 0 needs about 1.9 GB), exit status 1 - not a hang;
#   stage 0 tiled into 4 on 5 ranks: trains 2 steps, every rank under the limit.
# Skipped (77) without the image.
# usage: spatial_memory.sh HYFI_TRAIN MPIEXEC
set -u
train=${1:?usage: spatial_memory.sh HYFI_TRAIN MPIEXEC}
mpiexec=${2:?usage: spatial_memory.sh HYFI_TRAIN MPIEXEC}
img="${HYFI_DEPS:-/opt/hyfi-deps}/data/ihc.png"
[ -f "$img" ] || { echo "skip: no $img (bash scripts/setup.sh fetches it)"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir -p "$dir/data/tissue"
ln -s "$img" "$dir/data/tissue/ihc.png"
export STARPU_LIMIT_CPU_MEM=800
common=(--model resnet --depth 8 --dataset folder --datapath "$dir/data" --num-classes 2
        --batch-size 1 --image-size 1024 --steps 2 --print-freq 1 --balance 3,2 -v) # -v: peaks
fails=0
if timeout 300 "$mpiexec" -n 2 "$train" "${common[@]}" >"$dir/untiled.log" 2>&1; then
    echo "FAILED: the untiled run did not stop"; fails=$((fails + 1))
elif ! grep -q "STARPU_LIMIT_CPU_MEM" "$dir/untiled.log"; then
    echo "FAILED: the untiled run stopped without naming the limit:"; tail -5 "$dir/untiled.log"
    fails=$((fails + 1))
else
    echo "untiled, 2 ranks: $(grep -m1 -o 'the plan needs.*per process' "$dir/untiled.log")"
fi
if ! timeout 600 "$mpiexec" -n 5 "$train" "${common[@]}" --spatial-size 1 --num-spatial-parts 4 \
        >"$dir/tiled.log" 2>&1; then
    echo "FAILED: the tiled run:"; tail -5 "$dir/tiled.log"; fails=$((fails + 1))
else
    grep -E "stage [0-9]|^step" "$dir/tiled.log"
    python3 - "$dir/tiled.log" <<'PY' || fails=$((fails + 1))
import os, re, sys
peaks = [float(x) for x in re.findall(r"peak memory ([\d.]+) MB", open(sys.argv[1]).read())]
if os.environ.get("ASAN_OPTIONS"):
    # resident memory includes AddressSanitizer's shadow and quarantine here;
    # that the run finished under StarPU's limit is the check
    print("tiled, 5 ranks: finished under the limit; peak resident memory %s MB "
          "(sanitizer build: not compared)" % sorted(peaks))
    sys.exit(0 if len(peaks) == 5 else 1)
ok = len(peaks) == 5 and max(peaks) < 800
print("tiled, 5 ranks: peak memory per rank %s MB (limit 800): %s" % (
    sorted(peaks), "ok" if ok else "OVER"))
sys.exit(0 if ok else 1)
PY
fi
[ "$fails" = 0 ] && echo "spatial_memory: ok"
exit $((fails > 0))

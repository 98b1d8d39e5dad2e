#!/bin/bash
# 'driver_replicas': hyfi-train with replicas (data parallelism, GEMS and all
# five dimensions together) gives the per-step losses of the one-process run
# of the global batch with parts x replicas micro-batches:
#   mpiexec -n 2 hyfi-train ... --batch-size 8 --parts 2 --data-parallel 2
#   hyfi-train ... --batch-size 16 --parts 4
# within float32 round-off (the all-reduce adds the replicas' gradients in
# another order than the one-place reduction): relative 1e-5. Also: the
# MPI4DL-format step line, global images/s, and refused combinations.
# usage: driver_replicas.sh HYFI_TRAIN MPIEXEC
set -u
train=${1:?usage: driver_replicas.sh HYFI_TRAIN MPIEXEC}
mpiexec=${2:?usage: driver_replicas.sh HYFI_TRAIN MPIEXEC}
export HYFI_CPU_THREADS=1 HYFI_LEND_MIN_BYTES=0
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fails=0
common=(--model resnet --depth 8 --dataset synthetic --steps 3 --print-freq 1)
# check NAME RANKS "ONE-PROCESS FLAGS" "REPLICA FLAGS"
check() {
    local name=$1 n=$2 one=$3 rep=$4
    # shellcheck disable=SC2086
    "$train" "${common[@]}" $one --metrics "$dir/$name.one.json" >"$dir/$name.one.log" 2>&1 ||
        { echo "FAILED: one process: $one"; cat "$dir/$name.one.log"; fails=$((fails + 1)); return; }
    # shellcheck disable=SC2086
    "$mpiexec" -n "$n" "$train" "${common[@]}" $rep --print-mpi4dl --metrics "$dir/$name.rep.json" \
        >"$dir/$name.rep.log" 2>&1 ||
        { echo "FAILED: $n ranks: $rep"; cat "$dir/$name.rep.log"; fails=$((fails + 1)); return; }
    grep -E "replicas|replica [0-9]|global batch" "$dir/$name.rep.log"
    grep -q "^Epoch: 0 images per sec:" "$dir/$name.rep.log" ||
        { echo "FAILED: $name: no MPI4DL-format step line"; fails=$((fails + 1)); }
    python3 - "$name" "$n" "$dir/$name.one.json" "$dir/$name.rep.json" <<'PY' || fails=$((fails + 1))
import json, sys
name, n, a, b = sys.argv[1:]
la = [json.loads(l)["loss"] for l in open(a) if '"step"' in l]
lb = [json.loads(l)["loss"] for l in open(b) if '"step"' in l]
worst = max(abs(x - y) / max(abs(x), 1e-12) for x, y in zip(la, lb)) if la else 1
ok = len(la) == len(lb) > 0 and worst <= 1e-5
print("%s: %d steps, losses one process %s, %s ranks %s, worst rel. diff %.2g: %s" % (
    name, len(la), la, n, lb, worst, "ok" if ok else "MISMATCH"))
sys.exit(0 if ok else 1)
PY
}
check data-parallel 2 "--image-size 16 --batch-size 16 --parts 4" \
    "--image-size 16 --batch-size 8 --parts 2 --data-parallel 2"
check gems-mast 2 "--image-size 16 --batch-size 16 --parts 4" \
    "--image-size 16 --batch-size 8 --parts 2 --split-size 2 --gems mast --schedule 1f1b"
five="--image-size 32 --batch-size 4 --parts 2 --split-size 2 --spatial-size 1 \
--num-spatial-parts 2 --slice-method vertical --gems mast --data-parallel 2"
check five-2 2 "--image-size 32 --batch-size 16 --parts 8" "$five"
check five-4 4 "--image-size 32 --batch-size 16 --parts 8" "$five --allreduce ring"
# combinations that cannot work are refused with the fix
bad() { # want, ranks, flags...
    local want=$1 n=$2; shift 2
    if "$mpiexec" -n "$n" "$train" "${common[@]}" "$@" >"$dir/bad.log" 2>&1; then
        echo "FAILED: ran: $*"; fails=$((fails + 1))
    elif ! grep -q -- "$want" "$dir/bad.log"; then
        echo "FAILED: no '$want' in the error of: $*"; cat "$dir/bad.log"; fails=$((fails + 1))
    else
        echo "refused as expected: $(grep -m1 -- "$want" "$dir/bad.log")"
    fi
}
bad "multiple of 2" 3 --image-size 16 --batch-size 8 --data-parallel 2 --split-size 2
bad "needs --gems master" 1 --image-size 16 --batch-size 8 --replications 2
bad "multiple of" 1 --image-size 16 --batch-size 6 --parts 4 --data-parallel 2
[ "$fails" = 0 ] && echo "driver_replicas: ok"
exit $((fails > 0))

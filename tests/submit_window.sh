#!/bin/bash
# 'submit_window': a step submitted in windows (--submit-window N,
# hyfi_ctx_config.submit_window: at most N of a rank's tasks submitted and
# unfinished at a time) trains exactly what the whole step submitted at once
# does, and does not deadlock across ranks. Tiny windows stress the argument
# in engine/run.c (every rank's program is the same step in the same order,
# cut to its share): halo exchanges between 4 tiles on 4 ranks, stages, GEMS,
# 2 data-parallel units with the tree all-reduce, 1F1B tokens, AmoebaNet's
# tiles on one process. Each pair must give the same losses to the last digit
# printed (one micro-batch per replica, so no sum depends on timing).
# usage: submit_window.sh HYFI_TRAIN MPIEXEC
set -u
train=${1:?usage: submit_window.sh HYFI_TRAIN MPIEXEC}
mpiexec=${2:?usage: submit_window.sh HYFI_TRAIN MPIEXEC}
export HYFI_CPU_THREADS=1 HYFI_LEND_MIN_BYTES=0
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fails=0
run() { # name, ranks, window, flags...
    local name=$1 n=$2 w=$3
    shift 3
    local launch=()
    [ "$n" -gt 1 ] && launch=("$mpiexec" -n "$n")
    if ! timeout 300 "${launch[@]}" "$train" "$@" --num-classes 2 --steps 3 --print-freq 1 \
            --submit-window "$w" --metrics "$dir/$name.json" >"$dir/$name.log" 2>&1; then
        echo "FAILED: $name (window $w)"
        tail -5 "$dir/$name.log"
        fails=$((fails + 1))
    fi
}
for plan in tiles4 replicas pipeline amoebanet; do
    case $plan in
        # 4 tiles of stage 0 on ranks 0-3, stage 1 on rank 3
        tiles4) n=4 flags=(--model resnet --depth 8 --image-size 64 --batch-size 2 --split-size 2
                           --spatial-size 1 --num-spatial-parts 4 --slice-method square) ;;
        # 2 tiles + 1 stage, GEMS, 2 data-parallel units, tree all-reduce
        replicas) n=4 flags=(--model resnet --depth 8 --image-size 64 --batch-size 8
                             --split-size 2 --spatial-size 1 --num-spatial-parts 2
                             --slice-method vertical --gems mast --data-parallel 2
                             --allreduce tree) ;;
        # 4 stages on 2 ranks, 1F1B over 4 micro-batches (deterministic sums)
        pipeline) n=2 flags=(--model resnet --depth 20 --image-size 32 --batch-size 8 --parts 4
                             --split-size 4 --schedule 1f1b --deterministic) ;;
        # one process: 4 tiles of AmoebaNet's first stage
        amoebanet) n=1 flags=(--model amoebanet --num-layers 3 --num-filters 16 --image-size 128
                              --batch-size 2 --split-size 2 --spatial-size 1
                              --num-spatial-parts 4 --slice-method square) ;;
    esac
    run "$plan.whole" "$n" 0 "${flags[@]}"
    run "$plan.w4" "$n" 4 "${flags[@]}"
    python3 - "$dir" "$plan" <<'PY' || fails=$((fails + 1))
import json, sys
d, plan = sys.argv[1:3]
def losses(name):
    try:
        return [json.loads(l)["loss"] for l in open(f"{d}/{name}.json") if '"step"' in l]
    except OSError:
        return []
a, b = losses(plan + ".whole"), losses(plan + ".w4")
ok = len(a) == 3 and a == b
print("%s: losses whole step %s, window of 4 %s: %s" % (plan, a, b, "equal" if ok else "MISMATCH"))
sys.exit(0 if ok else 1)
PY
done
[ "$fails" = 0 ] || exit 1
echo "submit_window: a step submitted 4 tasks ahead trains the whole step's losses"

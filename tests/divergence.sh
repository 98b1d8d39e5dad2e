#!/bin/bash
# 'divergence': hyfi-train ends a diverging run with an error instead of
# exit 0 (a run at loss 1.6e32 used to finish "successfully"):
#   --lr 500: warned about, then stopped past --divergence-ratio (1000x the
#     first step's loss), exit 1;
#   --lr 500 --divergence-ratio 0: trains on until a gradient is not finite,
#     then HYFI_ERR_DATA naming the parameter, exit 1;
#   --lr 0.05: exit 0, and every --metrics step line carries finite
#     grad_norm and weight_norm.
# usage: divergence.sh HYFI_TRAIN
set -u
train=${1:?usage: divergence.sh HYFI_TRAIN}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
common=(--model resnet --depth 8 --dataset synthetic --image-size 16 --batch-size 8
        --steps 30 --print-freq 5)
fails=0
expect_fail() { # name, pattern, args...
    local name=$1 pat=$2; shift 2
    timeout 300 "$train" "${common[@]}" "$@" >"$dir/log" 2>&1
    local rc=$?
    if [ "$rc" != 1 ] || ! grep -q "$pat" "$dir/log"; then
        echo "FAILED: $name: exit $rc, expected 1 and '$pat':"; tail -5 "$dir/log"
        fails=$((fails + 1))
    else
        echo "$name: exit 1: $(grep -m1 "$pat" "$dir/log" | cut -c1-160)"
    fi
}
expect_fail "lr 500" "training diverged at step" --lr 500
grep -q "warning: step .*diverging" "$dir/log" || { echo "FAILED: no warning before"; fails=$((fails + 1)); }
expect_fail "lr 500, --divergence-ratio 0" "non-finite gradient" --lr 500 --divergence-ratio 0
grep -q "the run diverged at step [0-9]*; lower --lr (500 now)" "$dir/log" ||
    { echo "FAILED: the step and --lr are not named"; fails=$((fails + 1)); }
if ! timeout 300 "$train" "${common[@]}" --lr 0.05 --metrics "$dir/m.json" >"$dir/log" 2>&1; then
    echo "FAILED: lr 0.05:"; tail -5 "$dir/log"; fails=$((fails + 1))
else
    python3 - "$dir/m.json" <<'PY' || fails=$((fails + 1))
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"step"' in l]
ok = len(rows) == 30 and all(
    isinstance(r.get(k), float) and math.isfinite(r[k]) and r[k] > 0
    for r in rows for k in ("grad_norm", "weight_norm"))
print("lr 0.05: %d steps, gradient norm %.3g -> %.3g, weight norm %.3g -> %.3g: %s" % (
    len(rows), rows[0]["grad_norm"], rows[-1]["grad_norm"], rows[0]["weight_norm"],
    rows[-1]["weight_norm"], "ok" if ok else "BAD"))
sys.exit(0 if ok else 1)
PY
fi
[ "$fails" = 0 ] && echo "divergence: ok"
exit $((fails > 0))

#!/usr/bin/env bash
# Exactness at size: one training step on a large real image, tiled +
# re-materialised on several ranks against the untiled one-process run:
# the loss, the gradients and the weights after the step, compared with the
# spatial criterion of pipeline_exact (docs/results.md): loss within
# 1e-6 + 1e-5 |x|; gradients and weights with at most 0.5% of the entries
# (5% for AmoebaNet) outside 1e-5 + 1e-4 |x| and ||got - want|| <= 1e-2 ||want||.
#
# The gradients come from the model files saved after the step: with SGD's
# first step (momentum buffer = gradient), w1 = w0 - lr (g + wd w0), so
# g = (w0 - w1) / lr - wd w0, with w0 the file saved after 0 steps.
#
#   bench/highres_exact.sh [options]
#
# Options:
#   --model 'FLAGS'  hyfi-train model flags [--model amoebanet --num-layers 6 --num-filters 32]
#   --size N         image side [2048]
#   --tiles P        tiles of stage 0 (square number) [16]
#   --ranks R        ranks of the tiled run [4]
#   --recompute M    recompute mode of the tiled run [layer]
#   --build DIR      [build]       --out DIR  [build/bench-highres-exact]
#   -h, --help       this text
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
model="--model amoebanet --num-layers 6 --num-filters 32" size=2048 tiles=16 ranks=4
recompute=layer bdir="$root/build" out=""
# shellcheck source=common.sh
source "$root/bench/common.sh"
bench_opts="model size tiles ranks recompute out"
bench_parse "$@"
bench_setup bench-highres-exact
tpy=/usr/bin/python3
data=$(bench_slides "$size")
# shellcheck disable=SC2206
mf=($model)
layers=$(bench_layers "$size" "${mf[@]}")
common=("${mf[@]}" --dataset slides --datapath "$data" --batch-size 1 --num-classes 2
        --print-freq 1 --watchdog 0 --momentum 0.9 --weight-decay 5e-4 -v) # -v: peak memory lines
export HYFI_CPU_THREADS=1 HYFI_LEND_MIN_BYTES=0
start=$(date +%s)
# the initial weights: one step at a learning rate too small to move them
"$train" "${common[@]}" --steps 1 --lr 1e-30 --save "$out/w0.safetensors" >"$out/w0.log" 2>&1
t0=$(date +%s)
"$train" "${common[@]}" --steps 1 --lr 0.05 --save "$out/untiled.safetensors" \
  --metrics "$out/untiled.json" >"$out/untiled.log" 2>&1
t1=$(date +%s)
STARPU_NCPU=1 STARPU_WORKERS_NOBIND=1 STARPU_MPI_NOBIND=1 \
  "$mpiexec" -n "$ranks" "$train" "${common[@]}" --steps 1 --lr 0.05 --save "$out/tiled.safetensors" \
  --metrics "$out/tiled.json" --split-size 2 --balance "$((layers - 1)),1" --spatial-size 1 \
  --num-spatial-parts "$tiles" --slice-method square --recompute "$recompute" \
  >"$out/tiled.log" 2>&1
t2=$(date +%s)
peaks=$(grep -h "peak memory" "$out/untiled.log" "$out/tiled.log" | tr '\n' ';')
{
  echo "Exactness at ${size}²: $(sed 's/--//g' <<<"$model"), one step, batch 1, untiled (1 process, $((t1 - t0)) s) vs $tiles tiles + --recompute $recompute on $ranks ranks ($((t2 - t1)) s)"
  echo
  bench_machine
  echo
  "$tpy" - "$out" "$(grep -q amoebanet <<<"$model" && echo 0.05 || echo 0.005)" "$peaks" <<'PY'
import json, struct, sys
import numpy as np
out, frac_limit, peaks = sys.argv[1], float(sys.argv[2]), sys.argv[3]
def load(p):
    raw = open(p, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8:8 + n])
    t = {}
    for k, v in h.items():
        if k == "__metadata__" or v["dtype"] != "F32":
            continue
        a, b = v["data_offsets"]
        t[k] = np.frombuffer(raw[8 + n + a:8 + n + b], dtype=np.float32).astype(np.float64)
    return t
w0, wu, wt = (load("%s/%s.safetensors" % (out, k)) for k in ("w0", "untiled", "tiled"))
loss = lambda p: [json.loads(l)["loss"] for l in open(p) if '"step"' in l][0]
lu, lt = loss(out + "/untiled.json"), loss(out + "/tiled.json")
lr, wd = 0.05, 5e-4
def crit(name, got, want):
    d = got - want
    outside = np.mean(~(np.abs(d) <= 1e-5 + 1e-4 * np.abs(want)))
    r = np.linalg.norm(d) / max(np.linalg.norm(want), 1e-30)
    ok = outside <= frac_limit and r <= 1e-2
    print("| %s | %d | %.3g%% | %.3g | %s |" % (name, want.size, 100 * outside, r,
                                               "within" if ok else "OUTSIDE"))
    return ok
keys = sorted(wu)
grad = lambda w: np.concatenate([(w0[k] - w[k]) / lr - wd * w0[k] for k in keys
                                 if not k.endswith(("running_mean", "running_var"))])
allw = lambda w: np.concatenate([w[k] for k in keys])
lok = abs(lt - lu) <= 1e-6 + 1e-5 * abs(lu)
print("loss: untiled %.9g, tiled %.9g, |diff| %.3g: %s" % (lu, lt, abs(lt - lu),
                                                         "within" if lok else "OUTSIDE"))
print()
print("| compared | entries | outside 1e-5 + 1e-4 abs(x) (limit %.3g%%) | norm-wise (limit 1e-2) | |"
      % (100 * frac_limit))
print("|---|---|---|---|---|")
ok = crit("gradients", grad(wt), grad(wu)) & crit("weights and statistics", allw(wt), allw(wu))
print()
print("peak memory: " + peaks)
print("result: " + ("EXACT within the spatial criterion" if ok and lok else "MISMATCH"))
PY
  echo
  echo "total $(( $(date +%s) - start )) s"
} | tee "$out/table.md"

#!/bin/bash
# Automatic plans against real runs: the plans hyfi_plan_search predicts for a
# model on this machine (hyfi-train --plan auto --explain, under mpiexec -n N),
# a spread of them measured by short real runs, and the predicted ranking
# against the measured one (Spearman's rho; whether the pick is within 10% of
# the measured best). docs/results.md, "Automatic plans (first measurements)".
#
#   bench/plan_sweep.sh [--ranks N] [--plans K] [--steps S] [--reps R] [--out FILE] -- MODEL FLAGS...
#   e.g. bench/plan_sweep.sh --ranks 2 --plans 12 --steps 5 -- --model resnet --depth 20 \
#          --image-size 128 --batch-size 8 --dataset synthetic
#
# K plans are measured: the predicted best and plans spread evenly over the
# predicted ranking of up to 200 listed (plans over the memory are not run).
# A run's images/s: the median of its steps after the first; a plan's: the best
# of R runs (R rounds over the plans, so that a busy moment of a shared host
# does not hit one plan's runs alone). Each run's output is kept in FILE.d/. Env: HYFI_TRAIN (default build/apps/hyfi-train), MPIEXEC.
set -u
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
train=${HYFI_TRAIN:-$root/build/apps/hyfi-train}
mpiexec=${MPIEXEC:-mpiexec}
ranks=1 plans=12 steps=5 reps=1 out=plan_sweep.txt
while [ $# -gt 0 ]; do
  case $1 in
    --ranks) ranks=$2; shift 2 ;;
    --plans) plans=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "usage: $0 [--ranks N] [--plans K] [--steps S] [--reps R] [--out FILE] -- MODEL FLAGS..." >&2; exit 2 ;;
  esac
done
[ $# -gt 0 ] || { echo "$0: give the model's flags after --" >&2; exit 2; }
model=("$@")
logs="$out.d"
mkdir -p "$logs"
run() { if [ "$ranks" -gt 1 ]; then "$mpiexec" -n "$ranks" "$train" "$@"; else "$train" "$@"; fi; }

run "${model[@]}" --plan auto --explain --plan-top 200 >"$logs/explain.txt" 2>&1 </dev/null ||
  { cat "$logs/explain.txt"; exit 1; }
# the plans that fit: predicted images/s and flags
awk '/^faster plans over/ {exit} /^ +[0-9]+ / {p = $2; sub(/.*--batch-size/, "--batch-size"); print p "\t" $0}' \
  "$logs/explain.txt" >"$logs/listed.tsv"
total=$(wc -l <"$logs/listed.tsv")
[ "$total" -gt 0 ] || { echo "no plan listed"; cat "$logs/explain.txt"; exit 1; }
# the best, then K-1 spread over the rest
picks=$(python3 - "$total" "$plans" <<'PY'
import sys
n, k = int(sys.argv[1]), int(sys.argv[2])
k = min(k, n)
idx = sorted({0} | {round(i * (n - 1) / max(k - 1, 1)) for i in range(k)})
print(" ".join(str(i + 1) for i in idx))
PY
)
{
  echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# $ranks rank(s): ${model[*]}; $total plans listed; $steps steps per run, best of $reps"
  printf "pred_rank\tpredicted\tmeasured\tflags\n"
} >"$out"
measure() { # the median images/s of run file $1's steps after the first
  awk '/^step [0-9]+ loss/ {n++; if (n > 1) print $6}' "$1" | sort -g |
    awk '{v[NR] = $1} END {if (NR == 0) print "fail"; else if (NR % 2) print v[(NR + 1) / 2];
         else print (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}
for ((k = 1; k <= reps; k++)); do
  for i in $picks; do
    flags=$(sed -n "${i}p" "$logs/listed.tsv" | cut -f2)
    # shellcheck disable=SC2206
    f=($flags)
    run "${model[@]}" "${f[@]}" --steps "$steps" --print-freq 1 >"$logs/run$i.$k.txt" 2>&1 </dev/null
    echo "round $k plan $i: $(measure "$logs/run$i.$k.txt") images/s (load $(cut -d' ' -f1 /proc/loadavg))"
  done
done
for i in $picks; do
  line=$(sed -n "${i}p" "$logs/listed.tsv")
  best=$(for ((k = 1; k <= reps; k++)); do measure "$logs/run$i.$k.txt"; done | grep -v fail |
    sort -g | tail -1)
  printf "%s\t%s\t%s\t%s\n" "$i" "${line%%$'\t'*}" "${best:-fail}" "${line#*$'\t'}" | tee -a "$out"
done
python3 - "$out" <<'PY' | tee -a "$out"
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l[0].isdigit()]
rows = [(int(r[0]), float(r[1]), float(r[2])) for r in rows if r[2] != "fail"]
def ranks(v):
    order = sorted(range(len(v)), key=lambda i: -v[i])
    rk = [0.0] * len(v)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]: j += 1
        for t in range(i, j + 1): rk[order[t]] = (i + j) / 2 + 1
        i = j + 1
    return rk
if len(rows) >= 2:
    p = ranks([r[1] for r in rows]); m = ranks([r[2] for r in rows])
    n = len(rows); mp = sum(p) / n; mm = sum(m) / n
    cov = sum((a - mp) * (b - mm) for a, b in zip(p, m))
    var = (sum((a - mp) ** 2 for a in p) * sum((b - mm) ** 2 for b in m)) ** 0.5
    rho = cov / var if var else float("nan")
    best = max(r[2] for r in rows); pick = [r for r in rows if r[0] == 1]
    pk = pick[0][2] if pick else float("nan")
    print("# %d plans measured; Spearman rho (predicted vs measured) %.2f; the pick %.2f images/s, "
          "the measured best %.2f: %.0f%% of it (%s 10%%)" % (n, rho, pk, best, 100 * pk / best,
          "within" if pk >= 0.9 * best else "not within"))
PY

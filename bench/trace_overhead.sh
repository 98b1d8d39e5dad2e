#!/usr/bin/env bash
# What tracing costs: images/s of the same training run without tracing and
# with --trace (StarPU FxT recording on every rank), side by side (ABBA order,
# repeated), on 1 rank and on 2 ranks. Tracing off is hyfi's default path: no
# FxT recording (StarPU records only with STARPU_FXT_TRACE=1), no profiling,
# no task callback.
#
#   bench/trace_overhead.sh [--reps R] [--steps N] [--build DIR] [--out DIR]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
reps=3 steps=15 bdir="$root/build" out=""
# shellcheck source=common.sh
source "$root/bench/common.sh"
bench_opts="reps steps out"
bench_parse "$@"
bench_setup bench-trace
base=(--model resnet --depth 20 --dataset synthetic --image-size 32 --batch-size 32
      --num-classes 10 --print-freq 1000000 --steps $((steps + 5)))
: >"$out/runs.txt"
run() { # ranks trace(0/1) rep
  local n=$1 tr=$2 rep=$3 log="$out/r$1.t$2.$3" extra=()
  [ "$tr" = 1 ] && extra=(--trace "$log.trace")
  rm -rf "$log.trace"
  if [ "$n" = 1 ]; then
    "$train" "${base[@]}" "${extra[@]}" --metrics "$log.json" >"$log.log" 2>&1
  else
    STARPU_NCPU=1 STARPU_WORKERS_NOBIND=1 STARPU_MPI_NOBIND=1 "$mpiexec" -n 2 "$train" \
      "${base[@]}" --data-parallel 2 "${extra[@]}" --metrics "$log.json" >"$log.log" 2>&1
  fi
  local ips
  ips=$(python3 -c "import json,sys; print([json.loads(l) for l in open(sys.argv[1]) if 'summary' in l][-1]['median_images_per_sec'])" "$log.json")
  echo "$n $tr $ips" | tee -a "$out/runs.txt" >&2
}
"$train" "${base[@]}" --steps 8 >/dev/null 2>&1 || true
for ((r = 1; r <= reps; r++)); do
  for n in 1 2; do
    run "$n" 0 "$r"; run "$n" 1 "$r"; run "$n" 1 "$r.b"; run "$n" 0 "$r.b"
  done
done
{
  echo "Tracing overhead, ResNet-20 v1, batch 32 (per replica), 32x32; $(nproc) cores, $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  python3 - "$out/runs.txt" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
print("| ranks | untraced img/s (median) | traced img/s (median) | traced / untraced | runs untraced | runs traced |")
print("|---|---|---|---|---|---|")
for n in ("1", "2"):
    a = [float(r[2]) for r in rows if r[0] == n and r[1] == "0"]
    b = [float(r[2]) for r in rows if r[0] == n and r[1] == "1"]
    if a and b:
        print("| %s | %.1f | %.1f | %.3f | %s | %s |" % (n, statistics.median(a), statistics.median(b),
              statistics.median(b) / statistics.median(a), " ".join("%.0f" % x for x in a),
              " ".join("%.0f" % x for x in b)))
PY
} | tee "$out/table.md"

#!/usr/bin/env bash
# Layer + pipeline parallelism on this machine: images/s and peak memory of
#   1 rank, 1 stage            (the single-place run, M micro-batches)
#   1 rank, 2 stages           (both places in one process, sharing its workers)
#   2 ranks, 2 stages          (mpiexec -n 2, one place per rank)
# for M = 1, 2, 4, 8 micro-batches, side by side in one run.
#
#   bench/pipeline_scaling.sh [options]
#
# Options:
#   --model 'FLAGS'    hyfi-train model flags [--model resnet --depth 56]
#   --batch N          batch [64]      --image N   image side [32]
#   --parts LIST       micro-batch counts [1,2,4,8]
#   --schedule S       gpipe | 1f1b [1f1b]
#   --steps N          measured steps per run (after 5 warm-up steps) [15]
#   --reps R           repetitions per configuration, rotated [2]
#   --build DIR        hyfi build folder [build]
#   --out DIR          logs and the table [build/bench-pipeline]
#   -h, --help         this text
#
# Each run reports the median images/s of its steps (hyfi-train --metrics);
# the table gives the median over repetitions, and the peak resident memory
# of each rank (hyfi-train's peak-memory line, getrusage) next to the plan's estimate of
# the activation memory per place (the plan line printed at start).
# MPI runs use one CPU worker per rank, unbound (2 cores: see TOOLCHAIN).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
model="--model resnet --depth 56" batch=64 image=32 parts="1,2,4,8" schedule=1f1b
steps=15 reps=2 bdir="$root/build" out=""
# shellcheck source=common.sh
source "$root/bench/common.sh"
bench_opts="model batch image parts schedule steps reps out"
bench_parse "$@"
bench_setup bench-pipeline

# shellcheck disable=SC2206
base=($model --dataset synthetic --batch-size "$batch" --image-size "$image" --num-classes 10
      --schedule "$schedule" --print-freq 1000000 -v) # -v: every rank's peak memory line
IFS=, read -r -a plist <<<"$parts"
configs=()
for m in "${plist[@]}"; do configs+=("1r1s:$m" "1r2s:$m" "2r2s:$m"); done

run_cfg() { # name rep -> appends a JSON line to runs.jsonl
  local kind="${1%%:*}" m="${1##*:}" rep="$2"
  local log="$out/$kind.m$m.$rep"
  local args=("${base[@]}" --parts "$m" --steps $((steps + 5)) --metrics "$log.metrics")
  case "$kind" in
    1r1s) "$train" "${args[@]}" >"$log.log" 2>&1 ;;
    1r2s) "$train" "${args[@]}" --split-size 2 >"$log.log" 2>&1 ;;
    2r2s) STARPU_NCPU=1 STARPU_WORKERS_NOBIND=1 STARPU_MPI_NOBIND=1 \
            "$mpiexec" -n 2 "$train" "${args[@]}" \
            --split-size 2 >"$log.log" 2>&1 ;;
  esac || { echo "[bench] $kind M=$m failed (log $log.log)" >&2; tail -5 "$log.log" >&2; return 1; }
  python3 - "$kind" "$m" "$log" >>"$out/runs.jsonl" <<'PY'
import json, re, sys
kind, m, log = sys.argv[1], int(sys.argv[2]), sys.argv[3]
summ = [json.loads(l) for l in open(log + ".metrics") if '"summary"' in l][-1]
text = open(log + ".log").read()
rss = [0.0] * 8
for r, mb in re.findall(r"rank (\d+) peak memory ([\d.]+) MB", text):
    rss[int(r)] = float(mb)
rss = rss[:max(1, len(re.findall(r"peak memory", text)))]
act = [float(x) for x in re.findall(r"activations ~([\d.]+) MB", text)]
print(json.dumps({"kind": kind, "parts": m, "ips": summ["median_images_per_sec"],
                  "rss_mb": rss, "act_mb": act}))
PY
  tail -1 "$out/runs.jsonl" >&2
}

start=$(date +%s)
: >"$out/runs.jsonl"
echo "[bench] calibrating StarPU's performance models" >&2
"$train" "${base[@]}" --steps 10 >/dev/null 2>&1 || true
bench_rotate

{
  echo "Layer + pipeline parallelism, $(sed 's/--//g' <<<"$model"), batch $batch, ${image}x$image, schedule $schedule"
  echo
  bench_machine
  echo "- $reps repetitions, value = median of the runs' median images/s over $steps steps (5 warm-up steps dropped)"
  echo "- memory: peak RSS of each process (MB); in brackets the plan's estimate of activation memory per place (MB)"
  echo
  python3 - "$out/runs.jsonl" "${plist[@]}" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
parts = [int(p) for p in sys.argv[2:]]
def get(kind, m):
    rs = [r for r in runs if r["kind"] == kind and r["parts"] == m]
    if not rs:
        return None, "n/a"
    ips = statistics.median(r["ips"] for r in rs)
    rss = ["%.0f" % max(r["rss_mb"][i] for r in rs) for i in range(len(rs[0]["rss_mb"]))]
    act = "/".join("%.1f" % a for a in rs[0]["act_mb"])
    return ips, "%s [%s]" % (" + ".join(rss), act)
print("| micro-batches | 1 rank, 1 stage img/s | 1 rank, 2 stages img/s | 2 ranks, 2 stages img/s | 2 ranks / 1 rank | memory 1r1s | memory 1r2s | memory 2r2s (rank 0 + rank 1) |")
print("|---|---|---|---|---|---|---|---|")
for m in parts:
    a, ma = get("1r1s", m)
    b, mb = get("1r2s", m)
    c, mc = get("2r2s", m)
    f = lambda v: "n/a" if v is None else "%.1f" % v
    ratio = "n/a" if not a or c is None else "%.2f" % (c / a)
    print("| %d | %s | %s | %s | %s | %s | %s | %s |" % (m, f(a), f(b), f(c), ratio, ma, mb, mc))
PY
  echo
  echo "total bench time $(( $(date +%s) - start )) s; runs in $out/runs.jsonl"
} | tee "$out/table.md"

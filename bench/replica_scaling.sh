#!/usr/bin/env bash
# Data parallelism and GEMS on this machine: global images/s of
#   1r-1core  1 rank on one core (one worker, one thread), batch B
#   1r        1 rank, one place, batch B, both cores
#   1r-dp2    1 rank, 2 data-parallel replicas (global 2B)    (the replicas' own cost)
#   2r-dp2    2 ranks, 2 data-parallel replicas, all-reduce auto / ring / tree
#   2r-lp     2 ranks, 2 stages, batch 2B, 2M micro-batches   (layer + pipeline)
#   2r-gems   2 ranks, 2 stages, GEMS MAST, B per copy, M micro-batches
# side by side in one run (configurations rotated between repetitions).
# Weak scaling: each replica keeps batch B, so 2 ranks train 2B images per
# step; efficiency = (2-rank img/s) / (2 x 1-rank-on-one-core img/s): each MPI
# rank has one core here, as a rank would have its own GPU or node.
#
#   bench/replica_scaling.sh [options]
#
# Options:
#   --model 'FLAGS'    hyfi-train model flags [--model resnet --depth 56]
#   --batch N          batch per replica [32]   --image N   image side [32]
#   --parts M          micro-batches per replica for the stage plans [2]
#   --steps N          measured steps per run (after 5 warm-up steps) [15]
#   --reps R           repetitions per configuration, rotated [2]
#   --build DIR        hyfi build folder [build]
#   --out DIR          logs and the table [build/bench-replica]
#   -h, --help         this text
#
# Each run reports the median images/s of its steps (hyfi-train --metrics,
# counting every replica's images); the table gives the median over
# repetitions and the bytes per step the plan predicts between the ranks.
# MPI runs use one CPU worker per rank, unbound (2 cores: see TOOLCHAIN).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
model="--model resnet --depth 56" batch=32 image=32 parts=2
steps=15 reps=2 bdir="$root/build" out=""
# shellcheck source=common.sh
source "$root/bench/common.sh"
bench_opts="model batch image parts steps reps out"
bench_parse "$@"
bench_setup bench-replica

# shellcheck disable=SC2206
base=($model --dataset synthetic --image-size "$image" --num-classes 10 --print-freq 1000000
      --steps $((steps + 5)) -v) # -v: every rank's peak memory line
configs=(1r-1core 1r 1r-dp2 2r-dp2 2r-dp2-ring 2r-dp2-tree 2r-lp 2r-gems)

run_cfg() { # name rep -> appends a JSON line to runs.jsonl
  local kind="$1" rep="$2" log="$out/$1.$2" n=1 args=()
  case "$kind" in
    1r|1r-1core) args=(--batch-size "$batch") ;;
    1r-dp2) args=(--batch-size "$batch" --data-parallel 2) ;;
    2r-dp2) n=2 args=(--batch-size "$batch" --data-parallel 2) ;;
    2r-dp2-ring) n=2 args=(--batch-size "$batch" --data-parallel 2 --allreduce ring) ;;
    2r-dp2-tree) n=2 args=(--batch-size "$batch" --data-parallel 2 --allreduce tree) ;;
    2r-lp) n=2 args=(--batch-size $((2 * batch)) --split-size 2 --parts $((2 * parts))
                     --schedule 1f1b) ;;
    2r-gems) n=2 args=(--batch-size "$batch" --split-size 2 --parts "$parts" --gems mast
                       --schedule 1f1b) ;;
  esac
  if [ "$kind" = 1r-1core ]; then
    STARPU_NCPU=1 HYFI_CPU_THREADS=1 taskset -c 0 "$train" "${base[@]}" "${args[@]}" \
      --metrics "$log.metrics" >"$log.log" 2>&1
  elif [ "$n" = 1 ]; then
    "$train" "${base[@]}" "${args[@]}" --metrics "$log.metrics" >"$log.log" 2>&1
  else
    STARPU_NCPU=1 STARPU_WORKERS_NOBIND=1 STARPU_MPI_NOBIND=1 \
      "$mpiexec" -n "$n" "$train" "${base[@]}" "${args[@]}" --metrics "$log.metrics" \
      >"$log.log" 2>&1
  fi || { echo "[bench] $kind failed (log $log.log)" >&2; tail -5 "$log.log" >&2; return 1; }
  python3 - "$kind" "$log" >>"$out/runs.jsonl" <<'PY'
import json, re, sys
kind, log = sys.argv[1], sys.argv[2]
summ = [json.loads(l) for l in open(log + ".metrics") if '"summary"' in l][-1]
text = open(log + ".log").read()
traffic = re.findall(r"predicted traffic between ranks: (\d+) bytes per step", text)
rss = [float(mb) for _, mb in re.findall(r"rank (\d+) peak memory ([\d.]+) MB", text)]
print(json.dumps({"kind": kind, "ips": summ["median_images_per_sec"],
                  "traffic": int(traffic[0]) if traffic else 0, "rss_mb": rss}))
PY
  tail -1 "$out/runs.jsonl" >&2
}

start=$(date +%s)
: >"$out/runs.jsonl"
echo "[bench] calibrating StarPU's performance models" >&2
"$train" "${base[@]}" --batch-size "$batch" --steps 10 >/dev/null 2>&1 || true
bench_rotate

{
  echo "Replicas (data parallelism, GEMS), $(sed 's/--//g' <<<"$model"), batch $batch per replica, ${image}x$image"
  echo
  bench_machine
  echo "- $reps repetitions, value = median of the runs' median images/s over $steps steps (5 warm-up steps dropped), every replica's images counted"
  echo
  python3 - "$out/runs.jsonl" "$batch" "$parts" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
B, M = int(sys.argv[2]), int(sys.argv[3])
desc = {
    "1r-1core": "1 rank on 1 core, batch %d" % B,
    "1r": "1 rank (2 cores), 1 place, batch %d" % B,
    "1r-dp2": "1 rank, 2 data-parallel replicas (global %d)" % (2 * B),
    "2r-dp2": "2 ranks, 2 data-parallel replicas, all-reduce auto",
    "2r-dp2-ring": "2 ranks, 2 data-parallel replicas, ring",
    "2r-dp2-tree": "2 ranks, 2 data-parallel replicas, tree",
    "2r-lp": "2 ranks, 2 stages, batch %d, %d micro-batches, 1F1B" % (2 * B, 2 * M),
    "2r-gems": "2 ranks, 2 stages, GEMS MAST, %d per copy, %d micro-batches" % (B, M),
}
base = None
print("| configuration | images/s (global), median | runs | vs 1 rank on 1 core | scaling efficiency | traffic between ranks (MB/step) | peak MB per rank |")
print("|---|---|---|---|---|---|---|")
for k in desc:
    rs = [r for r in runs if r["kind"] == k]
    if not rs:
        continue
    ips = statistics.median(r["ips"] for r in rs)
    if k == "1r-1core":
        base = ips
    ranks = 2 if k.startswith("2r") else 1
    ratio = ips / base if base else float("nan")
    print("| %s | %.1f | %s | %.2f | %s | %.2f | %s |" % (
        desc[k], ips, " ".join("%.0f" % r["ips"] for r in rs), ratio,
        "%.0f%%" % (100 * ratio / ranks) if ranks > 1 else "-",
        rs[0]["traffic"] / 1e6, " + ".join("%.0f" % x for x in rs[0]["rss_mb"])))
PY
  echo
  echo "total bench time $(( $(date +%s) - start )) s; runs in $out/runs.jsonl"
} | tee "$out/table.md"

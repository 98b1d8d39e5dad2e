#!/usr/bin/env bash
# The simulation against real runs on this machine: images/s of the same
# plans run for real (mpiexec) and simulated (scripts/simulate.sh, StarPU +
# SimGrid) on 1, 2 and 4 ranks, for
#   pipeline   ResNet-20, 4 stages x 4 micro-batches (1F1B), batch 32, 32x32
#   spatial    ResNet-20, stage 0 of 2 in 4 square tiles, batch 4, 64x64
#   replicas   ResNet-20, 4 data-parallel replicas of 16 images (64 per step)
#   five       ResNet-8, 2 vertical tiles x 2 stages x 2 micro-batches x GEMS
#              MAST x 2 data-parallel groups, batch 4, 32x32 (user guide)
# The real runs are the calibration: they record StarPU's performance models
# (STARPU_CALIBRATE=1) per rank count, as machines epyc2-r1, -r2, -r4 (the
# 2 cores as one rank, or each of 2 or 4 ranks sharing them, sees them); the
# simulation of R ranks then uses the models of epyc2-rR ("matched"), and
# those of epyc2-r1 ("from 1 rank": how far kernel times measured alone
# predict the shared machine). Needs the real build (build/) and the
# simulation build (build-sim/, docs/simulation.md).
#
#   bench/simulate_validate.sh [--steps N] [--reps R] [--ranks '1 2 4']
#                              [--configs 'pipeline spatial replicas five'] [--out DIR]
#                              [--platform FILE] [--sim-only 1] [--lend 0|1] [--task-us X]
# --lend 0 runs the real runs without core lending (HYFI_LEND_MIN_BYTES=0: each
# CPU kernel on its worker's own core), which the simulation cannot model (a
# kernel that borrows the idle worker's core is recorded with its shorter
# time, while the simulation lets that worker run another task meanwhile).
# --task-us X: HYFI_SIM_TASK_US in the simulations (runtime cost per task).
# --keep-outliers 1: the calibration keeps every measurement
# (STARPU_HISTORY_MAX_ERROR=1000000); by default StarPU drops those more than
# 50% off a footprint's mean, so a machine shared with other jobs is
# calibrated by its undisturbed kernel times.
# --sim-only 1 simulates again from the real runs and models already in DIR
# (e.g. with another --platform, default platforms/epyc2.xml).
# Each real run: the median images/s of N steps after 5 warm-up steps
# (hyfi-train --metrics); the table gives the median over R repetitions.
# 1 rank runs 2 CPU workers, more ranks 1 CPU worker each (STARPU_NCPU), in
# the simulation alike.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
steps=15 reps=2 ranks="1 2 4" configs="pipeline spatial replicas five"
bdir="$root/build" out="" platform="$root/platforms/epyc2.xml" sim_only=0 lend=1 task_us=0
keep_outliers=0
bench_opts="steps reps ranks configs out platform sim_only lend task_us keep_outliers"
# shellcheck source=common.sh
source "$root/bench/common.sh"
bench_parse "$@"
bench_setup bench-simulate
sampling="$out/sampling"
mkdir -p "$sampling"
sim="$root/build-sim/apps/hyfi-train.so"
[ -f "$sim" ] || { echo "[bench] no simulation build ($sim): see docs/simulation.md" >&2; exit 2; }

cfg_args() {
  case "$1" in
    pipeline) echo "--model resnet --depth 20 --batch-size 32 --image-size 32 --split-size 4 --parts 4 --schedule 1f1b" ;;
    spatial) echo "--model resnet --depth 20 --batch-size 4 --image-size 64 --split-size 2 --spatial-size 1 --num-spatial-parts 4 --slice-method square" ;;
    replicas) echo "--model resnet --depth 20 --batch-size 16 --image-size 32 --data-parallel 4" ;;
    five) echo "--model resnet --depth 8 --batch-size 4 --image-size 32 --parts 2 --split-size 2 --spatial-size 1 --num-spatial-parts 2 --slice-method vertical --gems mast --data-parallel 2" ;;
  esac
}
common=(--dataset synthetic --num-classes 10 --print-freq 1000000 --steps $((steps + 5)))

ips_of() { python3 -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1]) if "summary" in l][-1]["median_images_per_sec"])' "$1"; }

real_run() { # CONFIG RANKS REP
  local c=$1 n=$2 log="$out/real.$1.$2.$3" ncpu=1 k mpmd=()
  [ "$n" = 1 ] && ncpu=2
  # Each rank records its models in a folder of its own (ranks sharing one
  # would overwrite each other's files at shutdown); merged below.
  for ((k = 0; k < n; k++)); do
    mkdir -p "$out/cal-r$n/rank$k"
    [ "$k" = 0 ] || mpmd+=(:)
    # shellcheck disable=SC2046
    mpmd+=(-n 1 -env STARPU_PERF_MODEL_DIR "$out/cal-r$n/rank$k" "$train" $(cfg_args "$c")
           "${common[@]}" --metrics "$log.metrics")
  done
  local lendenv=()
  [ "$lend" = 0 ] && lendenv=(HYFI_LEND_MIN_BYTES=0)
  [ "$keep_outliers" = 1 ] && lendenv+=(STARPU_HISTORY_MAX_ERROR=1000000)
  env "${lendenv[@]}" STARPU_HOSTNAME="epyc2-r$n" STARPU_CALIBRATE=1 \
    STARPU_NCPU=$ncpu STARPU_WORKERS_NOBIND=1 STARPU_MPI_NOBIND=1 \
    "$mpiexec" "${mpmd[@]}" >"$log.log" 2>&1 ||
    { echo "[bench] real $c on $n failed ($log.log)" >&2; return 1; }
  echo "{\"kind\":\"real\",\"config\":\"$c\",\"ranks\":$n,\"ips\":$(ips_of "$log.metrics"),\"load\":\"$(cut -d' ' -f1 /proc/loadavg)\"}" >>"$out/runs.jsonl"
  tail -1 "$out/runs.jsonl" >&2
}

sim_run() { # CONFIG RANKS MACHINE
  local c=$1 n=$2 m=$3 log="$out/sim.$1.$2.$3" ncpu=1 t0 t1
  [ "$n" = 1 ] && ncpu=2
  t0=$(date +%s.%N)
  # shellcheck disable=SC2046
  HYFI_SIM_TASK_US="$task_us" STARPU_PERF_MODEL_DIR="$sampling" STARPU_HOSTNAME="$m" STARPU_NCPU=$ncpu \
    timeout 600 bash "$root/scripts/simulate.sh" -n "$n" --platform "$platform" \
    $(cfg_args "$c") "${common[@]}" \
    --metrics "$log.metrics" >"$log.log" 2>&1 ||
    { echo "[bench] simulated $c on $n ($m) failed ($log.log)" >&2; return 0; }
  t1=$(date +%s.%N)
  echo "{\"kind\":\"sim\",\"config\":\"$c\",\"ranks\":$n,\"machine\":\"$m\",\"ips\":$(ips_of "$log.metrics"),\"wall_s\":$(python3 -c "print(round($t1-$t0,2))")}" >>"$out/runs.jsonl"
  tail -1 "$out/runs.jsonl" >&2
}

if [ "$sim_only" = 1 ]; then
  grep '"kind":"real"' "$out/runs.jsonl" >"$out/runs.real" || true
  mv "$out/runs.real" "$out/runs.jsonl"
else
  : >"$out/runs.jsonl"
  for ((r = 1; r <= reps; r++)); do
    for c in $configs; do for n in $ranks; do real_run "$c" "$n" "$r"; done; done
  done
  for n in $ranks; do
    python3 "$root/bench/merge_perfmodels.py" "$sampling" "epyc2-r$n" "$out/cal-r$n"/rank*
  done
fi
for c in $configs; do
  for n in $ranks; do
    sim_run "$c" "$n" "epyc2-r$n"
    [ "$n" = 1 ] || sim_run "$c" "$n" epyc2-r1
  done
done

{
  echo "Simulation vs real runs, images/s ($reps real repetitions, $steps steps after 5 warm-up), platform $(basename "$platform"), core lending $lend, outliers kept $keep_outliers, $task_us us per task in the simulation"
  echo
  bench_machine
  echo
  python3 - "$out/runs.jsonl" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
print("| plan | ranks | real img/s (median; runs) | simulated, matched models | error | simulated, 1-rank models | error | simulation wall s |")
print("|---|---|---|---|---|---|---|---|")
for c in ["pipeline", "spatial", "replicas", "five"]:
    for n in [1, 2, 4]:
        rr = [r["ips"] for r in runs if r["kind"] == "real" and r["config"] == c and r["ranks"] == n]
        if not rr:
            continue
        real = statistics.median(rr)
        def sim(m):
            s = [r for r in runs if r["kind"] == "sim" and r["config"] == c and r["ranks"] == n and r["machine"] == m]
            return s[0] if s else None
        def cell(s):
            if not s:
                return "-", "-"
            return "%.1f" % s["ips"], "%+.0f%%" % (100 * (s["ips"] / real - 1))
        a, ea = cell(sim("epyc2-r%d" % n))
        b, eb = cell(sim("epyc2-r1") if n > 1 else None)
        w = sim("epyc2-r%d" % n)
        print("| %s | %d | %.1f; %s | %s | %s | %s | %s | %s |" % (c, n, real, " ".join("%.0f" % x for x in rr),
              a, ea, b, eb, w["wall_s"] if w else "-"))
PY
} | tee "$out/table.md"

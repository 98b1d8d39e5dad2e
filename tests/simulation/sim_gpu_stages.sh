#!/usr/bin/env bash
# Simulation build test (suite 'simulation'): a pipeline of 2 stages x 4
# micro-batches on 2 simulated ranks of 4 simulated V100 each (machine
# 'lassen', analytic models), the smallest plan that stopped with SimGrid's
# "deadlock detected" in its first steps: the gradients summed over
# micro-batches are STARPU_REDUX handles, whose reduction tasks StarPU submits
# itself and does not time in a simulation; run asynchronously on a simulated
# GPU they never ended (docs/simulation.md, "Multi-stage plans on simulated
# GPUs"). Checks that every step runs, with CPU workers beside the GPUs
# (dmdas, hyfi's default with GPUs, and the random scheduler) and without.
# Skips (77) without starpu_smpirun.
set -euo pipefail
root="${HYFI_SOURCE_DIR:?}"
build="${HYFI_SIM_BUILD:?}"
command -v "${HYFI_DEPS:-/opt/hyfi-deps}/starpu-simgrid/bin/starpu_smpirun" >/dev/null ||
  { echo "no StarPU on SimGrid (scripts/setup-simgrid.sh): skip"; exit 77; }
args=(--model resnet --depth 20 --batch-size 32 --image-size 32 --split-size 2 --parts 4
      --dataset synthetic --num-classes 10 --steps 6 --print-freq 1)
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
run() { # name, then environment assignments
  local name=$1; shift
  env HYFI_SIM_ANALYTIC="$root/perfmodels/analytic-v100.txt" STARPU_HOSTNAME=lassen "$@" \
    timeout 120 bash "$root/scripts/simulate.sh" -n 2 --platform "$root/platforms/lassen.xml" \
    --build "$build" "${args[@]}" >"$tmp/$name.out" 2>"$tmp/$name.err" ||
    { echo "$name: the simulation failed"; cat "$tmp/$name.out" "$tmp/$name.err"; exit 1; }
  grep -q "^summary: 6 steps" "$tmp/$name.out" ||
    { echo "$name: no summary of 6 steps"; cat "$tmp/$name.out" "$tmp/$name.err"; exit 1; }
  grep -q "stage 1: .*rank 1" "$tmp/$name.out" ||
    { echo "$name: stage 1 is not on rank 1"; cat "$tmp/$name.out"; exit 1; }
  [ "$(grep -c "^step [0-9]* loss" "$tmp/$name.err")" = 6 ] || # progress: stderr
    { echo "$name: not 6 step lines"; cat "$tmp/$name.err"; exit 1; }
  grep -q "images/s mean [0-9.]* median [1-9]" "$tmp/$name.out" ||
    { echo "$name: no positive images/s"; grep summary "$tmp/$name.out"; exit 1; }
  echo "$name: $(grep "^summary" "$tmp/$name.out")"
}
run gpus+cpus STARPU_NCUDA=4 STARPU_NCPU=4
run gpus-only STARPU_NCUDA=4 STARPU_NCPU=0
run random STARPU_NCUDA=4 STARPU_NCPU=4 STARPU_SCHED=random

# pinned NAME NGPUS ARGS...: one rank of 4 simulated GPUs runs the plan of
# ARGS for 2 steps; every task of its training step must be pinned to a GPU
# (engine/plan.c), none left to the scheduler, on NGPUS GPUs in all.
pinned() {
  local name=$1 want=$2 workers
  shift 2
  env HYFI_SIM_ANALYTIC="$root/perfmodels/analytic-v100.txt" STARPU_HOSTNAME=lassen \
    STARPU_NCUDA=4 STARPU_NCPU=4 HYFI_DUMP_PROGRAMS="$tmp/$name.dump" \
    timeout 120 bash "$root/scripts/simulate.sh" -n 1 --platform "$root/platforms/lassen.xml" \
    --build "$build" --model resnet --depth 8 --image-size 32 "$@" \
    --dataset synthetic --num-classes 10 --steps 2 --print-freq 1 \
    >"$tmp/$name.out" 2>"$tmp/$name.err" ||
    { echo "$name: the simulation failed"; cat "$tmp/$name.out" "$tmp/$name.err"; exit 1; }
  workers=$(awk '/^program train/{f=1} /^program infer/{f=0}
    f && /^task/ {for (i = 1; i <= NF; i++) if ($i == "worker") print $(i + 1)}' \
    "$tmp/$name.dump" | sort -u | tr '\n' ' ')
  echo "$name: the training step's tasks on workers: $workers"
  case " $workers" in
    *" -1 "*|" ") echo "$name: tasks not pinned to a GPU"; exit 1 ;;
  esac
  [ "$(echo $workers | wc -w)" = "$want" ] || { echo "$name: want $want GPU(s)"; exit 1; }
}
# GEMS: the mirrored copy's places share their original's GPUs (2 stages: 2
# devices for 4 places).
pinned gems 2 --batch-size 8 --split-size 2 --parts 2 --gems mast
# One place: pinned to one GPU as well (left to the scheduler, its small tasks
# went to CPU workers and their data crossed the host link every step).
pinned one-place 1 --batch-size 4

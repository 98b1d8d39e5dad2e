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

# GEMS on one rank of 4 simulated GPUs: the mirrored copy's places share
# their original's GPUs (2 stages: 2 devices for 4 places), so every task of
# the step is pinned to a GPU (engine/plan.c), none left to the scheduler.
env HYFI_SIM_ANALYTIC="$root/perfmodels/analytic-v100.txt" STARPU_HOSTNAME=lassen \
  STARPU_NCUDA=4 STARPU_NCPU=4 HYFI_DUMP_PROGRAMS="$tmp/gems.dump" \
  timeout 120 bash "$root/scripts/simulate.sh" -n 1 --platform "$root/platforms/lassen.xml" \
  --build "$build" --model resnet --depth 8 --batch-size 8 --image-size 32 --split-size 2 \
  --parts 2 --gems mast --dataset synthetic --num-classes 10 --steps 2 --print-freq 1 \
  >"$tmp/gems.out" 2>"$tmp/gems.err" ||
  { echo "gems: the simulation failed"; cat "$tmp/gems.out" "$tmp/gems.err"; exit 1; }
workers=$(awk '/^program train/{f=1} /^program infer/{f=0}
  f && /^task/ {for (i = 1; i <= NF; i++) if ($i == "worker") print $(i + 1)}' "$tmp/gems.dump" |
  sort -u | tr '\n' ' ')
echo "gems: the training step's tasks on workers: $workers"
case " $workers" in
  *" -1 "*|" ") echo "gems: tasks not pinned to a GPU"; exit 1 ;;
esac
[ "$(echo $workers | wc -w)" = 2 ] || { echo "gems: want 2 GPUs for 4 places"; exit 1; }

# One place on a rank of 4 simulated GPUs: pinned to one GPU as well (left to
# the scheduler, its small tasks went to CPU workers and their data crossed the
# host link every step).
env HYFI_SIM_ANALYTIC="$root/perfmodels/analytic-v100.txt" STARPU_HOSTNAME=lassen \
  STARPU_NCUDA=4 STARPU_NCPU=4 HYFI_DUMP_PROGRAMS="$tmp/one.dump" \
  timeout 120 bash "$root/scripts/simulate.sh" -n 1 --platform "$root/platforms/lassen.xml" \
  --build "$build" --model resnet --depth 8 --batch-size 4 --image-size 32 \
  --dataset synthetic --num-classes 10 --steps 2 --print-freq 1 \
  >"$tmp/one.out" 2>"$tmp/one.err" ||
  { echo "one place: the simulation failed"; cat "$tmp/one.out" "$tmp/one.err"; exit 1; }
workers=$(awk '/^program train/{f=1} /^program infer/{f=0}
  f && /^task/ {for (i = 1; i <= NF; i++) if ($i == "worker") print $(i + 1)}' "$tmp/one.dump" |
  sort -u | tr '\n' ' ')
echo "one place: the training step's tasks on workers: $workers"
[ "$(echo $workers | wc -w)" = 1 ] && [ "${workers% }" != -1 ] ||
  { echo "one place: want every task on one GPU"; exit 1; }

#!/bin/bash
# 'compile_fake_ranks': hyfi-train --compile-only under StarPU-MPI's
# STARPU_MPI_FAKE_SIZE / STARPU_MPI_FAKE_RANK (one process standing for rank r
# of N) builds what rank r of a real N-rank run builds: the same handles, tasks
# built and tasks submitted per step, rank by rank, for a pipeline with two
# data-parallel replicas and for tiles over stages with GEMS (2 and 4 ranks).
# The compile memory is not compared (it varies a little between processes).
# And a fake rank runs: for 2 steps, each of N fake ranks submits per step
# exactly the tasks the same rank of the real run submits (what
# bench/submit_cost.sh --fake times; the values it receives are zeros).
# usage: compile_fake_ranks.sh HYFI_TRAIN MPIEXEC
set -u
train=${1:?usage: compile_fake_ranks.sh HYFI_TRAIN MPIEXEC}
mpiexec=${2:?usage: compile_fake_ranks.sh HYFI_TRAIN MPIEXEC}
export HYFI_CPU_THREADS=1
fail=0
counts() { # the counts of each "compiled rank" line, sorted by rank
  grep -o 'compiled rank [0-9]* of [0-9]*: [0-9]* handles, [0-9]* tasks built ([0-9]* of far tiles not), [0-9]* submitted' |
    sort -t' ' -k3,3n
}
check() { # N ARGS...: the real N-rank compile against N fake ones
  local n=$1
  shift
  local real fake="" r
  real=$(timeout 120 "$mpiexec" -n "$n" "$train" "$@" --compile-only 2>&1 | counts)
  for ((r = 0; r < n; r++)); do
    fake+=$(STARPU_MPI_FAKE_SIZE=$n STARPU_MPI_FAKE_RANK=$r timeout 120 "$mpiexec" -n 1 \
      "$train" "$@" --compile-only 2>&1 | counts)$'\n'
  done
  fake=$(printf '%s' "$fake" | sed '/^$/d')
  if [ "$(printf '%s\n' "$real" | wc -l)" -ne "$n" ] || [ "$real" != "$fake" ]; then
    echo "FAIL: $n ranks, $*:"
    echo "  real: $real"
    echo "  fake: $fake"
    fail=1
  else
    echo "ok   $n ranks, $*"
    printf '%s\n' "$real" | sed 's/^/     /'
  fi
}
check 4 --model resnet --depth 20 --image-size 32 --batch-size 8 --split-size 2 --data-parallel 2
submitted() { # the "rank R submitted K tasks" of each step, sorted by rank
  grep -o 'rank [0-9]* submitted [0-9]* tasks of a training step' | sort -t' ' -k2,2n
}
run_check() { # N ARGS...: the real N-rank run's submissions against N fake ranks'
  local n=$1
  shift
  local real fake="" r
  real=$(timeout 300 "$mpiexec" -n "$n" "$train" "$@" --dataset synthetic --steps 2 -v 2>&1 |
    submitted)
  for ((r = 0; r < n; r++)); do
    fake+=$(STARPU_MPI_FAKE_SIZE=$n STARPU_MPI_FAKE_RANK=$r timeout 300 "$mpiexec" -n 1 \
      "$train" "$@" --dataset synthetic --steps 2 -v 2>&1 | submitted)$'\n'
  done
  fake=$(printf '%s' "$fake" | sed '/^$/d')
  if [ "$(printf '%s\n' "$real" | wc -l)" -ne $((2 * n)) ] || [ "$real" != "$fake" ]; then
    echo "FAIL: runs of $n fake ranks, $*:"
    echo "  real: $real"
    echo "  fake: $fake"
    fail=1
  else
    echo "ok   runs of $n fake ranks, $*"
  fi
}
run_check 4 --model resnet --depth 20 --image-size 64 --batch-size 4 --parts 2 --split-size 3 \
  --spatial-size 1 --num-spatial-parts 2 --slice-method vertical --gems mast --data-parallel 2 \
  --allreduce tree
check 2 --model resnet --depth 20 --image-size 64 --batch-size 4 --parts 2 --split-size 3 \
  --spatial-size 1 --num-spatial-parts 2 --slice-method vertical --gems mast
check 4 --model resnet --depth 20 --image-size 64 --batch-size 4 --parts 2 --split-size 3 \
  --spatial-size 1 --num-spatial-parts 2 --slice-method vertical --gems mast --data-parallel 2 \
  --allreduce tree
exit $fail

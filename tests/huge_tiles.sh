#!/bin/bash
# 'huge_tiles': a tensor that lives in its tiles only may be larger than one
# StarPU vector (2^32-1 elements) as long as each tile is not: it gets no
# whole-tensor handle (engine/handles.c). --compile-only, nothing allocated
# for the tiles (STARPU_LIMIT_CPU_MEM lets the memory check pass):
# - the small CNN at 16,384² (conv1: 32 x 16,384² = 2^33 elements, refused
#   before) in 2 strips (2^32 elements each) is refused naming the tile, in 4
#   tiles it compiles, on 1 rank and on 2;
# - ResNet-18 at 32,768² (the largest --image-size) in 64 tiles compiles.
# usage: huge_tiles.sh HYFI_TRAIN MPIEXEC
set -u
train=${1:?usage: huge_tiles.sh HYFI_TRAIN MPIEXEC}
mpiexec=${2:?usage: huge_tiles.sh HYFI_TRAIN MPIEXEC}
export HYFI_CPU_THREADS=1 STARPU_LIMIT_CPU_MEM=100000000
fail=0
expect() { # N PATTERN ARGS...: the compile's output on N ranks has PATTERN
  local n=$1 pat=$2 out
  shift 2
  out=$(timeout 120 "$mpiexec" -n "$n" "$train" "$@" --compile-only 2>&1)
  if printf '%s\n' "$out" | grep -q -- "$pat"; then
    echo "ok   $n ranks, $*: $(printf '%s\n' "$out" | grep -m1 -- "$pat")"
  else
    echo "FAIL: $n ranks, $*: no '$pat' in:"
    printf '%s\n' "$out" | tail -5 | sed 's/^/     /'
    fail=1
  fi
}
cnn="--model cnn --image-size 16384 --batch-size 1"
tiled="--split-size 2 --balance 3,1 --spatial-size 1"
expect 1 'tensor "conv1" has 4294967296 elements per micro-batch in a tile; at most 2^32-1' \
  $cnn $tiled --num-spatial-parts 2 --slice-method vertical
expect 1 'compiled rank 0 of 1' $cnn $tiled --num-spatial-parts 4
expect 2 'compiled rank 1 of 2' $cnn $tiled --num-spatial-parts 4
expect 1 'compiled rank 0 of 1' --model resnet --depth 18 --image-size 32768 --batch-size 1 \
  --split-size 2 --balance 9,1 --spatial-size 1 --num-spatial-parts 64 --recompute layer
exit $fail

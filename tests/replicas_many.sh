#!/bin/bash
# 'replicas_many_mpi': the single-place reference in one process, then the
# plans of 24 replicas on 2 ranks against it (tests/test_replicas_many.c).
# usage: replicas_many.sh TEST_REPLICAS_MANY MPIEXEC
set -u
exe=${1:?usage: replicas_many.sh TEST_REPLICAS_MANY MPIEXEC}
mpiexec=${2:?usage: replicas_many.sh TEST_REPLICAS_MANY MPIEXEC}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$exe" ref "$dir/ref.bin" || { echo "FAILED: the reference"; exit 1; }
timeout 240 "$mpiexec" -n 2 "$exe" check "$dir/ref.bin" || { echo "FAILED: 2 ranks"; exit 1; }
echo "replicas_many: 24 replicas on 2 ranks agree with the single-place run"

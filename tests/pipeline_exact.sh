#!/bin/bash
# 'pipeline_exact': layer + pipeline plans against the single-place run
# (tests/test_pipeline_exact.c): the reference in one process, then every plan
# in one process without MPI, and under mpiexec with 1, 2 and 4 ranks.
# usage: pipeline_exact.sh TEST_PIPELINE_EXACT MPIEXEC
set -u
exe=${1:?usage: pipeline_exact.sh TEST_PIPELINE_EXACT MPIEXEC}
mpiexec=${2:?usage: pipeline_exact.sh TEST_PIPELINE_EXACT MPIEXEC}
# one thread per kernel, no core lending: round-off independent of timing
export HYFI_CPU_THREADS=1 HYFI_LEND_MIN_BYTES=0
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
run() {
    echo "== $*"
    "$@" || { echo "FAILED: $*"; exit 1; }
}
run "$exe" ref "$dir"
run "$exe" check-nompi "$dir"
for n in 1 2 4; do
    run "$mpiexec" -n "$n" "$exe" check "$dir"
done
echo "pipeline_exact: all forms agree with the single-place run"

#!/bin/bash
# 'pipeline_exact': layer + pipeline plans against the single-place run
# (tests/test_pipeline_exact.c): the reference in one process, then every plan
# in one process without MPI, and under mpiexec with 2 and 4 ranks.
# With a third argument bf16 ('pipeline_exact_bf16'): the reference and the
# plans in mixed precision (HYFI_TEST_PRECISION=bf16), in one process, and the
# 2x2 tiled plans on 2 ranks (bf16 rounding is elementwise: what the ranks
# change is already covered in fp32; the tiles are where bf16 moves results).
# usage: pipeline_exact.sh TEST_PIPELINE_EXACT MPIEXEC [bf16]
set -u
exe=${1:?usage: pipeline_exact.sh TEST_PIPELINE_EXACT MPIEXEC [bf16]}
mpiexec=${2:?usage: pipeline_exact.sh TEST_PIPELINE_EXACT MPIEXEC [bf16]}
precision=${3:-fp32}
# one thread per kernel, no core lending: round-off independent of timing
export HYFI_CPU_THREADS=1 HYFI_LEND_MIN_BYTES=0
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
run() {
    echo "== $*"
    "$@" || { echo "FAILED: $*"; exit 1; }
}
if [ "$precision" = bf16 ]; then
    export HYFI_TEST_PRECISION=bf16
    run "$exe" ref "$dir"
    run "$exe" check-nompi "$dir"
    HYFI_TEST_FILTER="K=1 P=4 square" run "$mpiexec" -n 2 "$exe" check "$dir"
    echo "pipeline_exact (bf16): all forms agree with the single-place bf16 run"
    exit 0
fi
run "$exe" ref "$dir"
run "$exe" check-nompi "$dir"
# On 2 and 4 ranks (one rank's MPI path is the others' without a peer, and the
# one-process run above has none); under the sanitizers (ASAN_OPTIONS: the
# `sanitize` test setup) on 4 only, each rank count being two minutes of CI
# there.
ranks="2 4"
[ -n "${ASAN_OPTIONS:-}" ] && ranks="4"
for n in $ranks; do
    run "$mpiexec" -n "$n" "$exe" check "$dir"
done
echo "pipeline_exact: all forms agree with the single-place run"

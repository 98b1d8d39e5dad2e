#!/usr/bin/env bash
# Default-build test: every codelet of libhyfi can be simulated. A codelet
# added or renamed without a model had stopped the simulation suite (not
# built by CI: "Codelet ... does not have a perfmodel") with nothing else
# failing. For every StarPU codelet the library defines (hyfi_cl_<op>, read
# from its symbol table) this checks that
#   - the simulation knows it (ops/codelet_common.c's g_sim_codelets, whose
#     codelets get the analytic fallback, HYFI_SIM_ANALYTIC);
#   - every analytic file has its CPU line (hyfi_<op> cpu A B C), and the GPU
#     files (analytic-v100.txt, analytic-h100.txt) its CUDA line too;
#   - the reference host epyc2-r1 has its calibrated history
#     (perfmodels/sampling/codelets/45/hyfi_<op>.epyc2-r1).
# hyfi_redux_zero is exempt: StarPU never times the reduction's init
# (perfmodels/README.md).
#   tests/sim_models.sh LIBHYFI
set -euo pipefail
lib="${1:?usage: sim_models.sh LIBHYFI}"
root="${HYFI_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
command -v nm >/dev/null || { echo "nm (binutils) not found: skip"; exit 77; }
ops=$(nm -D --defined-only "$lib" | awk '$3 ~ /^hyfi_cl_/ {sub(/^hyfi_cl_/, "", $3); print $3}' | sort -u)
[ -n "$ops" ] || { echo "no hyfi_cl_* codelets in $lib"; exit 1; }
sim_list=$(grep -o '&hyfi_cl_[a-z0-9_]*' "$root/ops/codelet_common.c" | sed 's/^&hyfi_cl_//' | sort -u)
fails=0 n=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
for op in $ops; do
  n=$((n + 1))
  grep -qx "$op" <<<"$sim_list" ||
    fail "hyfi_cl_$op is not in ops/codelet_common.c's g_sim_codelets (the simulation's list)"
  [ "$op" = redux_zero ] && continue
  for f in "$root"/perfmodels/analytic-*.txt; do
    grep -q "^hyfi_$op cpu " "$f" ||
      fail "$(basename "$f") has no 'hyfi_$op cpu' line (bench/fit_perfmodels.py on a calibration)"
  done
  for f in "$root"/perfmodels/analytic-v100.txt "$root"/perfmodels/analytic-h100.txt; do
    grep -q "^hyfi_$op cuda " "$f" ||
      fail "$(basename "$f") has no 'hyfi_$op cuda' line (bench/fit_perfmodels.py --gpu)"
  done
  [ -f "$root/perfmodels/sampling/codelets/45/hyfi_$op.epyc2-r1" ] ||
    fail "no calibrated history perfmodels/sampling/codelets/45/hyfi_$op.epyc2-r1 (STARPU_CALIBRATE=1 runs, perfmodels/README.md)"
done
echo "$n codelets, $fails missing models"
[ "$fails" = 0 ]

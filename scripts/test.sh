#!/usr/bin/env bash
# Set up a fresh machine (scripts/setup.sh), build hyfi, and run every test:
#   1. release build, all suites (ops, partitioners, engine, apps, cuda, e2e);
#      CUDA tests skip (77) without a GPU;
#   2. an ASan/UBSan build (CPU codelets), the same suites but e2e,
#      precision (the bf16 plans; test 'bf16' covers its paths), install
#      (the example built against the installed library), torch (the
#      comparisons with PyTorch) and nosan (peak-memory measurements, which
#      the sanitizers' allocator distorts, and the driver's 2-rank output,
#      whose 1-rank twin runs), under the `sanitize` test setup.
# Ends with one line "N passed, N failed, N skipped" and a non-zero status if
# anything failed. HYFI_TEST_QUICK=1 skips the sanitizer build.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
start=$(date +%s)
bash scripts/setup.sh
# shellcheck source=env.sh
source scripts/env.sh

pass=0; fail=0; skip=0
count() { # count a meson testlog.json
  python3 - "$1" <<'PY'
import json, sys
p = f = s = 0
for line in open(sys.argv[1]):
    r = json.loads(line)["result"]
    if r in ("OK", "EXPECTEDFAIL"): p += 1
    elif r == "SKIP": s += 1
    else: f += 1
print(p, f, s)
PY
}
run_suites() { # build_dir, meson test args...
  local b="$1"; shift
  local rc=0
  meson test -C "$b" --print-errorlogs --num-processes 1 "$@" || rc=$?
  # meson names the log after the test setup (testlog-<setup>.json): take the newest.
  local log
  log=$(ls -t "$b"/meson-logs/testlog*.json | head -1)
  read -r p f s < <(count "$log")
  pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + s))
  return 0
}

bash scripts/build.sh "$root/build"
run_suites "$root/build"

if [ "${HYFI_TEST_QUICK:-0}" != 1 ]; then
  bash scripts/build.sh "$root/build-sanitize" -Dwith_cuda=disabled -Db_sanitize=address,undefined \
    -Db_lundef=false --buildtype=debugoptimized
  run_suites "$root/build-sanitize" --setup sanitize --no-suite e2e --no-suite precision \
    --no-suite install --no-suite torch --no-suite nosan
fi
echo "[test] $(( $(date +%s) - start )) s"
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" = 0 ]

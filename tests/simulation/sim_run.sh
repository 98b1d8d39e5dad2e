#!/usr/bin/env bash
# Simulation build test (suite 'simulation'): hyfi-train simulated on 2 ranks
# (StarPU + SimGrid, the repository's calibrated models of machine epyc2-r2,
# and for footprints they lack the analytic ones of epyc2-r1, so that a
# changed argument block does not stop it) with the five dimensions of
# parallelism; checks that it finishes, that only
# rank 0 prints the run's lines, that the plan spreads over both ranks, and
# that the simulated images/s are positive and the same in a second run (the
# simulation is deterministic). Skips (77) without starpu_smpirun.
set -euo pipefail
root="${HYFI_SOURCE_DIR:?}"
build="${HYFI_SIM_BUILD:?}"
command -v "${HYFI_DEPS:-/opt/hyfi-deps}/starpu-simgrid/bin/starpu_smpirun" >/dev/null ||
  { echo "no StarPU on SimGrid (scripts/setup-simgrid.sh): skip"; exit 77; }
args=(--model resnet --depth 8 --batch-size 4 --image-size 32 --parts 2 --split-size 2
      --spatial-size 1 --num-spatial-parts 2 --slice-method vertical --gems mast
      --data-parallel 2 --dataset synthetic --num-classes 10 --steps 7 --print-freq 1)
run() {
  HYFI_SIM_ANALYTIC="$root/perfmodels/analytic-epyc2-r1.txt" \
  STARPU_HOSTNAME=epyc2-r2 STARPU_NCPU=1 bash "$root/scripts/simulate.sh" -n 2 --build "$build" \
    "${args[@]}" --metrics "$1" >"$1.out" 2>"$1.err" || { cat "$1.out" "$1.err"; exit 1; }
}
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
run "$tmp/a"
run "$tmp/b"
grep -q "^summary: 7 steps" "$tmp/a.out" || { echo "no summary line"; cat "$tmp/a.out"; exit 1; }
[ "$(grep -c "^summary:" "$tmp/a.out")" = 1 ] || { echo "rank 1 printed too"; exit 1; }
grep -q "stages on ranks 1" "$tmp/a.out" || { echo "the plan does not use rank 1"; cat "$tmp/a.out"; exit 1; }
ips() { python3 -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1]) if "summary" in l][-1]["median_images_per_sec"])' "$1"; }
a=$(ips "$tmp/a") b=$(ips "$tmp/b")
echo "simulated images/s: $a, again: $b"
python3 -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(0 if a > 0 and a == b else 1)" "$a" "$b" ||
  { echo "images/s not positive or not reproducible"; exit 1; }

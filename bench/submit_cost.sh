#!/usr/bin/env bash
# Submission cost per rank in real runs (MPICH, this machine's CPUs): the
# thread CPU time each rank spends submitting a training step's tasks
# (hyfi-train -v, engine/run.c), for R = 1, 2, 4, 8 ranks of a plan whose
# share per rank stays the same (one unit per rank: ResNet-56, stage 0 in 2
# vertical strips + 2 more stages, 2 micro-batches, x R data-parallel
# groups), each rank submitting only the tasks that concern it (hyfi's
# default) and the whole graph (HYFI_SUBMIT_ALL=1).
#
#   bench/submit_cost.sh [--ranks '1 2 4 8'] [--steps 4] [--depth 56]
#                        [--image-size 32] [--allreduce auto|ring|tree] [--out DIR]
# Each rank: 1 CPU worker (STARPU_NCPU=1), unbound. CPU time (not wall
# time) is what is compared: with more ranks than cores the ranks wait for a
# core, which the thread's CPU clock does not count. Per configuration: the
# largest over ranks of each rank's median over steps 2..N (step 1 includes
# the first submission's allocations).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ranks="1 2 4 8" steps=4 depth=56 image_size=32 allreduce=auto out=""
bdir="$root/build"
bench_opts="ranks steps depth image_size allreduce out"
# shellcheck source=common.sh
source "$root/bench/common.sh"
bench_parse "$@"
bench_setup bench-submit-cost
res="$out/runs.jsonl"
: >"$res"
for all in 0 1; do
  for n in $ranks; do
    log="$out/r$n.all$all.log"
    echo "[bench] $n ranks, HYFI_SUBMIT_ALL=$all" >&2
    HYFI_SUBMIT_ALL=$all STARPU_NCPU=1 STARPU_WORKERS_NOBIND=1 STARPU_MPI_NOBIND=1 \
      nice -n 10 "$mpiexec" -n "$n" "$train" --model resnet --depth "$depth" \
      --image-size "$image_size" --batch-size 2 --parts 2 --spatial-size 1 \
      --num-spatial-parts 2 --slice-method vertical --split-size 3 --data-parallel "$n" \
      --allreduce "$allreduce" \
      --dataset synthetic --num-classes 10 --steps "$steps" --print-freq 1 -v >"$log" 2>&1
    python3 - "$log" "$n" "$all" >>"$res" <<'PY'
import json, re, statistics, sys
text = open(sys.argv[1], errors="replace").read()
per = {}
for r, k, cpu, wall in re.findall(r"rank (\d+) submitted (\d+) tasks of a training step in "
                                  r"([0-9.]+) ms of CPU time \(([0-9.]+) ms wall\)", text):
    per.setdefault(int(r), []).append((int(k), float(cpu), float(wall)))
med = lambda v: statistics.median(v[1:] if len(v) > 1 else v)
print(json.dumps({"ranks": int(sys.argv[2]), "submit_all": int(sys.argv[3]),
                  "tasks_max": max(v[0][0] for v in per.values()),
                  "tasks_min": min(v[0][0] for v in per.values()),
                  "cpu_ms_max": max(med([c for _, c, _ in v]) for v in per.values()),
                  "wall_ms_max": max(med([w for _, _, w in v]) for v in per.values()),
                  "steps": min(len(v) for v in per.values())}))
PY
    tail -1 "$res" >&2
  done
done
{
  echo "Submission cost per rank, real runs (ResNet-$depth, ${image_size}², one unit of 4 places per rank x R data-parallel groups, 1 CPU worker per rank, --allreduce $allreduce)"
  echo
  bench_machine
  echo
  python3 - "$res" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = {(r["ranks"], r["submit_all"]): r for r in rows}
print("| ranks | tasks of a step (whole graph) | own share: tasks/rank (min-max) "
      "| CPU ms/step/rank (max) | us/task | whole graph (HYFI_SUBMIT_ALL=1) on every rank: "
      "CPU ms/step/rank (max) | us/task |")
print("|---|---|---|---|---|---|---|")
for n in sorted({r["ranks"] for r in rows}):
    a, b = by.get((n, 0)), by.get((n, 1))
    f = lambda r, k, fmt: fmt % r[k] if r else "-"
    us = lambda r: "%.1f" % (1e3 * r["cpu_ms_max"] / r["tasks_max"]) if r else "-"
    share = "%d-%d" % (a["tasks_min"], a["tasks_max"]) if a else "-"
    print("| %d | %s | %s | %s | %s | %s | %s |" % (
        n, f(b, "tasks_max", "%d"), share, f(a, "cpu_ms_max", "%.1f"), us(a),
        f(b, "cpu_ms_max", "%.1f"), us(b)))
PY
} | tee "$out/table.md"

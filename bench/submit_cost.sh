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
#                        [--gems none|mast] [--fake '16 128 512'] [--fake-ranks '0 5']
# --fake R...: plans of R ranks far larger than this host, one rank at a time:
# a single process stands for rank K (each of --fake-ranks) of R under
# StarPU-MPI's STARPU_MPI_FAKE_SIZE / STARPU_MPI_FAKE_RANK, builds and submits
# exactly that rank's share of every step and runs its own tasks; the other
# ranks' values are never sent (StarPU-MPI makes no transfer in that mode), so
# what the rank receives is zeros (engine/keyed.c, hyfi_fake_fill) and the
# losses mean nothing, but the tasks, their dependencies and the submission
# are the real rank's. The tasks do not depend on the image size (ResNet-56's
# unit: the same counts at 64², 128², 256² and 1,024², 4,268 on rank 0 of
# 16), so a small --image-size gives a 1,024² plan's submission cost (check
# the counts of --compile-only at both sizes). --gems mast: units with
# GEMS's mirrored copy (the scaling study's unit).
# Each rank: 1 CPU worker (STARPU_NCPU=1), unbound. CPU time (not wall
# time) is what is compared: with more ranks than cores the ranks wait for a
# core, which the thread's CPU clock does not count. Per configuration: the
# largest over ranks of each rank's median over steps 2..N (step 1 includes
# the first submission's allocations).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ranks="1 2 4 8" steps=4 depth=56 image_size=32 allreduce=auto out="" gems=none fake="" fake_ranks="0 5"
bdir="$root/build"
bench_opts="ranks steps depth image_size allreduce out gems fake fake_ranks"
# shellcheck source=common.sh
source "$root/bench/common.sh"
bench_parse "$@"
bench_setup bench-submit-cost
res="$out/runs.jsonl"
: >"$res"
gems_args=()
[ "$gems" = none ] || gems_args=(--gems "$gems")
unit=(--model resnet --depth "$depth" --image-size "$image_size" --batch-size 2 --parts 2
      --spatial-size 1 --num-spatial-parts 2 --slice-method vertical --split-size 3
      "${gems_args[@]+"${gems_args[@]}"}" --allreduce "$allreduce" --dataset synthetic
      --num-classes 10 --steps "$steps" --print-freq 1 -v)
if [ -n "$fake" ]; then
  for n in $fake; do
    for k in $fake_ranks; do
      [ "$k" -lt "$n" ] || continue
      log="$out/fake$n.rank$k.log"
      echo "[bench] rank $k of $n (one process, STARPU_MPI_FAKE_SIZE)" >&2
      STARPU_MPI_FAKE_SIZE=$n STARPU_MPI_FAKE_RANK=$k STARPU_NCPU=1 STARPU_WORKERS_NOBIND=1 \
        STARPU_MPI_NOBIND=1 nice -n 10 "$mpiexec" -n 1 "$train" "${unit[@]}" \
        --data-parallel "$n" >"$log" 2>&1
      python3 - "$log" "$n" "$k" >>"$res" <<'PY'
import json, re, statistics, sys
text = open(sys.argv[1], errors="replace").read()
v = [(int(k), float(c)) for _, k, c in re.findall(
    r"rank (\d+) submitted (\d+) tasks of a training step in ([0-9.]+) ms of CPU time", text)]
c = re.search(r"compiled rank \d+ of \d+: (\d+) handles, (\d+) tasks built.*?compile ([0-9.]+) MB", text)
p = re.search(r"peak memory ([0-9.]+) MB", text)
cpu = [x for _, x in v[1:]] or [x for _, x in v]
print(json.dumps({"ranks": int(sys.argv[2]), "rank": int(sys.argv[3]),
                  "handles": int(c.group(1)), "tasks": v[0][0] if v else None,
                  "compile_mb": float(c.group(3)), "peak_mb": float(p.group(1)) if p else None,
                  "cpu_ms": statistics.median(cpu) if cpu else None,
                  "cpu_ms_steps": [x for _, x in v], "steps": len(v)}))
PY
      tail -1 "$res" >&2
    done
  done
  {
    echo "Submission cost of one rank of R, real runs under StarPU-MPI's fake size (ResNet-$depth, ${image_size}², one unit of 4 places per rank (--gems $gems) x R data-parallel groups, 1 CPU worker, --allreduce $allreduce)"
    echo
    bench_machine
    echo
    python3 - "$res" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| ranks (GPUs at 4 per unit) | rank | handles | tasks submitted per step | compile MB "
      "| CPU ms per step (median of steps 2..N) | us/task | steps 1..N, CPU ms |")
print("|---|---|---|---|---|---|---|---|")
for r in rows:
    us = "%.1f" % (1e3 * r["cpu_ms"] / r["tasks"]) if r["tasks"] and r["cpu_ms"] else "-"
    print("| %d (%d) | %d | %d | %s | %.1f | %s | %s | %s |" % (
        r["ranks"], 4 * r["ranks"], r["rank"], r["handles"], r["tasks"], r["compile_mb"],
        "%.1f" % r["cpu_ms"] if r["cpu_ms"] else "-", us,
        ", ".join("%.1f" % x for x in r["cpu_ms_steps"])))
PY
  } | tee "$out/table.md"
  exit 0
fi
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

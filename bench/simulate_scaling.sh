#!/usr/bin/env bash
# The scaling study in simulation (StarPU + SimGrid, docs/simulation.md):
# Hy-Fi-style plans of ResNet and AmoebaNet-D on Lassen-like nodes of 4
# simulated V100 (platforms/lassen.xml: 512 nodes, 2,048 GPUs; analytic V100
# models perfmodels/analytic-v100.txt), one simulated rank per node, one
# place per GPU. A *unit* of U GPUs holds one model replica pair:
#   U=4   2 vertical tiles of stage 0 + 2 more stages   (SP + LP)
#   U=8   4 square tiles of stage 0 + 4 more stages
#   U=32  16 square tiles of stage 0 + 16 more stages
# each with 2 micro-batches of 1 image (PP) and a GEMS MAST mirrored copy
# (2 replicas on the same GPUs); --data-parallel D units (DP) make
# GPUs = U x D. Weak scaling: the work per GPU is the same for every D, so
# the efficiency of a run is its images/s per GPU over that of the smallest
# run of the same model, image size and unit. Layer parallelism alone (LP):
# the model in N = GPUs stages, the same global batch, one micro-batch, no
# tiles or replicas (only where N <= the model's layers); the speedup is the
# plan's images/s over LP's at the same GPU count.
#
#   bench/simulate_scaling.sh [--quick] [--models 'resnet amoebanet']
#       [--sizes '1024 2048'] [--units '4 8 32'] [--dps '1 2 3 6'] [--steps 4]
#       [--max-gpus 2048] [--limit-mb 5000] [--timeout 900] [--out DIR]
#       [--plot FILE.png] [--lp 1] [--report-only 1] [--gems mast|none]
#       [--submit-all 0|1] [--submit-cost 1|0] [--factory raw|thread]
#       [--allreduce auto|ring|tree] [--node lassen|h100x8] [--build build-sim]
# --quick: ResNet-56 at 1,024^2, unit 4, D = 1, 2, 3 (4-12 GPUs) and LP at
# the same counts: about 2.5 minutes of CPU time (2 min 10 s of wall time on
# this 2-core host at load ~3, 8.8 minutes at 12-24; the median of 3 steps,
# because a step can be an outlier: step 2 of the 3-rank run is 6x slower than
# the others).
# Each run: hyfi-train --steps N (-v), images/s = the median of the
# simulated steps 2..N (step 1 includes the start); memory = the peak private
# memory (RssAnon) of the whole simulation (bench/memwatch.py), which is
# killed past --limit-mb and recorded so; a run past --timeout s is
# recorded as such; SimGrid's "deadlock detected" likewise (such a run's
# images/s are those of the steps it finished; it gets no efficiency or
# speedup). Writes
# $out/runs.jsonl, $out/table.md and the plot $out/simulate_scaling.png (or
# --plot FILE, e.g. docs/simulate_scaling.png; Debian's python3-matplotlib).
# --report-only 1 makes the table and plot again from DIR's records (e.g.
# several studies' runs.jsonl and configs.jsonl concatenated).
# --models resnet20: ResNet-20 (2,129 tasks per unit and step instead of 5,793, 43 MB per
# simulated rank instead of 87: the model of the study to 1,024 GPUs).
# --allreduce tree: the binomial tree (O(log R) partners per replica; auto picks the ring
# for large buckets). --gems none: units without the GEMS mirrored copy (1 replica per unit). --submit-all 1: every rank
# submits the whole graph (HYFI_SUBMIT_ALL=1) instead of its own share.
# Submission cost: hyfi-train -v prints, per rank and step, the thread CPU
# time of submitting the step's tasks (engine/run.c); the table gives the
# largest over ranks of each rank's median over steps 2..N. In a simulation
# that is not the rank's own work: all simulated actors share one OS thread
# and the others run inside the timed loop at every StarPU mutex and at the
# 1 us of simulated time StarPU charges per submitted task
# (STARPU_SIMGRID_TASK_SUBMIT_COST, default 1; --submit-cost 0 drops it and
# runs much faster). --factory thread gives every actor an OS thread of its
# own (SimGrid's contexts/factory), 10-100x slower, whose CPU time is then
# dominated by SimGrid's hand-offs. The task counts per rank are exact; the
# times to compare are those of real runs (bench/submit_cost.sh;
# docs/simulation.md, "Submission cost per rank").
# --node h100x8: nodes of 8 H100 on an NVLink switch (platforms/h100-cluster.xml: 256
# nodes, 2,048 GPUs; analytic H100 models), one rank per node, in the build folder
# build-sim-gpu8 made with the SimGrid StarPU of scripts/setup-simgrid.sh --gpus 8.
# Needs the simulation build (build-sim, docs/simulation.md); --build DIR another, e.g. one
# against scripts/setup-simgrid.sh --patched (set HYFI_SIMGRID_PREFIX alike).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
models="resnet amoebanet" sizes="1024 2048" units="4 8 32" dps="1 2 3 6" steps=4
max_gpus=2048 limit_mb=5000 timeout=900 out="" plot="" lp=1 quick=0 report_only=0
gems=mast submit_all=0 submit_cost=1 allreduce=auto node=lassen
bdir=""
bench_opts="models sizes units dps steps max_gpus limit_mb timeout out plot lp quick report_only"
factory=""
bench_opts+=" gems submit_all submit_cost factory allreduce node"
# shellcheck source=common.sh
source "$root/bench/common.sh"
args=()
for a in "$@"; do [ "$a" = --quick ] && args+=(--quick 1) || args+=("$a"); done
bench_parse "${args[@]+"${args[@]}"}"
if [ "$quick" = 1 ]; then
  models=resnet sizes=1024 units=4 dps="1 2 3"
fi
case "$node" in
  lassen) gpn=4 platform_file=lassen.xml analytic=analytic-v100.txt gpu_name=V100
    bdir="${bdir:-$root/build-sim}" ;;
  h100x8) gpn=8 platform_file=h100-cluster.xml analytic=analytic-h100.txt gpu_name=H100
    # 8 GPUs per rank: the SimGrid StarPU of scripts/setup-simgrid.sh --gpus 8
    export HYFI_SIMGRID_PREFIX="${HYFI_SIMGRID_PREFIX:-${HYFI_DEPS:-/opt/hyfi-deps}/starpu-simgrid-gpu8}"
    bdir="${bdir:-$root/build-sim-gpu8}" ;;
  *) echo "[bench] --node $node: use lassen (4 V100 per rank) or h100x8 (8 H100 per rank)" >&2
    exit 2 ;;
esac
out="${out:-$bdir/bench-simulate-scaling}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
plot="${plot:-$out/simulate_scaling.png}"
py=/usr/bin/python3
# shellcheck source=../scripts/env-simgrid.sh
source "$root/scripts/env-simgrid.sh"
[ -f "$bdir/apps/hyfi-train.so" ] ||
  { echo "[bench] no simulation build ($bdir/apps/hyfi-train.so): see docs/simulation.md" >&2; exit 2; }
export HYFI_SIM_ANALYTIC="$root/perfmodels/$analytic" STARPU_HOSTNAME=$node \
  STARPU_NCUDA=$gpn STARPU_NCPU=$gpn STARPU_SIMGRID_TASK_SUBMIT_COST="$submit_cost"
[ "$submit_all" = 1 ] && export HYFI_SUBMIT_ALL=1
platform="$root/platforms/$platform_file"

model_args() { # MODEL
  case "$1" in
    resnet) echo "--model resnet --depth 56" ;;
    resnet20) echo "--model resnet --depth 20" ;;
    amoebanet) echo "--model amoebanet --num-layers 18 --num-filters 416" ;;
  esac
}
model_layers() { case "$1" in resnet) echo 29 ;; resnet20) echo 11 ;; amoebanet) echo 20 ;; esac; }
unit_args() { # U: tiles, slicing and stages of one unit
  case "$1" in
    4) echo "--spatial-size 1 --num-spatial-parts 2 --slice-method vertical --split-size 3" ;;
    8) echo "--spatial-size 1 --num-spatial-parts 4 --slice-method square --split-size 5" ;;
    32) echo "--spatial-size 1 --num-spatial-parts 16 --slice-method square --split-size 17" ;;
  esac
}

# run TAG RANKS ARGS...: one simulation, its record appended to runs.jsonl
run() {
  local tag=$1 n=$2; shift 2
  local log="$out/$tag.log" mem="$out/$tag.mem" rc=0
  echo "[bench] $tag: $n ranks: $*" >&2
  timeout "$timeout" "$py" "$root/bench/memwatch.py" --limit-mb "$limit_mb" --json "$mem" -- \
    bash "$root/scripts/simulate.sh" -n "$n" --platform "$platform" --build "$bdir" "$@" \
    --dataset synthetic --num-classes 10 --steps "$steps" --print-freq 1 -v \
    --cfg=smpi/shared-malloc-blocksize:67108864 ${factory:+--cfg=contexts/factory:$factory} \
    >"$log" 2>&1 || rc=$?
  "$py" - "$log" "$mem" "$rc" "$tag" "$n" "$timeout" >>"$out/runs.jsonl" <<'PY'
import json, os, re, statistics, sys
log, mem, rc, tag, n, tmo = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5]), sys.argv[6]
text = open(log, errors="replace").read()
m = json.load(open(mem)) if os.path.exists(mem) and os.path.getsize(mem) else {}
# (not anchored, no word boundary: a rank's stdout line can follow another's stderr text on
# the same line, e.g. "... ms wall)step 2 loss ...")
steps = {int(a): float(b) for a, b in re.findall(r"step (\d+) loss \S+ images/s ([0-9.]+)", text)}
later = [v for k, v in sorted(steps.items()) if k >= 2]
tasks = [int(x) for x in re.findall(r"submits (\d+) of the \d+ tasks", text)]
if not tasks:  # HYFI_SUBMIT_ALL=1: no "submits X of Y" line; every step submits the same
    tasks = [int(x) for x in re.findall(r"submitted (\d+) tasks of a training step", text)]
# submission cost: each rank's k-th line is its step k; median of steps 2.. per rank
per_rank = {}
for r, cpu, wall in re.findall(r"rank (\d+) submitted \d+ tasks of a training step in ([0-9.]+) "
                               r"ms of CPU time \(([0-9.]+) ms wall\)", text):
    per_rank.setdefault(int(r), []).append((float(cpu), float(wall)))
def med_later(v):
    v = v[1:] if len(v) > 1 else v
    return statistics.median(v)
sub_cpu = max((med_later([c for c, _ in v]) for v in per_rank.values()), default=None)
sub_wall = max((med_later([w for _, w in v]) for v in per_rank.values()), default=None)
total = re.findall(r"submits \d+ of the (\d+) tasks", text)
gpu_warn = "on CUDA device" in text
if "eadlock" in text:
    outcome = "deadlock after step %d" % max(steps) if steps else "deadlock before step 1"
elif m.get("killed_over_limit"):
    outcome = "stopped: over the memory limit"
elif rc in (124, 137) or (rc == 143):
    outcome = "stopped: over %s s" % tmo
elif "summary:" not in text:
    keys = ("does not have a perfmodel", "failed (HYFI_", "error:", "Error", "failed with code")
    err = [l.strip() for k in keys for l in text.splitlines() if k in l]
    outcome = "failed: " + (err[0][:160] if err else "rc %d" % rc)
else:
    outcome = "ok"
print(json.dumps({"tag": tag, "ranks": n, "steps": len(steps),
                  "ips": statistics.median(later) if later else None,
                  "ips_step1": steps.get(1), "tasks_max": max(tasks) if tasks else None,
                  "tasks_min": min(tasks) if tasks else None,
                  "submit_cpu_ms": sub_cpu, "submit_wall_ms": sub_wall,
                  "tasks_total": int(total[0]) if total else None,
                  "wall_s": m.get("wall_s"), "anon_mb": m.get("anon_mb"), "rss_mb": m.get("rss_mb"),
                  "gpu_mem_warning": gpu_warn, "outcome": outcome}))
PY
  tail -1 "$out/runs.jsonl" >&2
}

[ "$report_only" = 1 ] && models="" lp=0
[ "$report_only" = 1 ] || { : >"$out/runs.jsonl"; : >"$out/configs.jsonl"; }
for model in $models; do
  for size in $sizes; do
    for u in $units; do
      # the units that fit: ResNet-56 at 2,048^2 and AmoebaNet need 8 GPUs or more
      if [ "$u" = 4 ] && { [ "$model" = amoebanet ] || [ "$size" -gt 1024 ]; }; then continue; fi
      for d in $dps; do
        gpus=$((u * d)) ranks=$(((u * d + gpn - 1) / gpn))
        [ "$gpus" -le "$max_gpus" ] || continue
        tag="$model.$size.u$u.d$d"
        [ "$gems" = mast ] || tag="$tag.nogems"
        [ "$submit_all" = 1 ] && tag="$tag.all"
        [ "$allreduce" = auto ] || tag="$tag.$allreduce"
        gems_args=(--gems mast)
        [ "$gems" = mast ] || gems_args=()
        # shellcheck disable=SC2046
        run "$tag" "$ranks" $(model_args "$model") --image-size "$size" --batch-size 2 --parts 2 \
          $(unit_args "$u") "${gems_args[@]+"${gems_args[@]}"}" --data-parallel "$d" \
          --allreduce "$allreduce"
        echo "{\"tag\":\"$tag\",\"kind\":\"hybrid\",\"model\":\"$model\",\"size\":$size,\"unit\":$u,\"dp\":$d,\"gpus\":$gpus,\"gems\":\"$gems\",\"submit_all\":$submit_all}" >>"$out/configs.jsonl"
      done
    done
  done
done
if [ "$lp" = 1 ]; then
  # LP alone at the GPU counts above (N stages, the same global batch)
  "$py" - "$out/configs.jsonl" <<'PY' | while read -r model size gpus batch; do
import json, sys
seen = set()
for l in open(sys.argv[1]):
    c = json.loads(l)
    if c["kind"] != "hybrid":
        continue
    k = (c["model"], c["size"], c["gpus"])
    if k not in seen:
        seen.add(k)
        print(c["model"], c["size"], c["gpus"], 4 * c["dp"])
PY
    [ "$gpus" -le "$(model_layers "$model")" ] || continue
    tag="$model.$size.lp$gpus"
    # shellcheck disable=SC2046
    run "$tag" $(((gpus + gpn - 1) / gpn)) $(model_args "$model") --image-size "$size" --batch-size "$batch" \
      --parts 1 --split-size "$gpus" </dev/null
    echo "{\"tag\":\"$tag\",\"kind\":\"lp\",\"model\":\"$model\",\"size\":$size,\"gpus\":$gpus}" >>"$out/configs.jsonl"
  done
fi

{
  echo "Simulated scaling (platforms/$platform_file, $gpn simulated $gpu_name per rank, analytic $gpu_name models, $steps steps; images/s: median of steps 2..$steps)"
  echo
  bench_machine
  echo
  "$py" - "$out/configs.jsonl" "$out/runs.jsonl" "$plot" <<'PY'
import json, sys
cfg = {c["tag"]: c for c in map(json.loads, open(sys.argv[1]))}
runs = {r["tag"]: r for r in map(json.loads, open(sys.argv[2]))}
rows = [(cfg[t], runs[t]) for t in cfg if t in runs]
def lp_of(c):
    return runs.get("%s.%d.lp%d" % (c["model"], c["size"], c["gpus"]))
base = {}
for c, r in rows:
    if c["kind"] == "hybrid" and r["ips"] and r["outcome"] == "ok":
        k = (c["model"], c["size"], c["unit"], c.get("gems", "mast"), c.get("submit_all", 0))
        if k not in base or c["gpus"] < base[k][0]:
            base[k] = (c["gpus"], r["ips"])
names = {"resnet": "ResNet-56", "resnet20": "ResNet-20", "amoebanet": "AmoebaNet-D (18, 416)"}
print("| model | image | GPUs | ranks | plan | tasks/rank/step (max) | submission ms/step/rank (max) | simulated img/s | weak-scaling eff. | LP alone img/s | speedup over LP | wall s | peak memory MB (per rank) | outcome |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
curves, lps = {}, {}
for c, r in sorted(rows, key=lambda x: (x[0]["model"], x[0]["size"], x[0]["kind"], x[0].get("unit", 0), x[0].get("gems", "mast"), x[0].get("submit_all", 0), x[0]["gpus"])):
    if c["kind"] == "hybrid":
        g = c.get("gems", "mast") == "mast"
        plan = "unit %d (SP+LP+PP%s) x DP %d%s" % (c["unit"], "+GEMS" if g else "", c["dp"],
                                                  "; every rank submits all" if c.get("submit_all") else "")
        vk = (c["model"], c["size"], c["unit"], c.get("gems", "mast"), c.get("submit_all", 0))
        b = base.get(vk)
        ok = r["outcome"] == "ok"  # a run cut short has no efficiency or speedup
        eff = r["ips"] / c["gpus"] / (b[1] / b[0]) if ok and r["ips"] and b else None
        lp = lp_of(c)
        lpi = lp["ips"] if lp and lp["outcome"] == "ok" else None
        sp = r["ips"] / lpi if ok and r["ips"] and lpi else None
        if eff is not None:
            curves.setdefault(vk, []).append((c["gpus"], eff, r["ips"]))
    else:
        plan = "LP alone: %d stages" % c["gpus"]
        eff = lpi = sp = None
        if r["ips"] and r["outcome"] == "ok":
            lps.setdefault((c["model"], c["size"]), []).append((c["gpus"], r["ips"]))
    f = lambda v, fmt: (fmt % v) if v is not None else "-"
    mem = "%s (%s)" % (f(r["anon_mb"], "%.0f"), f(r["anon_mb"] / r["ranks"] if r["anon_mb"] else None, "%.0f"))
    print("| %s | %d² | %d | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s%s |" % (
        names[c["model"]], c["size"], c["gpus"], r["ranks"], plan, f(r["tasks_max"], "%d"),
        f(r.get("submit_cpu_ms"), "%.1f"),
        f(r["ips"], "%.2f"), f(eff, "%.3f"), f(lpi, "%.2f"), f(sp, "%.2fx"),
        f(r["wall_s"], "%.0f"), mem, r["outcome"], "; GPU memory exceeded (warned)" if r["gpu_mem_warning"] else ""))
png = sys.argv[3] if len(sys.argv) > 3 else ""
if png and curves:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(1, 2, figsize=(11, 4.2))
    for (m, s, u, gm, sa), pts in sorted(curves.items()):
        pts.sort()
        lab = "%s %d² unit %d%s%s" % (names[m], s, u, "" if gm == "mast" else " no GEMS",
                                      " submit all" if sa else "")
        ax[0].plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=lab)
        ax[1].plot([p[0] for p in pts], [p[2] for p in pts], "o-", label=lab)
    for (m, s), pts in sorted(lps.items()):
        pts.sort()
        ax[1].plot([p[0] for p in pts], [p[1] for p in pts], "x--",
                   label="%s %d² LP alone" % (names[m], s))
    ax[1].legend(fontsize=7)
    ax[0].set_xscale("log", base=2); ax[1].set_xscale("log", base=2); ax[1].set_yscale("log")
    ax[0].set_xlabel("simulated V100 GPUs"); ax[1].set_xlabel("simulated V100 GPUs")
    ax[0].set_ylabel("weak-scaling efficiency"); ax[1].set_ylabel("simulated images/s")
    ax[0].set_ylim(0, 1.1); ax[0].grid(True, alpha=.3); ax[1].grid(True, alpha=.3)
    ax[0].legend(fontsize=7); ax[0].set_title("efficiency (per GPU, vs the unit's smallest run)", fontsize=9)
    ax[1].set_title("throughput", fontsize=9)
    fig.tight_layout(); fig.savefig(png, dpi=110)
PY
} | tee "$out/table.md"
echo "[bench] $out/table.md, $plot" >&2

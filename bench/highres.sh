#!/usr/bin/env bash
# Very-high-resolution training under a fixed memory budget per place: which
# image sizes train at all, their peak memory per rank and seconds per image,
# for hyfi untiled, tiled, tiled + re-materialisation, tiled + re-materialisation
# + disk swap, and PyTorch untiled with and without torch.utils.checkpoint under
# the same budget, side by side in one run.
#
#   bench/highres.sh [options]
#
# Data: real tissue mosaics of each size (scripts/make_slides.py, tiled TIFF,
# 2 classes x 1 slide), made once into the output folder; every run trains
# --steps steps of batch 1 on them (hyfi: --dataset slides, each rank reading
# only its tiles; PyTorch: the same files decoded whole).
#
# Configurations (hyfi: 2 stages, stage 0 = every layer but the head, so that
# the activation gathered for the head stage is small):
#   untiled        1 rank, the budget as StarPU's memory limit (--mem-limit-mb)
#   tiled          stage 0 in --tiles square tiles: tiles + 1 places on
#                  min(--ranks, tiles + 1) ranks, each rank's limit the budget
#                  times the places it holds
#   tiled-rc       the same with --recompute layer
#   tiled-rc-swap  the same with --swap-dir (StarPU's disk swap in the output
#                  folder, --swap-mb of it per rank)
#   torch          PyTorch (Debian's python3-torch) untiled, the same model;
#                  the budget counts its memory above the model's (resident
#                  memory minus that after building the model and optimizer):
#                  a run above it is stopped, and that is its result
#   torch-ckpt     the same with torch.utils.checkpoint per block / cell
# A refusal (hyfi compiles a plan above the limit into an error naming the
# fixes) or a run stopped over the budget is a result: the table says which.
#
# Options:
#   --models LIST   resnet50, amoebanet (AmoebaNet-D, --amoeba 'L F') [resnet50,amoebanet]
#   --amoeba 'L F'  AmoebaNet-D layers and filters [6 64]
#   --sizes LIST    image sides [1024,2048,4096,8192]
#   --tiles P       tiles of stage 0 (a square number) [16]
#   --ranks R       ranks at most [16]
#   --budget-mb M   memory budget per place in MB [1024]
#   --swap-mb S     disk swap per rank in MB [8192]
#   --steps N       steps per run (seconds per image from the last) [2]
#   --timeout S     seconds a run may take [5400]
#   --kinds LIST    configurations to run [untiled,tiled,tiled-rc,tiled-rc-swap,torch,torch-ckpt]
#   --precisions LIST  hyfi's --precision for each hyfi configuration, e.g.
#                   fp32,bf16 side by side (PyTorch's runs stay fp32) [fp32]
#   --quick 1       sizes 512,1024, tiles 4, ranks 5 (about half an hour here)
#   --plot FILE     also draw seconds per image against pixels (log-log, with a
#                   line growing linearly in pixels through the largest run's
#                   point) for the configurations that ran, as a PNG [none]
#   --build DIR     [build]       --out DIR  [build/bench-highres]
#   -h, --help      this text
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
models="resnet50,amoebanet" amoeba="6 64" sizes="1024,2048,4096,8192" tiles=16 ranks=16
budget_mb=1024 swap_mb=8192 steps=2 timeout=5400 quick=0 plot="" precisions=fp32
kinds="untiled,tiled,tiled-rc,tiled-rc-swap,torch,torch-ckpt" bdir="$root/build" out=""
# shellcheck source=common.sh
source "$root/bench/common.sh"
bench_opts="models amoeba sizes tiles ranks budget_mb swap_mb steps timeout kinds quick out plot precisions"
bench_parse "$@"
if [ "$quick" = 1 ]; then sizes="512,1024" tiles=4 ranks=5; fi
bench_setup bench-highres
IFS=, read -r -a mlist <<<"$models"
IFS=, read -r -a slist <<<"$sizes"
IFS=, read -r -a klist <<<"$kinds"
IFS=, read -r -a plist <<<"$precisions"
for p in "${plist[@]}"; do
  case "$p" in fp32|bf16) ;; *) echo "highres.sh: --precisions: '$p' is not fp32 or bf16" >&2; exit 2 ;; esac
done
tpy=/usr/bin/python3 # Debian's python3-torch
start=$(date +%s)

model_flags() { # model -> hyfi-train flags
  case "$1" in
    resnet50) echo "--model resnet --depth 50" ;;
    amoebanet) read -r l f <<<"$amoeba"; echo "--model amoebanet --num-layers $l --num-filters $f" ;;
    *) echo "highres.sh: unknown model '$1' (resnet50, amoebanet)" >&2; exit 2 ;;
  esac
}

# One configuration: appends a JSON line to runs.jsonl.
run_cfg() { # kind model size precision
  local kind=$1 model=$2 size=$3 prec=$4 log="$out/$1.$2.$3.$4" data
  data=$(bench_slides "$size")
  local -a mf
  read -r -a mf <<<"$(model_flags "$model")"
  local layers
  layers=$(bench_layers "$size" "${mf[@]}")
  local places=$((tiles + 1)) nr per
  nr=$(( places < ranks ? places : ranks ))
  per=$(( (places + nr - 1) / nr ))
  # --watchdog 0: the head's rank waits legitimately long for a swapping stage 0
  local args=("${mf[@]}" --dataset slides --datapath "$data" --batch-size 1 --num-classes 2
              --steps "$steps" --print-freq 1 --metrics "$log.metrics" --watchdog 0
              --precision "$prec" -v) # -v: every rank's peak memory line
  local tile=(--split-size 2 --balance "$((layers - 1)),1" --spatial-size 1
              --num-spatial-parts "$tiles" --slice-method square)
  local t0 rc=0 mem_mb
  mem_mb=$(awk '/^MemTotal/ { print int($2 / 1024) }' /proc/meminfo)
  if [[ $kind == tiled* ]] && (( nr * budget_mb * per * 13 / 10 > mem_mb )); then
    # each process holds its own memory besides StarPU's data (see docs/results.md)
    echo "[bench] warning: $nr ranks x $((budget_mb * per)) MB of data (+30%) exceed this" \
         "host's $mem_mb MB: the kernel may kill a rank; use fewer --ranks" >&2
  fi
  t0=$(date +%s.%N)
  rm -f "$log.metrics"
  case "$kind" in
    untiled)
      timeout -k 10 "$timeout" "$train" "${args[@]}" --mem-limit-mb "$budget_mb" \
        >"$log.log" 2>&1 || rc=$? ;;
    tiled|tiled-rc|tiled-rc-swap)
      local extra=()
      [ "$kind" = tiled ] || extra+=(--recompute layer)
      if [ "$kind" = tiled-rc-swap ]; then
        rm -rf "$out/swap"; mkdir -p "$out/swap"
        extra+=(--swap-dir "$out/swap" --swap-mb "$swap_mb")
      fi
      STARPU_NCPU=1 STARPU_WORKERS_NOBIND=1 STARPU_MPI_NOBIND=1 HYFI_CPU_THREADS=1 \
        timeout -k 10 "$timeout" "$mpiexec" -n "$nr" "$train" "${args[@]}" "${tile[@]}" \
        --mem-limit-mb $((budget_mb * per)) "${extra[@]}" >"$log.log" 2>&1 || rc=$? ;;
    torch|torch-ckpt)
      local ck=()
      [ "$kind" = torch ] || ck=(--checkpoint)
      timeout -k 10 "$timeout" "$tpy" "$root/bench/torch_highres.py" "${mf[@]}" \
        --datapath "$data" --steps "$steps" --budget-mb "$budget_mb" "${ck[@]}" \
        --metrics "$log.metrics" >"$log.log" 2>&1 || rc=$? ;;
  esac
  python3 - "$kind" "$model" "$size" "$log" "$rc" "$t0" "$nr" "$per" "$prec" <<'PY' >>"$out/runs.jsonl"
import json, re, sys, time
kind, model, size, log, rc, t0, nr, per, prec = sys.argv[1:10]
text = open(log + ".log", errors="replace").read()
steps = []
try:
    for line in open(log + ".metrics"):
        r = json.loads(line)
        if "step" in r and r.get("images_per_sec"):
            steps.append(r)
except OSError:
    pass
peaks = [float(x) for x in re.findall(r"peak memory ([\d.]+) MB", text)]
bounds = [float(x) for x in re.findall(r"the stated bound ([\d.]+) MB", text)]
above = len(re.findall(r"peak memory [\d.]+ MB, ABOVE", text))
if kind.startswith("torch"):
    m = re.search(r"peak above the model ([\d.]+) MB", text)
    peaks = [float(m.group(1))] if m else peaks
status = "ran" if rc == "0" and steps else (
    "refused" if "refused" in text or "exceeds" in text or "above" in text and rc == "1"
    else "over budget" if "over the budget" in text
    else "timeout" if rc in ("124", "137") else "failed (exit %s)" % rc)
why = ""
if status != "ran":
    lines = [l for l in text.splitlines() if l.strip()]
    why = lines[-1][:300] if lines else ""
print(json.dumps({"kind": kind, "model": model, "size": int(size), "precision": prec,
                  "status": status,
                  "ranks": int(nr) if kind.startswith("tiled") else 1,
                  "places_per_rank": int(per) if kind.startswith("tiled") else 1,
                  "s_per_image": 1 / steps[-1]["images_per_sec"] if steps else None,
                  "loss": steps[-1]["loss"] if steps else None,
                  "peak_mb": peaks, "bound_mb": bounds, "ranks_above_bound": above,
                  "wall_s": time.time() - float(t0), "why": why}))
PY
  tail -1 "$out/runs.jsonl" >&2
}

: >"$out/runs.jsonl"
for m in "${mlist[@]}"; do
  for s in "${slist[@]}"; do
    for k in "${klist[@]}"; do
      if [[ $k == torch* ]]; then run_cfg "$k" "$m" "$s" fp32; continue; fi
      for p in "${plist[@]}"; do run_cfg "$k" "$m" "$s" "$p"; done
    done
  done
done
{
  echo "Very-high-resolution training: budget $budget_mb MB per place, batch 1, $steps steps, stage 0 in $tiles tiles (square) on up to $ranks ranks"
  echo
  bench_machine
  echo "- hyfi: StarPU's memory limit per rank = budget x places on the rank; peak = resident memory per rank (max over ranks); PyTorch: memory above the model's, stopped when over the budget"
  echo
  python3 - "$out/runs.jsonl" <<'PY'
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
print("| model | image | config | precision | ranks | result | s/image | peak MB per rank (max) "
      "| stated bound MB (max) | ranks above it | note |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for r in runs:
    b = r.get("bound_mb") or []
    print("| %s | %d² | %s | %s | %d | %s | %s | %s | %s | %s | %s |" % (
        r["model"], r["size"], r["kind"], r.get("precision", "fp32"), r["ranks"], r["status"],
        "%.1f" % r["s_per_image"] if r["s_per_image"] else "–",
        "%.0f" % max(r["peak_mb"]) if r["peak_mb"] else "–",
        "%.0f" % max(b) if b else "–", r.get("ranks_above_bound", 0) if b else "–",
        r["why"].replace("|", "/")[:160] if r["status"] != "ran" else ""))
PY
  echo
  echo "total bench time $(( $(date +%s) - start )) s; runs in $out/runs.jsonl"
} | tee "$out/table.md"
if [ -n "$plot" ]; then
  "$tpy" - "$out/runs.jsonl" "$plot" "$budget_mb" <<'PY'
import collections, json, sys
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit("highres.sh: no matplotlib for --plot (Debian's python3-matplotlib, scripts/setup.sh)")
runs = [json.loads(l) for l in open(sys.argv[1])]
series = collections.defaultdict(list)
for r in runs:
    if r["status"] == "ran" and r["s_per_image"]:
        series[(r["model"], r["kind"], r.get("precision", "fp32"), r["ranks"])].append(
            (r["size"] ** 2, r["s_per_image"]))
fig, ax = plt.subplots(figsize=(6.4, 4.4))
for (model, kind, prec, ranks), pts in sorted(series.items()):
    pts.sort()
    x, y = [p[0] / 1e6 for p in pts], [p[1] for p in pts]
    line, = ax.loglog(x, y, "o-", label="%s, %s, %s, %d ranks" % (model, kind, prec, ranks))
    if len(pts) > 1:
        ax.loglog([x[0], x[-1]], [y[-1] * x[0] / x[-1], y[-1]], ":", color=line.get_color(),
                  label="linear in pixels through %.0f²" % pts[-1][0] ** 0.5)
    for xi, yi, (px, _) in zip(x, y, pts):
        ax.annotate("%d²" % round(px ** 0.5), (xi, yi), textcoords="offset points",
                    xytext=(4, -10), fontsize=7)
ax.set_xlabel("pixels per image (millions)")
ax.set_ylabel("seconds per image")
ax.set_title("hyfi under %s MB per place: seconds per image vs image size" % sys.argv[3],
             fontsize=9)
ax.grid(True, which="both", alpha=0.3)
ax.legend(fontsize=7)
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=110)
print("plot: " + sys.argv[2])
PY
fi

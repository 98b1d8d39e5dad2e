#!/usr/bin/env bash
# Spatial parallelism on this machine: images/s of the untiled and the tiled
# run, side by side in one run, at a few image sizes, and the halo traffic
# between ranks per step.
#
#   bench/spatial_scaling.sh [options]
#
# Configurations (all with 2 stages, stage 0 = the first `--balance` layers):
#   untiled      1 process, 2 stages
#   tiled        1 process, stage 0 in P tiles (P places sharing the workers)
#   tiled-2r     mpiexec -n 2: the P + 1 places spread over 2 ranks
#   tiled-2r-d2  the same with fused halos (--halo-d2: one exchange for two
#                convolutions)
#
# Options:
#   --model 'FLAGS'   hyfi-train model flags [--model resnet --depth 20]
#   --balance a,b     layers per stage [4,7]
#   --sizes LIST      image sides [128,256,512]
#   --batch N         batch [2]     --parts P  tiles [4]   --slice S  [square]
#   --steps N         measured steps (after 5 warm-up steps) [8]
#   --reps R          repetitions, rotated [2]
#   --build DIR       [build]       --out DIR  [build/bench-spatial]
#   -h, --help        this text
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
model="--model resnet --depth 20" balance="4,7" sizes="128,256,512" batch=2 parts=4
slice=square steps=8 reps=2 bdir="$root/build" out=""
# shellcheck source=common.sh
source "$root/bench/common.sh"
bench_opts="model balance sizes batch parts slice steps reps out"
bench_parse "$@"
bench_setup bench-spatial
IFS=, read -r -a slist <<<"$sizes"

run_cfg() { # kind size rep
  local kind=$1 size=$2 rep=$3
  local log="$out/$kind.$size.$rep"
  # shellcheck disable=SC2206
  local args=($model --dataset synthetic --batch-size "$batch" --image-size "$size"
               --num-classes 10 --split-size 2 --balance "$balance" --print-freq 1000000
               --steps $((steps + 5)) --metrics "$log.metrics" -v) # -v: peak memory lines
  local tile=(--spatial-size 1 --num-spatial-parts "$parts" --slice-method "$slice")
  case "$kind" in
    untiled) "$train" "${args[@]}" >"$log.log" 2>&1 ;;
    tiled) "$train" "${args[@]}" "${tile[@]}" >"$log.log" 2>&1 ;;
    tiled-2r) STARPU_NCPU=1 STARPU_WORKERS_NOBIND=1 STARPU_MPI_NOBIND=1 \
                "$mpiexec" -n 2 "$train" "${args[@]}" "${tile[@]}" >"$log.log" 2>&1 ;;
    tiled-2r-d2) STARPU_NCPU=1 STARPU_WORKERS_NOBIND=1 STARPU_MPI_NOBIND=1 \
                "$mpiexec" -n 2 "$train" "${args[@]}" "${tile[@]}" --halo-d2 >"$log.log" 2>&1 ;;
  esac || { echo "[bench] $kind $size failed (log $log.log)" >&2; tail -3 "$log.log" >&2; return 1; }
  python3 - "$kind" "$size" "$log" >>"$out/runs.jsonl" <<'PY'
import json, re, sys
kind, size, log = sys.argv[1], int(sys.argv[2]), sys.argv[3]
summ = [json.loads(l) for l in open(log + ".metrics") if '"summary"' in l][-1]
text = open(log + ".log").read()
halo = re.findall(r"halo exchange between ranks (\d+) bytes", text)
strips = re.findall(r"(\d+) halo strips per micro-batch", text)
total = re.findall(r"predicted traffic between ranks: (\d+) bytes", text)
peaks = [float(x) for x in re.findall(r"peak memory ([\d.]+) MB", text)]
print(json.dumps({"kind": kind, "size": size, "ips": summ["median_images_per_sec"],
                  "halo": int(halo[0]) if halo else 0, "traffic": int(total[0]) if total else 0,
                  "strips": int(strips[0]) if strips else 0,
                  "peak_mb": peaks}))
PY
  tail -1 "$out/runs.jsonl" >&2
}

start=$(date +%s)
: >"$out/runs.jsonl"
for s in "${slist[@]}"; do "$train" $model --dataset synthetic --batch-size "$batch" \
  --image-size "$s" --split-size 2 --balance "$balance" --steps 3 >/dev/null 2>&1 || true; done
kinds=(untiled tiled tiled-2r tiled-2r-d2)
for ((r = 1; r <= reps; r++)); do
  for s in "${slist[@]}"; do
    for ((j = 0; j < 4; j++)); do run_cfg "${kinds[$(( (j + r - 1) % 4 ))]}" "$s" "$r"; done
  done
done
{
  echo "Spatial parallelism, $(sed 's/--//g' <<<"$model"), batch $batch, 2 stages (balance $balance), stage 0 in $parts tiles ($slice)"
  echo
  bench_machine
  echo "- $reps repetitions, median of the runs' median images/s over $steps steps (5 warm-up steps dropped); traffic: the plan's bytes between ranks per step (2 ranks), of which halo strips"
  echo
  python3 - "$out/runs.jsonl" "${slist[@]}" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
def get(kind, size):
    rs = [r for r in runs if r["kind"] == kind and r["size"] == size]
    return (statistics.median(r["ips"] for r in rs), rs[0]) if rs else (None, None)
print("| image | untiled img/s | tiled img/s (1 process) | tiled img/s (2 ranks) | tiled / untiled | traffic 2 ranks (MB/step) | of which halo (MB/step) | peak MB untiled | peak MB tiled 2 ranks (rank 0 + 1) | 2 ranks, fused halos img/s | halo strips / fused | halo MB fused |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for size in (int(s) for s in sys.argv[2:]):
    u, ur = get("untiled", size)
    t, tr = get("tiled", size)
    t2, t2r = get("tiled-2r", size)
    d2, d2r = get("tiled-2r-d2", size)
    f = lambda v: "n/a" if v is None else "%.2f" % v
    print("| %dx%d | %s | %s | %s | %s | %.2f | %.3f | %s | %s | %s | %s / %s | %.3f |" % (
        size, size, f(u), f(t), f(t2), f(t / u) if u and t else "n/a",
        (t2r or {}).get("traffic", 0) / 1e6, (t2r or {}).get("halo", 0) / 1e6,
        "%.0f" % max(ur["peak_mb"]) if ur else "n/a",
        " + ".join("%.0f" % p for p in sorted(t2r["peak_mb"])) if t2r else "n/a",
        f(d2), (t2r or {}).get("strips", "n/a"), (d2r or {}).get("strips", "n/a"),
        (d2r or {}).get("halo", 0) / 1e6))
PY
  echo
  echo "total bench time $(( $(date +%s) - start )) s; runs in $out/runs.jsonl"
} | tee "$out/table.md"

#!/bin/bash
# 'plot_metrics': scripts/plot_metrics.py draws a hyfi-train --metrics file
# (loss, images/s, training and test accuracy against the step) as a PNG and
# an SVG, two files with the same curves as one line, a 2-rank run's per-rank
# figures one line per rank, and an older file without them; run by a python3
# without matplotlib, it runs again under /usr/bin/python3 when that has it.
# Skips (77) where no Python has matplotlib.
# usage: plot_metrics.sh HYFI_TRAIN PLOT_METRICS_PY
set -u
train=${1:?usage: plot_metrics.sh HYFI_TRAIN PLOT_METRICS_PY}
script=${2:?usage: plot_metrics.sh HYFI_TRAIN PLOT_METRICS_PY}
py=
for p in "${PYTHON:-python3}" python3 /usr/bin/python3; do
    if command -v "$p" >/dev/null && "$p" -c "import matplotlib" 2>/dev/null; then py=$p; break; fi
done
[ -n "$py" ] || { echo "no Python with matplotlib: skip"; exit 77; }
export HYFI_CPU_THREADS=1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$train" --model resnet --depth 8 --image-size 32 --batch-size 8 --steps 8 --print-freq 4 \
    --metrics "$dir/m.json" >"$dir/run.log" 2>&1 || { echo "FAILED: the run"; cat "$dir/run.log"; exit 1; }
cp "$dir/m.json" "$dir/m2.json"
"$py" "$script" "$dir/m.json" -o "$dir/m.png" || { echo "FAILED: PNG"; exit 1; }
out=$("$py" "$script" "$dir/m.json" "$dir/m2.json" -o "$dir/m.svg") || { echo "FAILED: SVG"; exit 1; }
echo "$out"
case $out in *"(1 run, 8 steps)"*) ;; *) echo "FAILED: two files alike are not one line"; exit 1 ;; esac
"$py" - "$dir" <<'PY' || exit 1
import sys, xml.etree.ElementTree as ET
d = sys.argv[1]
png = open(d + "/m.png", "rb").read()
assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10000, len(png)
ET.parse(d + "/m.svg")
print("plot_metrics: PNG %d bytes, SVG well-formed" % len(png))
PY
# a run of 2 ranks: one images/s line and one memory line per rank, the
# training accuracy drawn; a file without the new keys (an older run) still draws
"$py" - "$dir" <<'PY' || { echo "FAILED: writing the 2-rank file"; exit 1; }
import json, sys
d = sys.argv[1]
with open(d + "/r2.json", "w") as f:
    for s in range(1, 7):
        f.write(json.dumps({"step": s, "loss": 2.3 - 0.1 * s, "images_per_sec": 10.0 + s,
                            "grad_norm": 1.0, "weight_norm": 30.0, "train_accuracy": 0.125 * (s % 3),
                            "rank_images_per_sec": [10.0 + s, 12.0 + s],
                            "rank_peak_memory_mb": [200.0 + s, 300.0 + s]}) + "\n")
    f.write(json.dumps({"summary": True, "peak_memory_mb_rank0": 206.0, "mean_images_per_sec": 16.0,
                        "median_images_per_sec": 16.0, "test_accuracy": 0.5,
                        "peak_memory_mb_ranks": [206.0, 306.0]}) + "\n")
with open(d + "/old.json", "w") as f:
    f.write(json.dumps({"step": 1, "loss": 2.3, "images_per_sec": 10.0, "grad_norm": 1.0,
                        "weight_norm": 30.0}) + "\n")
PY
out=$("$py" "$script" "$dir/r2.json" -o "$dir/r2.svg") || { echo "FAILED: 2 ranks"; exit 1; }
echo "$out"
case $out in *"(1 run, 6 steps, 2 ranks each drawn)"*) ;; *) echo "FAILED: 2 ranks not drawn"; exit 1 ;; esac
"$py" - "$dir/r2.svg" <<'PY' || exit 1
import sys
svg = open(sys.argv[1]).read()
for want in ("r2.json rank 0", "r2.json rank 1", "peak memory (MB)", "training (each step", "test 0.5000"):
    assert want in svg, want
print("plot_metrics: 2 ranks drawn apart, training accuracy drawn")
PY
"$py" "$script" "$dir/old.json" -o "$dir/old.png" || { echo "FAILED: a file without train_accuracy"; exit 1; }
printf '{"step":1,"loss":2.3' >"$dir/cut.json"
"$py" "$script" "$dir/cut.json" -o "$dir/cut.png" 2>"$dir/cut.err" && { echo "FAILED: a cut line accepted"; exit 1; }
grep -q "line 1 is not JSON" "$dir/cut.err" || { echo "FAILED: $(cat "$dir/cut.err")"; exit 1; }
# a python3 without matplotlib (pyenv's, a virtualenv's) first on PATH while
# Debian's /usr/bin/python3 has it: the script runs again under that one
nompl=$(command -v python3)
if [ -n "$nompl" ] && ! "$nompl" -c "import matplotlib" 2>/dev/null &&
    /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
    "$nompl" "$script" "$dir/m.json" -o "$dir/re.png" >/dev/null 2>"$dir/re.err" &&
        [ -s "$dir/re.png" ] || { echo "FAILED: under $nompl: $(cat "$dir/re.err")"; exit 1; }
    echo "plot_metrics: run by $nompl (no matplotlib), drawn by /usr/bin/python3"
fi
echo "plot_metrics: ok"

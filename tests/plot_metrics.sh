#!/bin/bash
# 'plot_metrics': scripts/plot_metrics.py draws a hyfi-train --metrics file
# (loss, images/s, test accuracy against the step) as a PNG and an SVG, and
# two files with the same curves (every rank's of one run) as one line.
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
printf '{"step":1,"loss":2.3' >"$dir/cut.json"
"$py" "$script" "$dir/cut.json" -o "$dir/cut.png" 2>"$dir/cut.err" && { echo "FAILED: a cut line accepted"; exit 1; }
grep -q "line 1 is not JSON" "$dir/cut.err" || { echo "FAILED: $(cat "$dir/cut.err")"; exit 1; }
echo "plot_metrics: ok"

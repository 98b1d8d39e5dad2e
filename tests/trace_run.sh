#!/bin/bash
# 'trace_run': hyfi-train --trace on 2 ranks leaves the merged StarPU trace,
# hyfi's summary and the timeline picture, and the summary agrees with the
# run's own timing:
#   mpiexec -n 2 hyfi-train ... --split-size 2 --spatial-size 1 --num-spatial-parts 4
#       --gems mast --parts 2 --trace DIR --metrics m.json
# (4 tiles of stage 0 over both ranks: halo strips cross ranks; stage 1 and the
# mirrored GEMS copy: pipeline and all-reduce traffic). Checks: paje.trace,
# tasks.rec, comms.rec, dag.dot, summary.json, timeline.svg (well-formed XML)
# exist; the summary has halo, pipeline and all-reduce transfers; every step
# the trace finds (the longest of the ranks' spans) lasts at most the step
# time hyfi-train measured (+10%: the ranks' clocks are aligned to a few ms)
# and at least half of it; hyfi-trace DIR writes the same summary again. A run
# without --trace writes no trace files.
# usage: trace_run.sh HYFI_TRAIN HYFI_TRACE MPIEXEC
set -u
train=${1:?usage: trace_run.sh HYFI_TRAIN HYFI_TRACE MPIEXEC}
tracer=${2:?usage: trace_run.sh HYFI_TRAIN HYFI_TRACE MPIEXEC}
mpiexec=${3:?usage: trace_run.sh HYFI_TRAIN HYFI_TRACE MPIEXEC}
train=$(realpath "$train") tracer=$(realpath "$tracer")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
flags=(--model resnet --depth 8 --dataset synthetic --image-size 32 --batch-size 4 --steps 4
       --print-freq 1 --split-size 2 --spatial-size 1 --num-spatial-parts 4 --gems mast
       --parts 2)
fails=0
"$mpiexec" -n 2 "$train" "${flags[@]}" --trace "$dir/tr" --metrics "$dir/m.json" \
    >"$dir/run.log" 2>&1 || { echo "FAILED: traced run"; cat "$dir/run.log"; exit 1; }
sed -n '/^trace /,$p' "$dir/run.log"
for f in paje.trace tasks.rec comms.rec dag.dot summary.json timeline.svg; do
    [ -s "$dir/tr/$f" ] || { echo "FAILED: $f missing or empty"; fails=$((fails + 1)); }
done
python3 - "$dir" <<'PY' || fails=$((fails + 1))
import json, sys, xml.etree.ElementTree as ET
d = sys.argv[1]
s = json.load(open(d + "/tr/summary.json"))
ET.parse(d + "/tr/timeline.svg")  # well-formed
B = 8  # 4 per copy x 2 GEMS copies
steps = [1000.0 * B / json.loads(l)["images_per_sec"] for l in open(d + "/m.json") if '"step"' in l]
ok = True
tr = s["transfers"]
for cat in ("halo", "pipeline", "allreduce"):
    if tr.get(cat, {}).get("bytes", 0) <= 0:
        print("FAILED: no %s transfers in the summary" % cat); ok = False
print("transfers: " + ", ".join("%s %d msgs %.0f kB" % (k, v["count"], v["bytes"] / 1e3) for k, v in tr.items()))
found = s["steps_ms"]
if len(found) != len(steps):
    print("FAILED: the trace has %d programs, the run %d steps" % (len(found), len(steps))); ok = False
for i, (t, w) in enumerate(zip(found, steps)):
    good = i == 0 or 0.5 * w <= t <= 1.1 * w + 2
    print("step %d: trace %.1f ms, hyfi-train %.1f ms%s" % (i + 1, t, w, "" if good else "  MISMATCH"))
    ok &= good
for r in s["per_rank"]:
    for w in r["workers"]:
        if abs(w["busy_ms"] + w["idle_ms"] - s["span_ms"]) > 1e-3 * s["span_ms"] + 0.01:
            print("FAILED: rank %d busy + idle != span" % r["rank"]); ok = False
    if not 0 <= r["transfer_overlap"] <= 1:
        print("FAILED: overlap out of [0, 1]"); ok = False
cp = s["critical_path"]
if not cp["tasks"] or cp["compute_ms"] > cp["step_ms"] + 0.01:
    print("FAILED: critical path %s" % cp); ok = False
sys.exit(0 if ok else 1)
PY
cp "$dir/tr/summary.json" "$dir/first.json"
"$tracer" "$dir/tr" >"$dir/again.log" 2>&1 && cmp -s "$dir/tr/summary.json" "$dir/first.json" ||
    { echo "FAILED: hyfi-trace did not rewrite the same summary"; cat "$dir/again.log"; fails=$((fails + 1)); }
# tracing off: nothing written
(cd "$dir" && "$train" "${flags[@]}" --steps 1 >off.log 2>&1) ||
    { echo "FAILED: untraced run"; fails=$((fails + 1)); }
if ls "$dir"/prof_file* "$dir"/tr2 >/dev/null 2>&1 || grep -q "^trace " "$dir/off.log"; then
    echo "FAILED: an untraced run wrote trace files"; fails=$((fails + 1))
fi
[ "$fails" = 0 ] && echo "trace_run: ok"
exit $((fails > 0))

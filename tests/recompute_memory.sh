#!/bin/bash
# 'recompute_memory': re-materialisation and StarPU's memory limit with disk swap,
# measured with hyfi-train (ResNet v1-8, synthetic 256x256 images, batch 4, one
# place, 2 steps, one thread per kernel):
#   base      no limit: the losses and gradient norms every other run must give
#             bit for bit (--metrics), and its peak resident memory;
#   layer     --recompute layer: the same numbers, a lower estimate and a lower
#             measured peak than base (the dropped activations are really freed);
#   refused   --mem-limit-mb 400 (under base's estimate): refused at compile in
#             seconds, the message naming --recompute layer (which fits) and
#             --swap-dir with their estimates, and not --recompute stage nor one
#             place per rank, which keep as much on this one place; a limit
#             under the largest task's buffers is refused even with swap;
#   swap      --mem-limit-mb 300 with --swap-dir (at 400 the data the run really
#             holds at once, less than the estimate since residual blocks' inputs
#             take their adds' gradient buffers, nearly fits): trains, the same
#             numbers, files went to the swap folder, and the peak is within the
#             bound hyfi-train
#             states (hyfi_memory_stats: the limit, the process at start, the
#             kernels' measured scratch, at most 5 of the largest activation per
#             CPU worker, and the allowance);
#   layer400  the same limit with --recompute layer: fits, trains without swap, the
#             same numbers, within the same bound.
# Under AddressSanitizer (ASAN_OPTIONS set) resident memory holds the shadow and
# the quarantine: the peaks are printed, not compared.
# usage: recompute_memory.sh HYFI_TRAIN
set -u
train=${1:?usage: recompute_memory.sh HYFI_TRAIN}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export HYFI_CPU_THREADS=1 HYFI_LEND_MIN_BYTES=0 STARPU_NCPU=2
unset STARPU_LIMIT_CPU_MEM
common=(--model resnet --depth 8 --image-size 256 --batch-size 4 --steps 2 --print-freq 1
        --seed 7 -v) # -v: the peak memory line
fails=0
run() { # name, args...: stdout+stderr in $dir/NAME.log, metrics in $dir/NAME.json
    local name=$1
    shift
    "$train" "${common[@]}" --metrics "$dir/$name.json" "$@" >"$dir/$name.log" 2>&1
}
fail() { echo "FAILED: $*"; fails=$((fails + 1)); }

run base || fail "base run: $(tail -3 "$dir/base.log")"
run layer --recompute layer || fail "layer run: $(tail -3 "$dir/layer.log")"
t0=$(date +%s)
if run refused --mem-limit-mb 400; then
    fail "a plan above the limit without swap trained"
else
    grep -q "above the memory limit of 400 MB" "$dir/refused.log" &&
        grep -q -- "--recompute layer [0-9]* (fits)" "$dir/refused.log" &&
        ! grep -q -- "--recompute stage\|one place per rank" "$dir/refused.log" &&
        grep -q -- "--swap-dir DIR trains" "$dir/refused.log" ||
        fail "the refusal does not name the fixes (only those): $(tail -2 "$dir/refused.log")"
    echo "refused in $(($(date +%s) - t0)) s: $(grep -o 'the plan needs.*' "$dir/refused.log")"
fi
if run tiny --mem-limit-mb 40 --swap-dir "$dir/swap0"; then
    fail "a limit under the largest task's buffers trained"
else
    grep -q "could never run, even with disk swap" "$dir/tiny.log" ||
        fail "limit under a task: $(tail -2 "$dir/tiny.log")"
fi
# swapped data must leave the limit: count the swap files while it runs
run swap --mem-limit-mb 300 --swap-dir "$dir/swap" -v &
pid=$!
files=0
while kill -0 "$pid" 2>/dev/null; do
    n=$(find "$dir/swap" -type f 2>/dev/null | wc -l)
    [ "$n" -gt "$files" ] && files=$n
    sleep 0.2
done
wait "$pid" || fail "swap run: $(tail -3 "$dir/swap.log")"
echo "swap run: at most $files files in the swap folder at once"
[ "$files" -gt 0 ] || fail "nothing was swapped to disk"
run layer400 --mem-limit-mb 400 --recompute layer || fail "layer400 run: $(tail -3 "$dir/layer400.log")"
"$train" --model resnet --depth 8 --image-size 32 --batch-size 4 --steps 2 --seed 7 -v \
    >"$dir/small.log" 2>&1 || fail "the 32x32 run"

python3 - "$dir" <<'PY' || fails=$((fails + 1))
import json, os, re, sys
d = sys.argv[1]
# resident memory includes AddressSanitizer's shadow and quarantine (freed
# buffers held back): the peaks are printed, not compared
asan = bool(os.environ.get("ASAN_OPTIONS"))
def steps(name):
    return [(r["loss"], r["grad_norm"], r["weight_norm"]) for r in
            map(json.loads, open(f"{d}/{name}.json")) if "step" in r]
def peak(name):
    return float(re.search(r"peak memory ([\d.]+) MB", open(f"{d}/{name}.log").read()).group(1))
def act(name):
    return float(re.search(r"activations ~([\d.]+) MB", open(f"{d}/{name}.log").read()).group(1))
bad = 0
base = steps("base")
print("base: losses %s, peak %.0f MB, estimate %.0f MB" % ([s[0] for s in base], peak("base"),
                                                         act("base")))
for name in ("layer", "swap", "layer400"):
    same = steps(name) == base
    bad += not same
    print("%s: losses, gradient and weight norms %s base" % (name, "bitwise" if same else "DIFFER from"))
# the dropped activations are freed: estimate and measured peak lower
saved_est = act("base") - act("layer")
saved = peak("base") - peak("layer")
print("recompute layer: estimate %.0f MB (-%.0f), peak %.0f MB (-%.0f)" % (
    act("layer"), saved_est, peak("layer"), saved))
if not (saved_est > 0 and (asan or saved > 0.5 * saved_est)):
    print("FAILED: recompute did not lower the peak by half the estimated saving"); bad += 1
# the stated bound hyfi-train prints (hyfi_memory_stats): StarPU's limit + the
# process at start + the kernels' measured scratch + the allowance; the scratch
# itself at most 5 of the largest activation (the stem's output) per CPU worker
largest = 4 * 16 * 256 * 256 * 4 / 2**20      # MB
for name in ("swap", "layer400"):
    text = open(f"{d}/{name}.log").read()
    m = re.search(r"peak memory ([\d.]+) MB, (within|ABOVE) the stated bound ([\d.]+) MB "
                  r"\(StarPU's limit (\d+) \+ process at start (\d+) \+ graph \d+ \+ "
                  r"kernel scratch (\d+) \+ allowance (\d+)\)", text)
    if not m:
        print("FAILED: %s: no stated bound line" % name); bad += 1; continue
    pk, where, bound, limit, start, scratch, allow = m.groups()
    want = 300 if name == "swap" else 400
    ok = where == "within" and int(limit) == want and 0 < int(scratch) <= 2 * 5 * largest + 1
    bad += not ok and not asan
    print("%s: peak %s MB, %s the bound %s (limit %s + process %s + scratch %s + allowance %s; "
          "the 32x32 run's process %.0f): %s" % (
              name, pk, where, bound, limit, start, scratch, allow, peak("small"),
              "sanitizer build: not compared" if asan else "ok" if ok else "FAILED"))
sys.exit(1 if bad else 0)
PY
[ "$fails" = 0 ] && echo "recompute_memory: ok"
exit $((fails > 0))

#!/bin/bash
# 'driver_output': what hyfi-train prints as a person runs it
# (apps/train_progress.h, docs/user-guide.md "What a run prints"):
#   - one progress line per printed step on stderr, "step S loss L images/s R
#     accuracy A (S of N, ETA ...)" (A: the step's batch), the first without an ETA, the last with none when
#     nothing follows; no MPI4DL line unless --print-mpi4dl (then its exact
#     old format, one per step line, on stdout); plain lines (no carriage
#     return: stderr is a file here);
#   - a summary block on stdout; a run of 5 steps or fewer says its images/s
#     include the warm-up, with no "n/a"; each rank's peak memory line only
#     with -v;
#   - --print-secs: step lines by time whatever --print-freq says, and a
#     line while a step runs longer;
#   - evaluation progress and its summary line; --eval-only prints its test
#     batches, not training steps (when Fashion-MNIST is installed);
#   - --metrics keeps its keys and adds train_accuracy (the progress line's),
#     and on 2 ranks each rank's images/s and peak memory;
#   - --trace-steps A:B writes a smaller trace than the whole run, whose
#     summary and picture name steps A..B; --trace-lean a smaller one still;
#     the picture is well-formed with nothing right of its width; a run
#     resumed after step 4 traces steps 5-6 (not 1-2), and --trace-steps 6:6
#     there step 6.
# With MPIEXEC ('driver_output_mpi'), on 2 ranks (2 stages): the lines once,
# by rank 0; with -v both ranks' peak memory lines.
# usage: driver_output.sh HYFI_TRAIN [MPIEXEC]
set -u
train=${1:?usage: driver_output.sh HYFI_TRAIN [MPIEXEC]}
mpiexec=${2:-}
export HYFI_CPU_THREADS=1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fails=0
fail() { echo "FAILED: $*"; fails=$((fails + 1)); }
launch=()
plan=()
nranks=1
if [ -n "$mpiexec" ]; then launch=("$mpiexec" -n 2); plan=(--split-size 2); nranks=2; fi
small=(--model resnet --depth 8 --image-size 32 --batch-size 8 "${plan[@]}")

# run NAME ARGS...: NAME.out (stdout), NAME.err (stderr); fails on a status
run() {
    local name=$1
    shift
    timeout 300 "${launch[@]}" "$train" "${small[@]}" "$@" >"$dir/$name.out" 2>"$dir/$name.err" ||
        { fail "$name: exit status $?"; cat "$dir/$name.err"; }
}
has() { grep -qE -- "$2" "$dir/$1" || { fail "$1: no line matching '$2'"; cat "$dir/$1"; }; }
hasnt() { ! grep -qE -- "$2" "$dir/$1" || { fail "$1: a line matches '$2'"; grep -E -- "$2" "$dir/$1"; }; }
count() { # FILE PATTERN N
    local n
    n=$(grep -cE -- "$2" "$dir/$1")
    [ "$n" = "$3" ] || { fail "$1: $n lines match '$2', want $3"; cat "$dir/$1"; }
}

# (1) 7 steps, every 3rd printed: steps 1, 3, 6, 7
run seven --steps 7 --print-freq 3 --metrics "$dir/m.json"
count seven.err "^step [0-9]+ loss [0-9.]+ images/s [0-9.]+ accuracy [01]\.[0-9]{4} " 4
has seven.err "^step 1 loss [0-9.]+ images/s [0-9.]+ accuracy [01]\.[0-9]{4} \(1 of 7\)$"
has seven.err "^step 3 loss [0-9.]+ images/s [0-9.]+ accuracy [01]\.[0-9]{4} \(3 of 7, ETA [0-9.:]+( s)?\)$"
has seven.err "^step 7 loss [0-9.]+ images/s [0-9.]+ accuracy [01]\.[0-9]{4} \(7 of 7\)$"
hasnt seven.out "^step "
hasnt seven.out "Epoch:"
hasnt seven.err "Epoch:|peak memory"
has seven.out "^summary: 7 steps in [0-9.]+ s$"
has seven.out "^  images/s mean [0-9.]+ median [0-9.]+ over steps 6-7 \(steps 1-5: warm-up, not counted\)$"
has seven.out "^  test accuracy: none \(no test split\)$"
has seven.out "^  memory: (rank 0 used|used) [0-9.]+ MB at its peak, within the stated bound of [0-9.]+ MB"
count seven.out "^summary:" 1
if grep -q $'\r' "$dir/seven.err"; then fail "a carriage return in stderr (not a terminal)"; fi
python3 - "$dir/m.json" "$nranks" "$dir/seven.err" <<'PY' || fail "--metrics keys"
import json, re, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
R = int(sys.argv[2])
steps = [r for r in rows if "step" in r]
assert [r["step"] for r in steps] == list(range(1, 8)), steps
# the keys of before, the batch's accuracy, and on several ranks each rank's figures
want = {"step", "loss", "images_per_sec", "grad_norm", "weight_norm", "train_accuracy"}
if R > 1: want |= {"rank_images_per_sec", "rank_peak_memory_mb"}
assert all(set(r) == want for r in steps), steps[0]
for r in steps:
    assert 0 <= r["train_accuracy"] <= 1 and r["train_accuracy"] * 8 == round(r["train_accuracy"] * 8), r
    if R > 1:
        assert len(r["rank_images_per_sec"]) == R and len(r["rank_peak_memory_mb"]) == R, r
        assert abs(r["rank_images_per_sec"][0] - r["images_per_sec"]) <= 1e-5 * r["images_per_sec"], r
        assert all(v > 0 for v in r["rank_images_per_sec"] + r["rank_peak_memory_mb"]), r
# the progress line shows the same accuracy
for m in re.finditer(r"^step (\d+) loss \S+ images/s \S+ accuracy (\S+) ", open(sys.argv[3]).read(), re.M):
    assert abs(steps[int(m.group(1)) - 1]["train_accuracy"] - float(m.group(2))) < 1e-4, m.group(0)
want = {"summary", "peak_memory_mb_rank0", "mean_images_per_sec", "median_images_per_sec",
        "test_accuracy"}
if R > 1: want.add("peak_memory_mb_ranks")
assert set(rows[-1]) == want, rows[-1]
if R > 1:
    assert rows[-1]["peak_memory_mb_ranks"][0] == rows[-1]["peak_memory_mb_rank0"], rows[-1]
PY

# (2) 3 steps: no warm-up "n/a"; MPI4DL's line with --print-mpi4dl, one per step line
run three --steps 3 --print-freq 1 --print-mpi4dl
count three.err "^step [0-9]+ loss" 3
count three.out "^Epoch: 0 images per sec:[0-9]+\.[0-9]{6}$" 3
has three.out "^  images/s [0-9.]+ over all 3 steps \(warm-up included; more than 5 steps give a measure\)$"
hasnt three.out "n/a"

# (3) -v: each rank's peak memory line on stderr
run verbose --steps 1 -v
count verbose.err "^hyfi-train: rank [0-9] peak memory [0-9.]+ MB, within the stated bound" "$nranks"

# (4) --print-secs: lines by time (steps at 256x256 take ~0.1-0.5 s here)
timeout 300 "${launch[@]}" "$train" --model resnet --depth 8 --image-size 256 --batch-size 4 \
    "${plan[@]}" --steps 6 --print-freq 1000 --print-secs 0.05 >"$dir/secs.out" 2>"$dir/secs.err" ||
    fail "--print-secs run: exit status $?"
n=$(grep -cE "^step [2-5] loss" "$dir/secs.err")
[ "$n" -ge 2 ] || { fail "--print-secs 0.05 --print-freq 1000: $n step lines between the first and last"; cat "$dir/secs.err"; }
has secs.err "^\.\.\. step 1 running for [0-9.]+ s \(1 of 6\)$"

# (5) evaluation progress and --eval-only (Fashion-MNIST, when installed)
fm=(--model cnn --dataset fashion-mnist --batch-size 16 "${plan[@]}")
if timeout 300 "${launch[@]}" "$train" "${fm[@]}" --steps 6 --eval-batches 30 --print-freq 2 \
        --save "$dir/cnn.safetensors" >"$dir/fm.out" 2>"$dir/fm.err"; then
    has fm.err "^eval: 30/30 batches, accuracy [0-9.]+, done in [0-9.]+ s$"
    has fm.err "^step 6 loss [0-9.]+ images/s [0-9.]+ accuracy [01]\.[0-9]{4} \(6 of 6, ETA [0-9.:]+( s)?\)$"
    has fm.out "^  test accuracy 0\.[0-9]{4} \([0-9]+/480\) in [0-9.]+ s, 30 batches$"
    timeout 300 "${launch[@]}" "$train" "${fm[@]}" --eval-batches 30 --eval-only \
        --load "$dir/cnn.safetensors" >"$dir/ev.out" 2>"$dir/ev.err" || fail "--eval-only: status $?"
    has ev.out "evaluation only \(--eval-only\): 30 test batches"
    hasnt ev.out "[0-9]+ steps \("
    has ev.out "^summary: evaluation only"
    has ev.err "^eval: 30/30 batches"
    hasnt ev.err "^step "
elif grep -q "fashion" "$dir/fm.err"; then
    echo "skipped: evaluation checks (no Fashion-MNIST: $(head -1 "$dir/fm.err"))"
else
    fail "Fashion-MNIST run: $(tail -3 "$dir/fm.err")"
fi

# (6) --trace-steps: a window of the run; --trace-lean: less of it
run tall --steps 6 --print-freq 10 --trace "$dir/tall"
run twin --steps 6 --print-freq 10 --trace "$dir/twin" --trace-steps 5:6
run tlean --steps 6 --print-freq 10 --trace "$dir/tlean" --trace-steps 5:6 --trace-lean
size() { du -sb "$1" | cut -f1; }
a=$(size "$dir/tall/raw") b=$(size "$dir/twin/raw") c=$(size "$dir/tlean/raw")
echo "raw trace of 6 steps: $a bytes; steps 5-6: $b; lean: $c"
[ "$b" -lt $((a / 2)) ] || fail "--trace-steps 5:6 wrote $b bytes, the whole run $a"
[ "$c" -lt "$b" ] || fail "--trace-lean wrote $c bytes, not less than $b"
for t in twin tlean; do
    has "$t.out" "^trace .*; 2 training steps$"
    has "$t.out" "^  step 5: [0-9.]+ ms"
    has "$t.out" "^  critical path of step 6: "
done
has tall.out "^trace .*; 6 training steps$"
python3 - "$dir" <<'PY' || fail "timeline.svg"
import re, sys, xml.etree.ElementTree as ET
d = sys.argv[1]
for t, want in (("tall", "steps 3-6"), ("twin", "steps 5-6"), ("tlean", "steps 5-6")):
    root = ET.parse(f"{d}/{t}/timeline.svg").getroot()
    width = float(root.get("width"))
    ns = "{http://www.w3.org/2000/svg}"
    title = "".join(root.find(ns + "text").itertext())
    assert want in title, (t, title)
    for e in root.iter():
        x = e.get("x") or e.get("x1")
        if x is None or e.tag == ns + "svg": continue
        right = float(x) + float(e.get("width", 0))
        assert right <= width + 1e-6, (t, e.tag, e.attrib)
        if e.tag == ns + "text" and e.get("text-anchor") != "end":
            assert float(x) < width - 20, (t, e.attrib, "".join(e.itertext()))
print("timeline.svg: steps as asked, nothing past the right edge")
PY

# (6b) --resume: the trace numbers the steps on from the checkpoint, and a
# --trace-steps window is the run's global steps
run ck4 --steps 6 --print-freq 10 --checkpoint-dir "$dir/ck" --stop-at-step 4
cp -r "$dir/ck" "$dir/ck2"
run tres --steps 6 --print-freq 10 --checkpoint-dir "$dir/ck" --resume "$dir/ck" --trace "$dir/tres"
has tres.out "^trace .*; 2 training steps$"
has tres.out "^  step 5: [0-9.]+ ms"
has tres.out "^  critical path of step 6: "
hasnt tres.out "^  step [1-4]: "
run tresw --steps 6 --print-freq 10 --checkpoint-dir "$dir/ck2" --resume "$dir/ck2" \
    --trace "$dir/tresw" --trace-steps 6:6
has tresw.out "^trace .*; 1 training step$"
has tresw.out "^  step 6: [0-9.]+ ms"
python3 - "$dir" <<'PY' || fail "resumed trace: step numbers"
import json, sys
d = sys.argv[1]
for t, want in (("tres", [5, 6]), ("tresw", [6])):
    got = json.load(open(f"{d}/{t}/summary.json"))["step_numbers"]
    assert got == want, (t, got)
print("resumed traces: steps", "5-6 and 6")
PY

# (7) bad windows
for bad in 0:3 4:2 x :; do
    timeout 60 "$train" "${small[@]}" --steps 2 --trace "$dir/bad" --trace-steps "$bad" \
        >/dev/null 2>"$dir/bad.err"
    st=$?
    [ "$st" = 2 ] && grep -q "^hyfi-train: --trace-steps '$bad' is not valid" "$dir/bad.err" ||
        { fail "--trace-steps $bad: status $st"; cat "$dir/bad.err"; }
done
timeout 60 "$train" "${small[@]}" --steps 2 --trace-steps 1:2 >/dev/null 2>"$dir/bad.err"
[ $? = 2 ] && grep -q "needs --trace DIR" "$dir/bad.err" || fail "--trace-steps without --trace"

[ "$fails" = 0 ] && echo "driver_output: ok"
exit $((fails > 0))

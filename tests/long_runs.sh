#!/bin/bash
# 'long_runs': checkpoints, resume, preemption and model files of hyfi-train.
#   1. bit-exact resume in one process: 8 steps (cosine schedule) equal, loss
#      for loss and byte for byte in the final checkpoint, 3 steps
#      (--stop-at-step) + --resume for 5; --keep 2 leaves the 2 newest; the
#      same in bf16 (--precision taken from the checkpoint);
#   2. the same on 2 ranks (2 stages, 2 micro-batches, --deterministic);
#   3. across plans: a checkpoint of 2 ranks with tiles, stages, GEMS and data
#      parallelism resumes in one process untiled (the equivalent one-place
#      plan) and continues equal to the uninterrupted run within 1e-5;
#   4. preemption: SIGTERM to mpiexec (2 ranks) finishes the step, writes a
#      checkpoint and exits 0 with one line; that checkpoint resumes;
#   5. a process killed (SIGKILL) while it writes a checkpoint (held in fsync
#      by tests/slow_fsync.c) leaves the previous checkpoint intact and no
#      other file; resuming from it gives the uninterrupted losses;
#   6. clear errors for a truncated, corrupt, other-model or missing checkpoint,
#      and for an image size or class count other than the checkpoint's; the
#      resume rule: a resume naming only the model continues the run exactly
#      (its settings from the checkpoint), explicit --lr and --momentum are
#      applied with a note, and a damaged newest checkpoint falls back to the
#      newest valid one, saying so;
#   7. --save / --load / --eval-only round trip (safetensors, pure C): the
#      loaded model evaluates to the trained model's test accuracy;
#   8. a non-finite gradient on 2 ranks (--lr 500): non-zero exit naming the
#      step and --lr, the newest checkpoint is the step before it, and it loads.
# usage: long_runs.sh HYFI_TRAIN MPIEXEC SLOW_FSYNC_SO
set -u
train=${1:?usage: long_runs.sh HYFI_TRAIN MPIEXEC SLOW_FSYNC_SO}
mpiexec=${2:?usage: long_runs.sh HYFI_TRAIN MPIEXEC SLOW_FSYNC_SO}
shim=${3:?usage: long_runs.sh HYFI_TRAIN MPIEXEC SLOW_FSYNC_SO}
export HYFI_CPU_THREADS=1 HYFI_LEND_MIN_BYTES=0
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fails=0
fail() { echo "FAILED: $*"; fails=$((fails + 1)); }
# losses A B [FROM] [TOL]: per-step losses of two metrics files, equal (bitwise
# as printed with 9 digits, or within relative TOL) from step FROM on
losses() {
    python3 - "$@" <<'PY'
import json, sys
a, b = sys.argv[1], sys.argv[2]
frm = int(sys.argv[3]) if len(sys.argv) > 3 else 1
tol = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
def load(p):
    return {j["step"]: j["loss"] for j in map(json.loads, open(p)) if "step" in j}
la, lb = load(a), load(b)
steps = sorted(s for s in la if s >= frm)
ok = steps and steps == sorted(s for s in lb if s >= frm)
worst = max((abs(la[s] - lb[s]) / max(abs(la[s]), 1e-12) for s in steps), default=1)
ok = ok and worst <= tol
print("  steps %s..%s: %s vs %s, worst rel. diff %.3g: %s" % (
    steps[0] if steps else "?", steps[-1] if steps else "?", [la[s] for s in steps],
    [lb[s] for s in steps], worst, "ok" if ok else "MISMATCH"))
sys.exit(0 if ok else 1)
PY
}
run() { # LOG ARGS...: hyfi-train, status kept in $rc
    local log=$1; shift
    "$@" >"$log" 2>&1; rc=$?
}

# 1. one process
c=(--model resnet --depth 8 --image-size 16 --batch-size 8 --steps 8 --lr-schedule cosine
   --print-freq 100)
run "$dir/u1.log" "$train" "${c[@]}" --metrics "$dir/u1.json" --checkpoint-dir "$dir/u1"
[ $rc = 0 ] || { fail "uninterrupted run"; cat "$dir/u1.log"; }
run "$dir/s1.log" "$train" "${c[@]}" --metrics "$dir/s1.json" --checkpoint-dir "$dir/s1" \
    --checkpoint-every 1 --keep 2 --stop-at-step 3
[ $rc = 0 ] && grep -q "stopped by --stop-at-step after step 3 of 8" "$dir/s1.log" ||
    { fail "--stop-at-step 3"; cat "$dir/s1.log"; }
[ "$(ls "$dir/s1")" = "$(printf 'step-00000002.safetensors\nstep-00000003.safetensors')" ] ||
    fail "--keep 2 left: $(ls "$dir/s1" | tr '\n' ' ')"
run "$dir/r1.log" "$train" "${c[@]}" --metrics "$dir/s1.json" --checkpoint-dir "$dir/s1" --resume
[ $rc = 0 ] && grep -q "resumed from .*step-00000003.safetensors: 3 steps done" "$dir/r1.log" ||
    { fail "--resume"; cat "$dir/r1.log"; }
echo "one process, 8 steps = 3 + resume for 5:"
losses "$dir/u1.json" "$dir/s1.json" || fail "one-process resume: losses differ"
cmp "$dir/u1/step-00000008.safetensors" "$dir/s1/step-00000008.safetensors" ||
    fail "one-process resume: final checkpoints differ"
# the same in bf16 (mixed precision): the checkpoints keep the float32 master
# weights, and a resume that names no precision takes the checkpoint's
run "$dir/u1b.log" "$train" "${c[@]}" --precision bf16 --metrics "$dir/u1b.json" \
    --checkpoint-dir "$dir/u1b"
run "$dir/s1b.log" "$train" "${c[@]}" --precision bf16 --metrics "$dir/s1b.json" \
    --checkpoint-dir "$dir/s1b" --stop-at-step 3
run "$dir/r1b.log" "$train" "${c[@]}" --metrics "$dir/s1b.json" --checkpoint-dir "$dir/s1b" --resume
[ $rc = 0 ] && grep -q "bf16 (mixed precision)" "$dir/r1b.log" ||
    { fail "bf16 resume"; cat "$dir/r1b.log"; }
echo "one process in bf16, 8 steps = 3 + resume for 5:"
losses "$dir/u1b.json" "$dir/s1b.json" || fail "bf16 resume: losses differ"
cmp "$dir/u1b/step-00000008.safetensors" "$dir/s1b/step-00000008.safetensors" ||
    fail "bf16 resume: final checkpoints differ"

# 2. two ranks
p=(--split-size 2 --parts 2 --deterministic)
run "$dir/u2.log" "$mpiexec" -n 2 "$train" "${c[@]}" "${p[@]}" --metrics "$dir/u2.json" \
    --checkpoint-dir "$dir/u2"
[ $rc = 0 ] || { fail "2 ranks, uninterrupted"; cat "$dir/u2.log"; }
run "$dir/s2.log" "$mpiexec" -n 2 "$train" "${c[@]}" "${p[@]}" --metrics "$dir/s2.json" \
    --checkpoint-dir "$dir/s2" --stop-at-step 5
run "$dir/r2.log" "$mpiexec" -n 2 "$train" "${c[@]}" "${p[@]}" --metrics "$dir/s2.json" \
    --checkpoint-dir "$dir/s2" --resume
[ $rc = 0 ] || { fail "2 ranks, resume"; cat "$dir/s2.log" "$dir/r2.log"; }
echo "2 ranks (2 stages, 2 micro-batches), 8 steps = 5 + resume for 3:"
losses "$dir/u2.json" "$dir/s2.json" || fail "2-rank resume: losses differ"
cmp "$dir/u2/step-00000008.safetensors" "$dir/s2/step-00000008.safetensors" ||
    fail "2-rank resume: final checkpoints differ"

# 3. across plans: 2 ranks, four replicas (GEMS x data parallel) of 2 stages with
#    a tiled first stage -> one process, untiled, the same 8 micro-batches
x=(--model resnet --depth 8 --image-size 32 --steps 5 --print-freq 100)
five=(--batch-size 4 --parts 2 --split-size 2 --spatial-size 1 --num-spatial-parts 2
      --slice-method vertical --gems mast --data-parallel 2)
one=(--batch-size 16 --parts 8)
run "$dir/u3.log" "$train" "${x[@]}" "${one[@]}" --metrics "$dir/u3.json"
run "$dir/s3.log" "$mpiexec" -n 2 "$train" "${x[@]}" "${five[@]}" --metrics "$dir/s3.json" \
    --checkpoint-dir "$dir/s3" --stop-at-step 2
[ $rc = 0 ] || { fail "five dimensions on 2 ranks"; cat "$dir/s3.log"; }
run "$dir/r3.log" "$train" "${x[@]}" "${one[@]}" --metrics "$dir/s3.json" --resume "$dir/s3"
[ $rc = 0 ] || { fail "cross-plan resume"; cat "$dir/r3.log"; }
echo "2 ranks (tiles, stages, GEMS, data parallel) for 2 steps, then one process for 3:"
losses "$dir/u3.json" "$dir/s3.json" 1 1e-5 || fail "cross-plan resume: losses differ"

# 4. preemption: SIGTERM to mpiexec
c4=(--model resnet --depth 8 --image-size 16 --batch-size 8 --steps 1000000 --print-freq 1
    --split-size 2)
"$mpiexec" -n 2 "$train" "${c4[@]}" --checkpoint-dir "$dir/s4" >"$dir/s4.log" 2>&1 &
pid=$!
for _ in $(seq 1 300); do grep -q "^step 3 " "$dir/s4.log" && break; sleep 0.1; done
t0=$(date +%s.%N)
kill -TERM "$pid"
wait "$pid"; rc=$?
t1=$(date +%s.%N)
line=$(grep "stopped by SIGTERM" "$dir/s4.log")
echo "SIGTERM: exit $rc after $(python3 -c "print('%.2f' % ($t1 - $t0))") s: $line"
[ $rc = 0 ] && [ -n "$line" ] || { fail "SIGTERM on 2 ranks"; tail -20 "$dir/s4.log"; }
n4=$(ls "$dir/s4" 2>/dev/null | sed -n 's/step-0*\([0-9]*\)\.safetensors/\1/p' | tail -1)
run "$dir/r4.log" "$mpiexec" -n 2 "$train" "${c4[@]}" --steps $((n4 + 1)) --resume "$dir/s4"
[ $rc = 0 ] && grep -q "$n4 steps done" "$dir/r4.log" ||
    { fail "resume after SIGTERM"; cat "$dir/r4.log"; }

# 5. SIGKILL in the middle of writing a checkpoint
run "$dir/s5a.log" "$train" "${c[@]}" --metrics "$dir/s5.json" --checkpoint-dir "$dir/s5" \
    --stop-at-step 4
cp "$dir/s5/step-00000004.safetensors" "$dir/before"
rm -f "$dir/mark"
SLOW_FSYNC_MARK="$dir/mark" LD_PRELOAD="$shim" ASAN_OPTIONS="${ASAN_OPTIONS:-}:verify_asan_link_order=0" \
    "$train" "${c[@]}" --metrics "$dir/s5.json" --checkpoint-dir "$dir/s5" --resume \
    --checkpoint-every 2 >"$dir/s5b.log" 2>&1 &
pid=$!
for _ in $(seq 1 300); do [ -e "$dir/mark" ] && break; sleep 0.1; done
[ -e "$dir/mark" ] || fail "the save never reached fsync"
kill -KILL "$pid"; wait "$pid" 2>/dev/null
echo "killed while writing step 6: left $(ls -A "$dir/s5" | tr '\n' ' ')"
[ "$(ls -A "$dir/s5")" = "step-00000004.safetensors" ] || fail "files left: $(ls -A "$dir/s5")"
cmp "$dir/before" "$dir/s5/step-00000004.safetensors" || fail "the previous checkpoint changed"
# the metrics of the killed run's steps 5-6 are dropped: resume appends anew
python3 - "$dir/s5.json" <<'PY'
import json, sys
keep = [l for l in open(sys.argv[1]) if "step" in l and json.loads(l)["step"] <= 4]
open(sys.argv[1], "w").writelines(keep)
PY
run "$dir/s5c.log" "$train" "${c[@]}" --metrics "$dir/s5.json" --checkpoint-dir "$dir/s5" --resume
[ $rc = 0 ] || { fail "resume after a killed save"; cat "$dir/s5c.log"; }
losses "$dir/u1.json" "$dir/s5.json" || fail "resume after a killed save: losses differ"

# 6. bad checkpoints
bad() { # NAME EXPECTED-TEXT ARGS...
    local name=$1 want=$2; shift 2
    run "$dir/bad.log" "$train" "${c[@]}" "$@"
    if [ $rc != 0 ] && grep -q -- "$want" "$dir/bad.log"; then
        echo "  $name: exit $rc: $(grep -m1 -- "$want" "$dir/bad.log")"
    else
        fail "$name (exit $rc, wanted \"$want\")"; cat "$dir/bad.log"
    fi
}
ck="$dir/u1/step-00000008.safetensors"
head -c 100000 "$ck" >"$dir/trunc.safetensors"
cp "$ck" "$dir/flip.safetensors"
printf '\x55' | dd of="$dir/flip.safetensors" bs=1 seek=50000 conv=notrunc 2>/dev/null
echo "bad checkpoints:"
bad truncated "corrupt or truncated" --resume "$dir/trunc.safetensors"
bad corrupt "corrupt or truncated" --resume "$dir/flip.safetensors"
bad "other model" "the checkpoint holds resnet-8 v1" --depth 14 --resume "$ck"
bad "other classes" "classifier has 10 classes, --num-classes 7 asks for another run" \
    --num-classes 7 --resume "$ck"
bad "other image size" "trained on 16x16 images, --image-size 32 asks for another run" \
    --image-size 32 --resume "$ck"
bad missing "give a checkpoint folder or file" --resume "$dir/empty-folder-$$" --checkpoint-dir "$dir/e"
mkdir -p "$dir/empty"
bad empty "no checkpoint (step-N.safetensors) in it" --resume "$dir/empty"
# A checkpoint of before the word checksum (no hyfi.checksum_kind: FNV-1a byte by
# byte over the file) still loads, and is still checked.
python3 - "$ck" "$dir/old.safetensors" "$dir/oldflip.safetensors" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n])
del h["__metadata__"]["hyfi.checksum_kind"]
h["__metadata__"]["hyfi.checksum"] = "0" * 16
def file(hdr):
    j = json.dumps(hdr, separators=(",", ":")).encode()
    j += b" " * (-len(j) % 8)
    return struct.pack("<Q", len(j)) + j + raw[8 + n:]
s = 0xCBF29CE484222325
for b in file(h):
    s = ((s ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
h["__metadata__"]["hyfi.checksum"] = "%016x" % s
out = file(h)
open(sys.argv[2], "wb").write(out)
flip = bytearray(out)
flip[-100] ^= 0x55
open(sys.argv[3], "wb").write(flip)
PY
run "$dir/old.log" "$train" "${c[@]}" --steps 9 --resume "$dir/old.safetensors"
[ $rc = 0 ] && grep -q "8 steps done" "$dir/old.log" ||
    { fail "a checkpoint with the byte-wise checksum"; cat "$dir/old.log"; }
bad "corrupt (byte-wise checksum)" "corrupt or truncated" --resume "$dir/oldflip.safetensors"

# 6b. the resume rule: the checkpoint's settings unless a flag says otherwise
# (differences printed), and a damaged newest checkpoint skipped for the newest
# valid one. A resume that names only the model goes on as the uninterrupted
# run: image size, steps, schedule and learning rate come from the checkpoint.
echo "the resume rule:"
run "$dir/s6.log" "$train" "${c[@]}" --metrics "$dir/s6.json" --checkpoint-dir "$dir/s6" \
    --checkpoint-every 1 --keep 0 --stop-at-step 3
cp "$dir/s6.json" "$dir/s6b.json"
run "$dir/r6.log" "$train" --model resnet --depth 8 --batch-size 8 --print-freq 100 \
    --metrics "$dir/s6.json" --resume "$dir/s6"
[ $rc = 0 ] && grep -q "3 steps done (epoch 0), 5 to go" "$dir/r6.log" ||
    { fail "resume with the checkpoint's settings"; cat "$dir/r6.log"; }
losses "$dir/u1.json" "$dir/s6.json" || fail "resume with the checkpoint's settings: losses differ"
# the newest (step 3) damaged: step 2 is resumed, saying so
printf '\x55' | dd of="$dir/s6/step-00000003.safetensors" bs=1 seek=50000 conv=notrunc 2>/dev/null
rm -f "$dir/s6"/step-0000000[4-9].safetensors
run "$dir/r6b.log" "$train" --model resnet --depth 8 --batch-size 8 --print-freq 100 \
    --metrics "$dir/s6b.json" --resume "$dir/s6" --lr 0.2 --momentum 0.5
if [ $rc = 0 ] && grep -q "resuming from the newest valid one instead, .*step-00000002" "$dir/r6b.log" &&
   grep -q "2 steps done" "$dir/r6b.log" &&
   grep -q -- "--lr 0.2 given: it replaces the checkpoint's 0.05" "$dir/r6b.log" &&
   grep -q -- "--momentum 0.5 given: it replaces the checkpoint's 0.9" "$dir/r6b.log"; then
    echo "  $(grep -m1 "newest valid" "$dir/r6b.log" | cut -c1-160)..."
    echo "  $(grep -m1 -- "--lr 0.2 given" "$dir/r6b.log")"
else
    fail "fallback to the newest valid checkpoint, explicit --lr and --momentum"; cat "$dir/r6b.log"
fi

# 7. --save / --load / --eval-only (Fashion-MNIST's test split)
f=(--model cnn --dataset fashion-mnist --batch-size 64 --steps 30 --eval-batches 5
   --print-freq 100)
run "$dir/t7.log" "$train" "${f[@]}" --save "$dir/model.safetensors"
[ $rc = 0 ] || { fail "--save"; cat "$dir/t7.log"; }
run "$dir/e7.log" "$train" "${f[@]}" --load "$dir/model.safetensors" --eval-only
[ $rc = 0 ] || { fail "--load --eval-only"; cat "$dir/e7.log"; }
a=$(grep -o "test accuracy [0-9.]* ([0-9/]*)" "$dir/t7.log")
b=$(grep -o "test accuracy [0-9.]* ([0-9/]*)" "$dir/e7.log")
echo "--save then --load --eval-only: trained: $a; loaded: $b"
[ -n "$a" ] && [ "$a" = "$b" ] || fail "the loaded model evaluates differently"
bad "model file as checkpoint" "not a hyfi checkpoint" --resume "$dir/model.safetensors"

# 8. a run that produces a non-finite gradient on 2 ranks (--lr 500): it stops
# naming the step and --lr, non-zero, and the last checkpoint is the step before,
# which loads
run "$dir/nan.log" timeout 120 "$mpiexec" -n 2 "$train" --model resnet --depth 8 \
    --image-size 16 --batch-size 8 --steps 30 --print-freq 100 --split-size 2 --lr 500 \
    --divergence-ratio 0 --checkpoint-dir "$dir/nan" --checkpoint-every 1 --keep 2
bad_step=$(sed -n 's/.*the run diverged at step \([0-9]*\); lower --lr (500 now).*/\1/p' \
           "$dir/nan.log" | head -1)
last=$(ls "$dir/nan" 2>/dev/null | sed -n 's/step-0*\([0-9]*\)\.safetensors/\1/p' | tail -1)
if [ "$rc" = 0 ] || [ -z "$bad_step" ] || [ "$last" != $((bad_step - 1)) ]; then
    fail "NaN on 2 ranks: exit $rc, diverged at step '${bad_step}', last checkpoint '${last}'"
    grep -v "^Epoch\|^step" "$dir/nan.log" | tail -5
else
    echo "NaN on 2 ranks: exit $rc at step $bad_step, last checkpoint step $last"
    run "$dir/nanr.log" "$mpiexec" -n 2 "$train" --model resnet --depth 8 --image-size 16 \
        --batch-size 8 --steps "$last" --split-size 2 --lr 0.01 --checkpoint-dir "$dir/nan" --resume
    grep -q "resumed from .*step-0*$last.safetensors" "$dir/nanr.log" ||
        { fail "the last good checkpoint does not load"; tail -3 "$dir/nanr.log"; }
fi

[ "$fails" = 0 ] && echo "long_runs: ok"
exit $((fails > 0))

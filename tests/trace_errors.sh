#!/bin/bash
# 'trace_errors': a trace that cannot be written whole fails with the real
# cause, not a misleading "no hyfi task" (issue 18). Writes are cut by a file
# size limit (ulimit -f, SIGXFSZ ignored as a full disk would not signal), so
# the test runs as any user; a full file system is tried too where an
# unprivileged mount namespace allows a small tmpfs.
#   1. hyfi-train --trace under the limit: StarPU's raw FxT file is cut at the
#      end of the run -> exit 1, "--trace DIR: ... raw/prof_file_... failed
#      ... File too large ... ulimit -f".
#   2. the same with more handles than the limit holds: the notes written
#      during the run (hyfi_handles.tsv) are named.
#   3. hyfi-trace merging whole raw files under the limit, SIGXFSZ ignored and
#      not: "writing DIR/paje.trace failed: File too large"; the failed merge
#      leaves no paje.trace, so hyfi-trace DIR without the limit merges again
#      and writes the summary of an unhindered merge.
#   4. hyfi-trace summarising under the limit: "writing DIR/summary.json
#      failed: File too large".
#   5. a tasks.rec that cannot be read: "reading DIR/tasks.rec failed".
#   6. (tmpfs) hyfi-train --trace into a full file system: "No space left on
#      device".
#   7. a trace that would hold nothing is refused before the run (exit 2),
#      not summarised into "no hyfi task": a --trace-steps window after the
#      last step; on a run resumed after step 2, a window that ends before
#      its first step 3 (the message names both and the window to give), while
#      a window across it traces step 3 and says steps 1-2 were done before;
#      --trace-steps with --eval-only; --trace on a resumed run with no step
#      left and no test split.
# usage: trace_errors.sh HYFI_TRAIN HYFI_TRACE
set -u
train=${1:?usage: trace_errors.sh HYFI_TRAIN HYFI_TRACE}
tracer=${2:?usage: trace_errors.sh HYFI_TRAIN HYFI_TRACE}
train=$(realpath "$train") tracer=$(realpath "$tracer")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# a StarPU home of its own: the limited runs must not cut calibration files
# other tests read
export STARPU_HOME="$dir/starpu-home"
export STARPU_NCPU=1
flags=(--model resnet --depth 8 --dataset synthetic --image-size 32 --batch-size 4 --steps 1)
fails=0
fail() { echo "FAILED: $*"; fails=$((fails + 1)); }

# expect NAME RC LOG PATTERN...: exit status RC, every PATTERN in LOG, and no
# "no hyfi task" there
expect() {
    local name=$1 want=$2 rc=$3 log=$4
    shift 4
    local ok=1
    [ "$rc" = "$want" ] || { fail "$name: exit status $rc, expected $want"; ok=0; }
    for p in "$@"; do
        grep -qF -- "$p" "$log" || { fail "$name: no '$p' in the message"; ok=0; }
    done
    if grep -q "no hyfi task" "$log"; then fail "$name: says 'no hyfi task'"; ok=0; fi
    [ $ok = 1 ] && echo "ok: $name: $(grep -m1 -E 'hyfi-tra(in|ce): (--trace|hyfi_)' "$log")"
    [ $ok = 1 ] || cat "$log"
}

# limited CMD...: run CMD under a 64 KiB file size limit with SIGXFSZ ignored
limited() { (trap '' XFSZ; ulimit -f "${LIMIT:-64}"; exec "$@"); }

# a whole trace to start from
"$train" "${flags[@]}" --trace "$dir/good" >"$dir/good.log" 2>&1
rc=$?
if [ $rc != 0 ] && grep -q "without FxT" "$dir/good.log"; then
    echo "SKIP: this StarPU was built without FxT"; exit 77
fi
[ $rc = 0 ] || { echo "FAILED: traced run"; cat "$dir/good.log"; exit 1; }

# 1. the run's raw file cut by the limit
limited "$train" "${flags[@]}" --trace "$dir/t1" >"$dir/t1.log" 2>&1
expect "run under ulimit -f 64" 1 $? "$dir/t1.log" "hyfi-train: --trace $dir/t1: " \
    "writing $dir/t1/raw/prof_file_" "File too large" "ulimit -f"

# 2. hyfi_handles.tsv cut by the 64 KiB limit while the run compiles: a plan with more
# handles (ResNet-32, 8 micro-batches: about 107 kB of notes). Not ResNet-8's 8 kB under
# a 4 KiB limit: FxT's own first blocks can pass 4 KiB, and FxT exits (status 1, no
# message of hyfi's) when it cannot write them.
flags2=(--model resnet --depth 32 --dataset synthetic --image-size 32 --batch-size 8 --parts 8
        --steps 1)
limited "$train" "${flags2[@]}" --trace "$dir/t2" >"$dir/t2.log" 2>&1
expect "run under ulimit -f 64, many handles" 1 $? "$dir/t2.log" "hyfi-train: --trace $dir/t2: " \
    "writing $dir/t2/hyfi_handles.tsv failed" "File too large"

# 3. merging whole raw files under the limit
for sig in ignored default; do
    m="$dir/m-$sig"
    mkdir "$m" && cp -r "$dir/good/raw" "$dir"/good/hyfi_*.tsv "$m/"
    if [ $sig = ignored ]; then
        limited "$tracer" "$m" >/dev/null 2>"$dir/m.log"
    else
        (ulimit -f 64; exec "$tracer" "$m") >/dev/null 2>"$dir/m.log"
    fi
    expect "merge under ulimit -f 64, SIGXFSZ $sig" 1 $? "$dir/m.log" \
        "hyfi-trace: hyfi_trace_merge: writing $m/paje.trace failed: File too large"
    [ -e "$m/paje.trace" ] && fail "a failed merge left $m/paje.trace"
done
"$tracer" "$dir/m-ignored" >/dev/null 2>"$dir/m.log" ||
    { fail "hyfi-trace after a failed merge"; cat "$dir/m.log"; }
cmp -s "$dir/m-ignored/summary.json" "$dir/good/summary.json" ||
    fail "the summary after a failed merge differs from the run's"

# 4. the summary's own files
cp -r "$dir/good" "$dir/s"
LIMIT=1 limited "$tracer" "$dir/s" >/dev/null 2>"$dir/s.log"
expect "summary under ulimit -f 1" 1 $? "$dir/s.log" \
    "hyfi-trace: hyfi_trace_summarize: writing $dir/s/summary.json failed: File too large"

# 5. a read error
cp -r "$dir/good" "$dir/r" && rm "$dir/r/tasks.rec" && mkdir "$dir/r/tasks.rec"
"$tracer" "$dir/r" >/dev/null 2>"$dir/r.log"
expect "tasks.rec unreadable" 1 $? "$dir/r.log" "reading $dir/r/tasks.rec failed: Is a directory"

# 6. a full file system (a 512 KiB tmpfs), where allowed
if unshare -rm true 2>/dev/null; then
    mkdir "$dir/full"
    unshare -rm bash -c 'mount -t tmpfs -o size=512k none "$1" || exit 99
        shift; exec "$@"' sh "$dir/full" "$train" "${flags[@]}" --trace "$dir/full/tr" \
        >"$dir/full.log" 2>&1
    rc=$?
    if [ $rc = 99 ]; then
        echo "skipped: full file system (cannot mount a tmpfs here)"
    else
        expect "run into a full tmpfs" 1 $rc "$dir/full.log" "hyfi-train: --trace $dir/full/tr: " \
            "No space left on device" "free space or choose another folder"
    fi
else
    echo "skipped: full file system (no unprivileged mount namespace)"
fi

# 7. traces that would hold nothing
"$train" "${flags[@]}" --trace "$dir/w1" --trace-steps 3:4 >"$dir/w1.log" 2>&1
expect "window after the last step" 2 $? "$dir/w1.log" \
    "hyfi-train: --trace-steps '3:4': the run ends after step 1, before the window" \
    "within steps 1-1"
"$train" "${flags[@]}" --steps 3 --stop-at-step 2 --checkpoint-dir "$dir/ck" >"$dir/ck.log" 2>&1 ||
    { fail "checkpoint at step 2"; cat "$dir/ck.log"; }
"$train" "${flags[@]}" --steps 3 --resume "$dir/ck" --trace "$dir/w2" --trace-steps 1:2 \
    >"$dir/w2.log" 2>&1
expect "window before a resumed run's first step" 2 $? "$dir/w2.log" \
    "hyfi-train: --trace-steps '1:2': this run resumes from $dir/ck/step-00000002.safetensors after step 2" \
    "its first step is 3, after the window" "--trace-steps 3:3"
[ -e "$dir/w2/paje.trace" ] && fail "the refused window left a trace"
"$train" "${flags[@]}" --steps 3 --resume "$dir/ck" --trace "$dir/w3" --trace-steps 2:3 \
    >"$dir/w3.log" 2>&1
expect "window across a resumed run's first step" 0 $? "$dir/w3.log" \
    "hyfi-train: --trace-steps '2:3': step 2 was done before --resume; the trace begins at step 3" \
    "; 1 training step"
"$train" "${flags[@]}" --resume "$dir/ck" --eval-only --trace "$dir/w4" --trace-steps 1 \
    >"$dir/w4.log" 2>&1
expect "window with --eval-only" 2 $? "$dir/w4.log" \
    "hyfi-train: --trace-steps picks training steps, and --eval-only makes none"
"$train" "${flags[@]}" --steps 2 --resume "$dir/ck" --trace "$dir/w5" >"$dir/w5.log" 2>&1
expect "resumed with no step left" 2 $? "$dir/w5.log" \
    "hyfi-train: --trace $dir/w5: nothing to trace: the checkpoint" "has all 2 steps done"

[ "$fails" = 0 ] && echo "trace_errors: ok"
exit $((fails > 0))

#!/bin/bash
# 'mpi_startup': no rank waits for a rank that failed (docs/user-guide.md,
# "When something goes wrong"). Each case starts 2 ranks of hyfi-train, most
# with MPMD syntax (mpiexec -n 1 ARGS : -n 1 OTHER ARGS) so that one rank alone
# gets the fault, and asserts that the job ends within 10 s, each rank with a
# non-zero status and a message:
#   - an unknown flag on rank 1 only, then on rank 0 only; --lr -1 on rank 1;
#   - a one-class image folder on rank 1 (another --datapath);
#   - a truncated Fashion-MNIST file on rank 1 (its own copy: a node whose copy
#     is damaged);
#   - --save, --checkpoint-dir on rank 1 only (named as the setting that differs);
#   - --metrics /dev/full (one process and 2 ranks), and on a full file system
#     (a tmpfs, where mounting is allowed): exit 1 naming the write that failed;
#   - a slides folder whose class folders hold train/ and val/ (what
#     scripts/make_slides.py writes for several formats): refused with the fix;
#   - --num-spatial-parts without --spatial-size, --swap-dir without
#     --mem-limit-mb: refused;
#   - rank 1 stopped (SIGSTOP) before MPI starts, and rank 1 hanging while it
#     opens its data (a FIFO): with --watchdog 5 rank 0 names what it waits
#     for and ends the job, and the stuck rank does not outlive it;
#   - the launcher's proxy killed while rank 1 is stopped (a batch system's
#     clean-up): no rank outlives it (before: both stayed, one stopped).
# Every mpiexec runs under `timeout`, so a regression fails instead of hanging.
# usage: mpi_startup.sh HYFI_TRAIN MPIEXEC
set -u
train=${1:?usage: mpi_startup.sh HYFI_TRAIN MPIEXEC}
mpiexec=${2:?usage: mpi_startup.sh HYFI_TRAIN MPIEXEC}
export HYFI_CPU_THREADS=1 HYFI_LEND_MIN_BYTES=0
dir=$(mktemp -d)
mounted=""
# shellcheck disable=SC2317 # (the trap calls it)
cleanup() {
    [ -n "$mounted" ] && umount "$mounted" 2>/dev/null
    pkill -KILL -f "$dir/" 2>/dev/null
    rm -rf "$dir"
}
trap cleanup EXIT
fails=0
fail() { echo "FAILED: $*"; fails=$((fails + 1)); }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
alive() { ps -o stat= -p "$1" 2>/dev/null | grep -qv Z; } # a zombie is gone
ends() { # pid: gone within 10 s
    for _ in $(seq 1 100); do alive "$1" || return 0; sleep 0.1; done
    return 1
}
limit=60
common=(--model resnet --depth 8 --image-size 16 --batch-size 8 --dataset synthetic
        --split-size 2 --steps 3 --print-freq 1)
# each rank through a wrapper that records its status in $dir/rc.RANK and its pid
# shellcheck disable=SC2016 # expanded by the wrapper's shell
wrap=(bash -c 'echo $$ >"$0/pid.$PMI_RANK"; "$@"; rc=$?; echo $rc >"$0/rc.$PMI_RANK"; exit $rc' "$dir")

# run NAME MPIEXEC-ARGS...: status in $rc, seconds in $secs, output in $dir/NAME.log
run() {
    local name=$1; shift
    rm -f "$dir"/rc.* "$dir"/pid.*
    local t0
    t0=$(now)
    timeout -k 5 "$limit" "$mpiexec" "$@" >"$dir/$name.log" 2>&1
    rc=$?
    secs=$(since "$t0")
}

# expect NAME STATUS TEXT...: the job ended within 10 s, both ranks with STATUS,
# and every TEXT is in the output
expect() {
    local name=$1 want=$2 r t ok=1; shift 2
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
        fail "$name: still running after $limit s (hang)"; tail -5 "$dir/$name.log"; return
    fi
    awk -v s="$secs" 'BEGIN { exit !(s <= 10) }' || { fail "$name: took $secs s"; ok=0; }
    for r in 0 1; do
        if [ ! -f "$dir/rc.$r" ]; then fail "$name: rank $r left no exit status"; ok=0
        elif [ "$(cat "$dir/rc.$r")" != "$want" ]; then
            fail "$name: rank $r exit status $(cat "$dir/rc.$r"), expected $want"; ok=0
        fi
    done
    for t in "$@"; do
        grep -qF -- "$t" "$dir/$name.log" || { fail "$name: no '$t' in:"; cat "$dir/$name.log"; ok=0; }
    done
    [ "${steps_ok:-0}" = 0 ] && grep -q "^step" "$dir/$name.log" && { fail "$name: a step ran"; ok=0; }
    [ "$ok" = 1 ] && echo "$name: both ranks exit $want in $secs s: $(grep -m1 -F -- "$1" "$dir/$name.log" | cut -c1-170)"
}

# mpmd NAME STATUS "RANK 0 FLAGS" "RANK 1 FLAGS" TEXT...
mpmd() {
    local name=$1 want=$2 f0 f1; shift 2
    read -ra f0 <<<"$1"; read -ra f1 <<<"$2"; shift 2
    run "$name" -n 1 "${wrap[@]}" "$train" "${common[@]}" "${f0[@]}" : \
        -n 1 "${wrap[@]}" "$train" "${common[@]}" "${f1[@]}"
    expect "$name" "$want" "$@"
}

# 1. the command line of one rank
mpmd "unknown flag on rank 1" 2 "" "--bogus" \
    "hyfi-train: rank 1: unknown flag '--bogus'" \
    "hyfi-train: rank 0: stopping: rank 1: unknown flag '--bogus'"
mpmd "unknown flag on rank 0" 2 "--bogus" "" \
    "hyfi-train: rank 0: unknown flag '--bogus'" \
    "hyfi-train: rank 1: stopping: rank 0: unknown flag '--bogus'"
mpmd "--lr -1 on rank 1" 2 "" "--lr -1" \
    "hyfi-train: rank 1: --lr '-1' is not valid" "hyfi-train: rank 0: stopping: rank 1: --lr '-1'"

# 2. the data of one rank: a one-class folder; a truncated file
python3 - "$dir" <<'PY'
import os, struct, sys, zlib
def png(path, v):
    raw = b"".join(b"\0" + bytes([v, 255 - v, v // 2] * 8) for _ in range(8))
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
    open(path, "wb").write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 8, 8, 8, 2, 0, 0, 0))
                           + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
base = sys.argv[1]
for d, classes in (("two", ["a", "b"]), ("one", ["a"])):
    for c in classes:
        os.makedirs(f"{base}/{d}/{c}")
        for i in range(4):
            png(f"{base}/{d}/{c}/{i}.png", 40 * i + (c == "b") * 20)
# a folder of data sets: what make_slides.py --format png,tiff-tiled writes
for fmt in ("png", "tiff-tiled"):
    for split in ("train", "val"):
        for c in ("a", "b"):
            os.makedirs(f"{base}/slides/{fmt}/{split}/{c}")
            png(f"{base}/slides/{fmt}/{split}/{c}/0.png", 50)
PY
folder=(--dataset folder --image-size 8 --model cnn --split-size 1)
run "one class on rank 1" -n 1 "${wrap[@]}" "$train" "${common[@]}" "${folder[@]}" \
    --datapath "$dir/two" : -n 1 "${wrap[@]}" "$train" "${common[@]}" "${folder[@]}" \
    --datapath "$dir/one"
expect "one class on rank 1" 2 "hyfi-train: rank 1: folder $dir/one has 1 class" \
    "hyfi-train: rank 0: stopping: rank 1: folder $dir/one has 1 class"
fm=/usr/share/datasets/fashion-mnist
if [ -f "$fm/train-images-idx3-ubyte.gz" ]; then
    mkdir -p "$dir/fm" && cp "$fm"/*.gz "$dir/fm/"
    zcat "$fm/train-images-idx3-ubyte.gz" | head -c 1000000 | gzip >"$dir/fm/train-images-idx3-ubyte.gz"
    fash=(--dataset fashion-mnist --model cnn --image-size 28 --split-size 1 --eval-batches 1)
    run "truncated data on rank 1" -n 1 "${wrap[@]}" "$train" "${common[@]}" "${fash[@]}" : \
        -n 1 "${wrap[@]}" "$train" "${common[@]}" "${fash[@]}" --datapath "$dir/fm"
    expect "truncated data on rank 1" 1 \
        "hyfi-train: rank 1: fashion-mnist: $dir/fm/train-images-idx3-ubyte.gz: truncated" \
        "hyfi-train: rank 0: stopping: rank 1: fashion-mnist: $dir/fm/train-images-idx3-ubyte.gz"
else
    echo "truncated data on rank 1: skipped (no $fm)"
fi

# 3. outputs of one rank
mpmd "--save on rank 1" 1 "" "--save $dir/m.safetensors" \
    "differs from rank 0 in --save (rank 1: $dir/m.safetensors; rank 0: (none))"
mpmd "--checkpoint-dir on rank 1" 1 "" "--checkpoint-dir $dir/ck" \
    "differs from rank 0 in --checkpoint-dir (rank 1: $dir/ck; rank 0: (none))"

# 4. writes that fail: /dev/full, a full file system
t0=$(now)
timeout -k 5 "$limit" "$train" "${common[@]}" --split-size 1 --metrics /dev/full \
    >"$dir/full1.log" 2>&1
rc=$?
if [ "$rc" = 1 ] && grep -q "^hyfi-train: --metrics /dev/full: write failed: No space left" "$dir/full1.log"
then echo "--metrics /dev/full, one process: exit 1 in $(since "$t0") s: $(grep -m1 "write failed" "$dir/full1.log" | cut -c1-120)"
else fail "--metrics /dev/full, one process: status $rc"; cat "$dir/full1.log"; fi
run "metrics-dev-full" -n 2 "${wrap[@]}" "$train" "${common[@]}" --metrics /dev/full
# (the first step runs: its line is the first write)
steps_ok=1 expect "metrics-dev-full" 1 "hyfi-train: rank 0: --metrics /dev/full: write failed: No space left" \
    "hyfi-train: rank 1: stopping: rank 0: --metrics /dev/full: write failed"
mkdir -p "$dir/tmpfs"
if [ "$(id -u)" = 0 ] && mount -t tmpfs -o size=64k tmpfs "$dir/tmpfs" 2>/dev/null; then
    mounted="$dir/tmpfs"
    dd if=/dev/zero of="$dir/tmpfs/fill" bs=4k count=15 2>/dev/null # leaves one page
    run "metrics-full-fs" -n 2 "${wrap[@]}" "$train" "${common[@]}" --steps 400 \
        --metrics "$dir/tmpfs/m.jsonl"
    # the metrics fill the last page within the first steps: the run stops there
    steps_ok=1 expect "metrics-full-fs" 1 "--metrics $dir/tmpfs/m.jsonl: write failed: No space left"
    umount "$dir/tmpfs" && mounted=""
else
    echo "--metrics on a full file system: skipped (cannot mount a tmpfs here)"
fi

# 5. flags without effect, a folder of data sets
for f in "--num-spatial-parts 4" "--swap-dir $dir/swap"; do
    read -ra ff <<<"$f"
    timeout -k 5 "$limit" "$train" "${common[@]}" --split-size 1 "${ff[@]}" >"$dir/flag.log" 2>&1
    rc=$?
    if [ "$rc" = 2 ] && grep -q "has no effect without" "$dir/flag.log"; then
        echo "$f alone: exit 2: $(grep -m1 "no effect" "$dir/flag.log" | cut -c1-140)"
    else fail "$f alone: status $rc"; cat "$dir/flag.log"; fi
done
timeout -k 5 "$limit" "$train" --dataset slides --datapath "$dir/slides" --model cnn --steps 1 \
    >"$dir/slides.log" 2>&1
rc=$?
if [ "$rc" != 0 ] && grep -q "$dir/slides/png holds train/ and val/ folders: it is a data set of its own" "$dir/slides.log" &&
   grep -q "give --datapath $dir/slides/png" "$dir/slides.log"; then
    echo "a folder of data sets: exit $rc: $(cut -c1-150 "$dir/slides.log" | head -1)..."
else fail "a folder of data sets: status $rc"; cat "$dir/slides.log"; fi

# 6. a rank that never reaches the start-up check: stopped before MPI starts,
# or hanging in its data (a FIFO nobody writes); --watchdog 5 ends the job
stuck() { # name, text wanted, rank 1's command...
    local name=$1 want=$2 t0 pid; shift 2
    rm -f "$dir"/pid.*
    t0=$(now)
    timeout -k 5 "$limit" "$mpiexec" -n 1 "$train" "${common[@]}" --watchdog 5 : -n 1 "$@" \
        >"$dir/stuck.log" 2>&1
    rc=$?
    secs=$(since "$t0")
    pid=$(cat "$dir/pid.1" 2>/dev/null)
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then fail "$name: still running after $limit s (hang)"
    elif [ "$rc" = 0 ] || ! grep -qF -- "$want" "$dir/stuck.log"; then
        fail "$name: status $rc, no '$want':"; cat "$dir/stuck.log"
    elif ! awk -v s="$secs" 'BEGIN { exit !(s <= 15) }'; then fail "$name: took $secs s"
    elif [ -n "$pid" ] && ! ends "$pid"; then fail "$name: rank 1 ($pid) outlived the job"
    else echo "$name: status $rc in $secs s: $(grep -m1 -F -- "$want" "$dir/stuck.log" | cut -c1-170)..."
    fi
}
# shellcheck disable=SC2016 # expanded by the rank's shell
stuck "rank 1 stopped before MPI starts" "MPI's start (MPI_Init) has waited 5 s" \
    bash -c 'echo $$ >"$0/pid.1"; kill -STOP $$; exec "$@"' "$dir" "$train" "${common[@]}"
mkdir -p "$dir/hang" && mkfifo "$dir/hang/train-images-idx3-ubyte"
# shellcheck disable=SC2016
stuck "rank 1 hanging in its data" "rank 1 has not reached the check that the ranks started alike" \
    bash -c 'echo $$ >"$0/pid.1"; exec "$@"' "$dir" "$train" "${common[@]}" --watchdog 5 \
    --dataset mnist --datapath "$dir/hang"

# 7. the launcher ends (its proxy killed, as a batch system's clean-up or a lost
# node's ssh session does) while rank 1 is stopped and rank 0 waits for it (no
# watchdog): neither rank outlives it
rm -f "$dir"/pid.*
# (exec: each wrapper's pid is its rank's, a child of the proxy as without it)
# shellcheck disable=SC2016 # expanded by the wrapper's shell
timeout -k 5 "$limit" "$mpiexec" -n 2 bash -c 'echo $$ >"$0/pid.$PMI_RANK"; exec "$@"' "$dir" \
    "$train" "${common[@]}" --steps 100000 --watchdog 0 >"$dir/orphan.log" 2>&1 &
job=$!
for _ in $(seq 1 300); do
    grep -q "^step 3 " "$dir/orphan.log" 2>/dev/null && [ -s "$dir/pid.1" ] && break
    sleep 0.1
done
r0=$(cat "$dir/pid.0" 2>/dev/null)
r1=$(cat "$dir/pid.1" 2>/dev/null)
proxy=$(ps -o ppid= -p "$r1" 2>/dev/null | tr -d ' ')
if [ -z "$r0" ] || [ -z "$r1" ] || [ -z "$proxy" ]; then
    fail "orphans: no training after 30 s"; kill "$job" 2>/dev/null
else
    kill -STOP "$r1"
    sleep 0.5
    kill -KILL "$proxy"
    if ends "$r1" && ends "$r0"; then
        echo "the launcher's proxy killed while rank 1 was stopped: both ranks are gone"
    else
        fail "orphans: rank 0 ($r0: $(ps -o stat= -p "$r0")) or the stopped rank 1 ($r1: \
$(ps -o stat= -p "$r1")) outlived the launcher"
        kill -KILL "$r0" "$r1" 2>/dev/null
    fi
    kill "$job" 2>/dev/null
fi
wait "$job" 2>/dev/null

echo "$SECONDS s in all"
[ "$fails" = 0 ] && echo "mpi_startup: ok"
exit $((fails > 0))

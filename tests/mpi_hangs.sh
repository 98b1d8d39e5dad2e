#!/bin/bash
# 'mpi_hangs': runs that used to hang under MPI end on every rank within
# seconds, with a message:
#   - an unwritable --metrics on 2 ranks (rank 0 alone writes it): every rank
#     exits with status 1, rank 0 names the file, rank 1 says it stops;
#   - ranks started with different --steps, --depth, --batch-size, --seed or
#     --lr (MPMD: mpiexec -n 1 ARGS : -n 1 OTHER ARGS): every rank exits with
#     status 1 and prints the message naming what differs (at start-up);
#   - a peer (rank 1, then rank 0) stopped with SIGSTOP during training: with
#     --watchdog 5 the other rank prints the watchdog's line and mpiexec ends
#     the job, the stopped rank included;
#   - and the watchdog does not fire in a run where nothing stops.
# Every mpiexec runs under `timeout`, so a regression fails instead of hanging.
# usage: mpi_hangs.sh HYFI_TRAIN MPIEXEC
set -u
train=${1:?usage: mpi_hangs.sh HYFI_TRAIN MPIEXEC}
mpiexec=${2:?usage: mpi_hangs.sh HYFI_TRAIN MPIEXEC}
export HYFI_CPU_THREADS=1 HYFI_LEND_MIN_BYTES=0
dir=$(mktemp -d)
stopped=""
alive() { ps -o stat= -p "$1" 2>/dev/null | grep -qv Z; } # a zombie is gone
ends() { # pid: gone within 10 s (mpiexec's SIGKILL may land a moment after it exits)
    for _ in $(seq 1 100); do alive "$1" || return 0; sleep 0.1; done
    return 1
}
# shellcheck disable=SC2317 # (the trap calls it)
cleanup() {
    # a rank left stopped by a failed watchdog case
    if [ -n "$stopped" ] && alive "$stopped"; then
        kill -KILL "$stopped" 2>/dev/null
    fi
    rm -rf "$dir"
}
trap cleanup EXIT
fails=0
fail() { echo "FAILED: $*"; fails=$((fails + 1)); }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
limit=60 # seconds for a case that must end "within seconds" (a hang hits it)
common=(--model resnet --depth 8 --image-size 16 --batch-size 8 --dataset synthetic
        --split-size 2 --steps 3 --print-freq 1)
# Each rank through a wrapper that records its own exit status in $dir/rc.RANK.
# shellcheck disable=SC2016 # expanded by the wrapper's shell
wrap=(bash -c '"$@"; rc=$?; echo $rc >"$0/rc.$PMI_RANK"; exit $rc' "$dir")

# run NAME MPIEXEC-ARGS...: the job's status in $rc, seconds in $secs, output in
# $dir/NAME.log
run() {
    local name=$1; shift
    rm -f "$dir"/rc.*
    local t0
    t0=$(now)
    timeout -k 5 "$limit" "$mpiexec" "$@" >"$dir/$name.log" 2>&1
    rc=$?
    secs=$(since "$t0")
}

# expect NAME WANT-TEXT COUNT: the job and both ranks ended with status 1
# before the limit, and WANT-TEXT is in the output COUNT times (-: any > 0).
expect() {
    local name=$1 want=$2 count=$3 r n
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
        fail "$name: still running after $limit s (hang)"; tail -5 "$dir/$name.log"; return
    fi
    [ "$rc" = 1 ] || fail "$name: mpiexec exit status $rc, expected 1"
    for r in 0 1; do
        if [ ! -f "$dir/rc.$r" ]; then fail "$name: rank $r left no exit status"
        elif [ "$(cat "$dir/rc.$r")" != 1 ]; then
            fail "$name: rank $r exit status $(cat "$dir/rc.$r"), expected 1"
        fi
    done
    n=$(grep -cF -- "$want" "$dir/$name.log")
    if [ "$n" = 0 ] || { [ "$count" != - ] && [ "$n" != "$count" ]; }; then
        fail "$name: '$want' printed $n times, expected ${count/-/some}:"
        cat "$dir/$name.log"; return
    fi
    echo "$name: both ranks exit 1 in $secs s: $(grep -m1 -F -- "$want" "$dir/$name.log")"
}

# 1. --metrics in a folder that does not exist, on 2 ranks: rank 0 (which
# writes it) names it, rank 1 stops with rank 0's message
run metrics -n 2 "${wrap[@]}" "$train" "${common[@]}" --metrics "$dir/no/such/dir/m.jsonl"
expect metrics "hyfi-train: rank 0: --metrics $dir/no/such/dir/m.jsonl: the folder \
$dir/no/such/dir does not exist" 1
grep -q "^hyfi-train: rank 1: stopping: rank 0: --metrics" "$dir/metrics.log" ||
    fail "metrics: rank 1 did not say why it stops"
grep -q "^step" "$dir/metrics.log" && fail "metrics: a step ran"

# 2. ranks started with different arguments: found at start-up, before the
# engine starts; both ranks print the message
mismatch() { # name, text wanted, rank 1's extra flags...
    local name=$1 want=$2; shift 2
    run "$name" -n 1 "${wrap[@]}" "$train" "${common[@]}" : \
        -n 1 "${wrap[@]}" "$train" "${common[@]}" "$@"
    expect "$name" "the ranks were started with different arguments: rank 1 differs from rank 0 \
in $want" 2
    grep -q "^step" "$dir/$name.log" && fail "$name: a step ran"
}
mismatch steps "--steps (rank 1: 4; rank 0: 3)" --steps 4
mismatch depth "--model and its flags (rank 1: resnet-20 v1" --depth 20
mismatch batch-size "--batch-size (rank 1: 16; rank 0: 8)" --batch-size 16
mismatch seed "--seed (rank 1: 7; rank 0: 42)" --seed 7
mismatch lr "--lr (rank 1: 0.100000001; rank 0: 0.0500000007)" --lr 0.1

# 3. a peer stopped during training: the watchdog of the other ends the job
long=("${common[@]}" --steps 100000 --watchdog 5)
stop_peer() { # the rank to stop (0 or 1); the other one's watchdog must fire
    local victim=$1 other=$((1 - $1)) name="stopped rank $1" job t1 want
    local -a r0=("$train") r1=("$train")
    # shellcheck disable=SC2016 # expanded by the wrapper's shell (exec: its pid is the rank's)
    if [ "$victim" = 0 ]; then r0=(bash -c 'echo $$ >"$0/pid"; exec "$@"' "$dir" "$train")
    else r1=(bash -c 'echo $$ >"$0/pid"; exec "$@"' "$dir" "$train"); fi
    rm -f "$dir/pid"
    timeout -k 5 "$limit" "$mpiexec" -n 1 "${r0[@]}" "${long[@]}" : -n 1 "${r1[@]}" "${long[@]}" \
        >"$dir/stop$victim.log" 2>&1 &
    job=$!
    for _ in $(seq 1 300); do # training (rank 0 printed its 3rd step)
        grep -q "^step 3 " "$dir/stop$victim.log" 2>/dev/null && [ -s "$dir/pid" ] && break
        sleep 0.1
    done
    grep -q "^step 3 " "$dir/stop$victim.log" || fail "$name: no training after 30 s"
    stopped=$(cat "$dir/pid" 2>/dev/null)
    t1=$(now)
    [ -n "$stopped" ] && kill -STOP "$stopped"
    wait "$job"
    rc=$?
    secs=$(since "$t1")
    # it waits in a step or in the loss's read, whichever the stop caught
    want="hyfi: rank $other of 2: watchdog: no progress for 5 s in "
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
        fail "$name: still running after $limit s (hang)"; tail -5 "$dir/stop$victim.log"
    elif [ "$rc" = 0 ]; then
        fail "$name: mpiexec exit status 0"
    elif ! grep -F "$want" "$dir/stop$victim.log" | grep -q "peer rank was probably stopped"; then
        fail "$name: no watchdog line ('$want'):"; grep -v "^step\|^Epoch" "$dir/stop$victim.log"
    elif ! ends "$stopped"; then
        fail "$name: rank $victim ($stopped) is still there 10 s after mpiexec ended"
    else
        echo "$name: job ended (status $rc) $secs s after SIGSTOP: $(grep -m1 -F "$want" \
"$dir/stop$victim.log" | cut -c1-150)..."
        awk -v s="$secs" 'BEGIN { exit !(s <= 30) }' || fail "$name: took $secs s with --watchdog 5"
    fi
    stopped=""
}
stop_peer 1
stop_peer 0

# 4. nothing stops: the same watchdog lets a whole run finish
run nostop -n 2 "${wrap[@]}" "$train" "${common[@]}" --steps 20 --watchdog 5
if [ "$rc" != 0 ] || grep -q watchdog "$dir/nostop.log"; then
    fail "no stop: exit status $rc with --watchdog 5:"; tail -5 "$dir/nostop.log"
else
    echo "no stop: $(grep -c '^step' "$dir/nostop.log") step lines, 20 steps on 2 ranks with \
--watchdog 5 in $secs s, status 0"
fi

echo "$(( SECONDS )) s in all"
[ "$fails" = 0 ] && echo "mpi_hangs: ok"
exit $((fails > 0))

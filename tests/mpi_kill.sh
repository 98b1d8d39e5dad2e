#!/bin/bash
# 'mpi_kill': a rank of hyfi-train killed with SIGKILL during training ends the
# whole job fast, with a message naming the rank:
#   - 2 ranks, rank 1 killed; 4 ranks, rank 2 killed; 4 ranks, rank 3 crashed
#     (SIGSEGV: named as a crash);
#   - mpiexec exits within 10 s of the kill (MPICH's mpiexec ends the other
#     ranks itself), with a non-zero status;
#   - the output holds "hyfi: rank K of N (pid P on HOST) died" (the engine's
#     death notice, engine/sentinel.c), P the killed process, and no such
#     line for another rank; mpiexec's own message names only P.
# Every mpiexec runs under `timeout`, so a regression fails instead of hanging.
# usage: mpi_kill.sh HYFI_TRAIN MPIEXEC
set -u
train=${1:?usage: mpi_kill.sh HYFI_TRAIN MPIEXEC}
mpiexec=${2:?usage: mpi_kill.sh HYFI_TRAIN MPIEXEC}
export HYFI_CPU_THREADS=1 HYFI_LEND_MIN_BYTES=0
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fails=0
fail() { echo "FAILED: $*"; fails=$((fails + 1)); }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
limit=60 # a hang hits it

kill_rank() { # ranks, the rank to kill (not 0), the signal (KILL, or SEGV: a crash)
    local np=$1 victim=$2 sig=$3 name="rank $2 of $1 (SIG$3)" log="$dir/kill$1$3.log"
    local job t1 pid secs rc
    rm -f "$dir"/pid.*
    # each rank records its pid (exec: the wrapper's pid is the rank's)
    # shellcheck disable=SC2016 # expanded by the wrapper's shell
    timeout -k 5 "$limit" "$mpiexec" -n "$np" bash -c 'echo $$ >"$0/pid.$PMI_RANK"; exec "$@"' \
        "$dir" "$train" --model resnet --depth 8 --image-size 16 --batch-size 8 \
        --dataset synthetic --split-size "$np" --steps 100000 --print-freq 1 >"$log" 2>&1 &
    job=$!
    for _ in $(seq 1 300); do # training (rank 0 printed its 3rd step)
        grep -q "^step 3 " "$log" 2>/dev/null && [ -s "$dir/pid.$victim" ] && break
        sleep 0.1
    done
    pid=$(cat "$dir/pid.$victim" 2>/dev/null)
    if ! grep -q "^step 3 " "$log" || [ -z "$pid" ]; then
        fail "$name: no training after 30 s"; kill "$job" 2>/dev/null; wait "$job"
        tail -5 "$log"; return
    fi
    t1=$(now)
    kill -"$sig" "$pid"
    wait "$job"
    rc=$?
    secs=$(since "$t1")
    local want="hyfi: rank $victim of $np (pid $pid on "
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
        fail "$name: still running after $limit s (hang)"; tail -5 "$log"; return
    fi
    [ "$sig" = KILL ] || want="$want.*it crashed with SIG$sig"
    [ "$rc" != 0 ] || fail "$name: mpiexec exit status 0"
    awk -v s="$secs" 'BEGIN { exit !(s <= 10) }' || fail "$name: mpiexec ended $secs s after the kill"
    if ! grep -q -- "$want" "$log"; then
        fail "$name: no line '$want...':"; grep -v "^step\|^Epoch" "$log"
    elif [ "$(grep -c "^hyfi: rank [0-9]* of $np (pid .*) died" "$log")" != 1 ]; then
        fail "$name: more than one rank named:"; grep "^hyfi: rank" "$log"
    else
        echo "$name killed: mpiexec ended $secs s later, status $rc: $(grep -m1 -- "$want" "$log")"
        grep -q "PID $pid RUNNING AT" "$log" && echo "  mpiexec: $(grep -m1 "PID $pid RUNNING AT" "$log" | tr -s '= ')"
    fi
}
kill_rank 2 1 KILL
kill_rank 4 2 KILL
kill_rank 4 3 SEGV

echo "$(( SECONDS )) s in all"
[ "$fails" = 0 ] && echo "mpi_kill: ok"
exit $((fails > 0))

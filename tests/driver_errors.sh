#!/bin/bash
# 'driver_errors': hyfi-train's answers to bad input (docs/user-guide.md).
#   - exit status: 2 for a bad command line, model or plan (the flags cannot
#     work), 1 for a run-time failure (a missing data file);
#   - --datapath with the synthetic data set (which reads no files) is refused;
#   - a folder data set with one class (a 1-way classifier) is refused;
#   - --metrics of a run killed with SIGKILL holds whole JSON lines only;
#   - --spatial-size tiling every stage (the head's too) names the --split-size
#     that works;
#   - memory messages print the sizes they compare differently, and name only
#     the fixes that lower the estimate;
#   - a misspelt flag is named with the closest known ones ("did you mean"),
#     a misspelt value with the closest valid ones; a count's message has no
#     bound no one means;
#   - --version prints hyfi's, StarPU's, oneDNN's and CUDA's (or that the build
#     has none) versions on stdout and exits 0 at once, MPI and StarPU not
#     started (under mpiexec: once, by the first rank).
# With MPIEXEC ('driver_errors_mpi'), on 2 ranks: an error every rank hits alike
# (command line, plan, the same missing data file) is printed once, by rank 0,
# with the same exit status (tests/mpi_startup.sh: errors of some ranks only).
# usage: driver_errors.sh HYFI_TRAIN [MPIEXEC]
set -u
train=${1:?usage: driver_errors.sh HYFI_TRAIN [MPIEXEC]}
mpiexec=${2:-}
export HYFI_CPU_THREADS=1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fails=0
small=(--model resnet --depth 8 --image-size 16 --batch-size 4 --steps 1)

# expect NAME STATUS PATTERN LINES -- COMMAND...: COMMAND exits with STATUS,
# and its stderr has LINES lines that match PATTERN (LINES -: at least one).
expect() {
    local name=$1 want=$2 pattern=$3 lines=$4
    shift 5
    timeout 120 "$@" >"$dir/out.log" 2>"$dir/err.log"
    local got=$? n bad=0
    n=$(grep -c -- "$pattern" "$dir/err.log")
    if [ "$lines" = - ]; then [ "$n" -ge 1 ] || bad=1; else [ "$n" = "$lines" ] || bad=1; fi
    if [ "$got" != "$want" ]; then
        echo "FAILED: $name: exit status $got, want $want"; cat "$dir/err.log"
        fails=$((fails + 1))
    elif [ "$bad" = 1 ]; then
        echo "FAILED: $name: $n lines match '$pattern', want $lines:"; cat "$dir/err.log"
        fails=$((fails + 1))
    else
        echo "ok: $name: exit $got: $(grep -m1 -- "$pattern" "$dir/err.log")"
    fi
}

# versions NAME LINES -- COMMAND...: COMMAND exits 0 within 20 s and its stdout
# has LINES lines "hyfi X.Y.Z", and StarPU's, oneDNN's and CUDA's lines alike.
versions() {
    local name=$1 lines=$2
    shift 3
    timeout 20 "$@" >"$dir/out.log" 2>"$dir/err.log"
    local got=$? bad=""
    [ "$got" = 0 ] || bad="exit status $got, want 0"
    for p in "^hyfi [0-9]+\.[0-9]+\.[0-9]+$" "^StarPU [0-9]+\.[0-9]+\.[0-9]+" \
             "^oneDNN [0-9]+\.[0-9]+\.[0-9]+" \
             "^(CUDA runtime [0-9]+\.[0-9]+, |CUDA: not in this build)"; do
        [ -n "$bad" ] && break
        n=$(grep -Ec -- "$p" "$dir/out.log")
        [ "$n" = "$lines" ] || bad="$n lines match '$p', want $lines"
    done
    if [ -n "$bad" ]; then
        echo "FAILED: $name: $bad:"; cat "$dir/out.log" "$dir/err.log"
        fails=$((fails + 1))
    else
        echo "ok: $name: $(tr '\n' ';' <"$dir/out.log")"
    fi
}

if [ -n "$mpiexec" ]; then
    versions "2 ranks: --version, once" 1 -- "$mpiexec" -n 2 "$train" --version
    # (b) 2 ranks: errors every rank hits alike are printed once, by rank 0
    # (same exit status); per-rank errors once per rank, with the rank.
    expect "2 ranks: unknown flag, once" 2 "unknown flag" 1 -- \
        "$mpiexec" -n 2 "$train" --bogus
    expect "2 ranks: misspelt flag, once, with the suggestion" 2 \
        "unknown flag '--splitsize' (did you mean --split-size?)$" 1 -- \
        "$mpiexec" -n 2 "$train" --splitsize 2
    expect "2 ranks: one stage on 2 ranks (plan), once" 2 "mpiexec -n 1" 1 -- \
        "$mpiexec" -n 2 "$train" "${small[@]}"
    expect "2 ranks: missing data file on every rank, once" 1 "^hyfi-train: mnist: .*not found" 1 -- \
        "$mpiexec" -n 2 "$train" --dataset mnist --datapath "$dir/none" --steps 1
    [ "$fails" = 0 ] && echo "driver_errors_mpi: ok"
    exit $((fails > 0))
fi

# (a) exit status
expect "unknown flag" 2 "unknown flag" 1 -- "$train" --bogus
# (g) a misspelt flag: the closest known flags, on the one line
expect "misspelt flag" 2 \
    "^hyfi-train: unknown flag '--data-paralel' (did you mean --data-parallel?)$" 1 -- \
    "$train" "${small[@]}" --data-paralel 2
expect "misspelt --flag=value" 2 \
    "unknown flag '--num-spatial-part' (did you mean --num-spatial-parts?)$" 1 -- \
    "$train" "${small[@]}" --num-spatial-part=4
expect "a flag's start" 2 \
    "unknown flag '--check' (did you mean --checkpoint-dir or --checkpoint-every?)$" 1 -- \
    "$train" "${small[@]}" --check x
expect "no flag close" 2 "^hyfi-train: unknown flag '--bogus'$" 1 -- "$train" --bogus
expect "a switch with a value" 2 "^hyfi-train: --dry-run takes no value" 1 -- \
    "$train" "${small[@]}" --dry-run=1
expect "one dash" 2 "flags start with -- (did you mean --batch-size?)$" 1 -- "$train" -batch-size 4
# a misspelt value: the closest valid ones, then all of them; "gpu" is cuda
expect "misspelt value" 2 \
    "^hyfi-train: --dataset 'fasion-mnist' is not known (did you mean fashion-mnist?); valid: " \
    1 -- "$train" "${small[@]}" --dataset fasion-mnist
expect "--device gpu" 2 "^hyfi-train: --device 'gpu' is not known (did you mean cuda?); valid: " \
    1 -- "$train" "${small[@]}" --device gpu
expect "no value close" 2 "^hyfi-train: --model 'xyzzy' is not known; valid: cnn, resnet," 1 -- \
    "$train" "${small[@]}" --model xyzzy
# a count without a useful upper bound says so, not "in 0..4611686018427387903"
expect "bad count" 2 "^hyfi-train: --steps '1e3' is not valid: expected a whole number, 0 or more$" \
    1 -- "$train" "${small[@]}" --steps 1e3
# (f) --version, also among other flags (even bad ones: nothing else is read)
versions "--version" 1 -- "$train" --version
versions "--version with other flags" 1 -- "$train" "${small[@]}" --bogus --version
expect "balance that does not add up (plan)" 2 "the balance sums to 2" 1 -- \
    "$train" "${small[@]}" --balance 1,1
expect "image the tiles do not divide (plan)" 2 "cannot be cut into 2 equal tiles" 1 -- \
    "$train" "${small[@]}" --image-size 17 --split-size 2 --spatial-size 1 \
    --num-spatial-parts 4
expect "missing data file (run time)" 1 "not found" 1 -- \
    "$train" --dataset mnist --datapath "$dir/none" --steps 1
expect "one stage tiled (flags)" 2 \
    "spatial-size 1 tiles the plan's only stage.*head.*use --split-size 2 " 1 -- \
    "$train" "${small[@]}" --spatial-size 1
expect "tiles without tiled stages, one stage" 2 \
    "Add --spatial-size 1 to tile .* with --split-size 2" 1 -- \
    "$train" "${small[@]}" --num-spatial-parts 4
# (h) memory messages: the sizes compared print differently (a plan of 3.1 MB
# against a limit of 3 MB read "needs 3 MB, above the limit of 3 MB"; against
# a node of 3 MB "0.0 GB more than the node's 0.0 GB"), and only the fixes that
# lower the estimate are named (one place: not --recompute stage, not one
# place per rank). The limit is this plan's estimate rounded down.
"$train" "${small[@]}" --mem-limit-mb 1 >/dev/null 2>"$dir/est.log"
est=$(grep -o "needs an estimated [0-9.]* MB" "$dir/est.log" | awk '{print $4}')
lim=${est%.*}
if [ -z "$est" ] || [ "$lim" -lt 1 ] 2>/dev/null; then
    echo "FAILED: no estimate in: $(cat "$dir/est.log")"; fails=$((fails + 1))
else
    expect "memory limit: sizes that differ" 1 \
        "needs an estimated [0-9.]* MB on rank 0 .*above the memory limit of $lim MB" 1 -- \
        "$train" "${small[@]}" --mem-limit-mb "$lim"
    need=$(grep -o "needs an estimated [0-9.]* MB" "$dir/err.log" | awk '{print $4}')
    awk -v a="$need" -v b="$lim" 'BEGIN { exit !(a + 0 > b + 0) }' ||
        { echo "FAILED: needs $need MB against a limit of $lim MB"; fails=$((fails + 1)); }
    if grep -q -- "--recompute stage\|one place per rank" "$dir/err.log"; then
        echo "FAILED: a fix that keeps as much is named:"; cat "$dir/err.log"
        fails=$((fails + 1))
    fi
    expect "node memory: sizes that differ" 1 "estimated [0-9.]* MB of host memory" 1 -- \
        env HYFI_PHYS_MEM_MB="$lim" "$train" "${small[@]}"
    sizes=$(grep -o "estimated [0-9.]* MB of host\|node's [0-9.]* MB" "$dir/err.log" |
            awk '{print $2}' | tr '\n' ' ')
    awk -v s="$sizes" 'BEGIN { split(s, v, " "); exit !(v[1] + 0 > v[2] + 0) }' ||
        { echo "FAILED: node memory figures: $sizes"; fails=$((fails + 1)); }
fi
# (d) --datapath with the synthetic data set
expect "--datapath with synthetic data" 2 "reads no files; pass --dataset" 1 -- \
    "$train" "${small[@]}" --datapath "$dir"
# (e) a folder with one class
mkdir -p "$dir/one/cats" "$dir/two/cats" "$dir/two/dogs"
python3 - "$dir/one/cats/a.png" "$dir/two/cats/a.png" "$dir/two/dogs/a.png" <<'PY'
import struct, sys, zlib
def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
w = h = 16
raw = b"".join(b"\0" + bytes((x * 16 + y) % 256 for x in range(w) for _ in range(3)) for y in range(h))
png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
       + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
for path in sys.argv[1:]:
    open(path, "wb").write(png)
PY
expect "one-class folder" 2 "needs at least 2" 1 -- \
    "$train" --model cnn --dataset folder --datapath "$dir/one" --batch-size 1 --steps 1
expect "two-class folder trains" 0 "^step 1 loss" 1 -- \
    "$train" --model cnn --dataset folder --datapath "$dir/two" --batch-size 1 --steps 1
# (c) --metrics of a killed run: whole lines only (the file is line-buffered;
# block-buffered, it stayed empty, then got 4096 bytes ending mid-line).
m="$dir/metrics.jsonl"
"$train" --model cnn --image-size 8 --batch-size 2 --steps 100000000 --print-freq 100000000 \
    --metrics "$m" >/dev/null 2>&1 &
pid=$!
for _ in $(seq 600); do [ -s "$m" ] && break; sleep 0.1; done
sleep 0.5
kill -KILL "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
if python3 - "$m" <<'PY'; then
import json, sys
data = open(sys.argv[1], "rb").read()
lines = data.split(b"\n")
ok = len(data) > 0 and data.endswith(b"\n")
for l in lines[:-1]:
    try:
        ok &= "step" in json.loads(l)
    except ValueError:
        ok = False
print("killed run: %d bytes, %d lines, last %r: %s" % (
    len(data), len(lines) - 1, lines[-2][-60:] if len(lines) > 1 else data[-60:],
    "whole lines" if ok else "BROKEN"))
sys.exit(0 if ok else 1)
PY
    echo "ok: --metrics of a killed run holds whole lines"
else
    echo "FAILED: --metrics of a killed run"; fails=$((fails + 1))
fi
[ "$fails" = 0 ] && echo "driver_errors: ok"
exit $((fails > 0))

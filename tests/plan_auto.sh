#!/bin/bash
# 'plan_auto': hyfi-train --plan auto (hyfi_plan_search, engine/plan_search.c).
#   - the plans --explain lists for machines this host is not (4 CPU ranks; 2
#     ranks of 2 GPUs) compile under StarPU-MPI's fake ranks, every rank of
#     them (--compile-only): the search returns only plans the engine accepts;
#   - plan flags given constrain the search (every plan listed has them);
#   - plans over the memory are pruned: under --mem-limit-mb every plan listed
#     fits it, faster ones over it are listed as such, and the pick compiles
#     under that limit; where only recomputing fits (ResNet-50 at 32,768² on
#     128 H100), a recompute plan is listed;
#   - --plan auto trains ResNet-8 at 32x32 in one process and on 2 ranks,
#     printing the chosen flags on one line;
#   - bad machine descriptions and flags are refused (exit 2; 1 for a missing
#     --plan-model file) naming the flag and the fix; a machine where nothing
#     fits says so.
# usage: plan_auto.sh HYFI_TRAIN MPIEXEC
set -u
train=${1:?usage: plan_auto.sh HYFI_TRAIN MPIEXEC}
mpiexec=${2:?usage: plan_auto.sh HYFI_TRAIN MPIEXEC}
export HYFI_CPU_THREADS=1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok   $*"; }
model=(--model resnet --depth 8 --image-size 32 --batch-size 8)

# the flags column of --explain's plans (not those over the memory)
plans() { awk '/^faster plans over/ {exit} /^ +[0-9]+ / {sub(/.*--batch-size/, "--batch-size"); print}' "$1"; }

# every plan listed compiles on every fake rank of an N-rank run
compile_all() { # NAME N EXPLAIN_FILE EXTRA...
  local name=$1 n=$2 file=$3 count=0
  shift 3
  while read -r flags; do
    [ -n "$flags" ] || continue
    count=$((count + 1))
    # shellcheck disable=SC2206
    local f=($flags)
    for ((r = 0; r < n; r++)); do
      if ! STARPU_MPI_FAKE_SIZE=$n STARPU_MPI_FAKE_RANK=$r timeout 120 "$mpiexec" -n 1 \
          "$train" "${model[@]:0:6}" "${f[@]}" "$@" --compile-only >"$dir/c.out" 2>&1 </dev/null; then
        fail "$name: rank $r of $n does not compile $flags"
        tail -3 "$dir/c.out"
        return
      fi
    done
  done < <(plans "$file")
  [ "$count" -gt 0 ] && ok "$name: $count plans compile on every one of $n fake ranks" ||
    fail "$name: no plan listed"
}

# 1. plans for machines this host is not
timeout 120 "$train" "${model[@]}" --plan auto --explain --plan-ranks 4 --plan-top 3 \
  >"$dir/cpu4" 2>&1 || fail "--explain on 4 CPU ranks: status $?"
compile_all "4 CPU ranks" 4 "$dir/cpu4"
timeout 120 "$train" "${model[@]}" --image-size 64 --plan auto --explain --plan-ranks 2 \
  --plan-gpus-per-rank 2 --plan-device v100 --plan-top 2 >"$dir/gpu" 2>&1 ||
  fail "--explain on 2 ranks of 2 V100: status $?"
grep -q "2 ranks (2 V100 GPUs each" "$dir/gpu" || fail "the GPU machine is not described"
model[5]=64
compile_all "2 ranks x 2 GPUs" 2 "$dir/gpu"
model[5]=32

# 2. constraints
timeout 120 "$train" "${model[@]}" --image-size 64 --plan auto --explain --plan-ranks 2 \
  --data-parallel 2 --recompute layer --plan-top 4 >"$dir/fixed" 2>&1 ||
  fail "--explain with constraints: status $?"
n=$(plans "$dir/fixed" | wc -l)
m=$(plans "$dir/fixed" | grep -c -- "--data-parallel 2 --recompute layer")
[ "$n" -gt 0 ] && [ "$n" = "$m" ] && ok "constraints: $n plans, each --data-parallel 2 --recompute layer" ||
  fail "constraints: $m of $n plans keep --data-parallel 2 --recompute layer"
timeout 120 "$train" "${model[@]}" --image-size 64 --plan auto --explain --spatial-size 1 \
  --num-spatial-parts 4 --plan-top 4 >"$dir/tiles" 2>&1 || fail "--explain with tiles: status $?"
n=$(plans "$dir/tiles" | wc -l)
m=$(plans "$dir/tiles" | grep -c -- "--spatial-size 1 --num-spatial-parts 4")
[ "$n" -gt 0 ] && [ "$n" = "$m" ] && ok "constraints: $n plans, each 1 stage in 4 tiles" ||
  fail "constraints: $m of $n plans keep --spatial-size 1 --num-spatial-parts 4"

# 3. memory: every plan listed within --mem-limit-mb, the faster ones over it named
big=(--model resnet --depth 20 --image-size 128 --batch-size 8)
timeout 120 "$train" "${big[@]}" --plan auto --explain --plan-top 4 --mem-limit-mb 300 \
  >"$dir/mem" 2>&1 || fail "--explain under --mem-limit-mb 300: status $?"
over=$(awk '/^faster plans over/ {on=1; next} on && /^ +- / {n++} END {print n+0}' "$dir/mem")
bad=$(awk '/^faster plans over/ {exit} /^ +[0-9]+ / {v = $6 + 0; if ($7 == "GB") v *= 1000; if (v > 300) n++} END {print n+0}' "$dir/mem")
listed=$(plans "$dir/mem" | wc -l)
[ "$listed" -gt 0 ] && [ "$bad" = 0 ] && [ "$over" -gt 0 ] &&
  ok "memory: $listed plans within 300 MB per rank, $over faster ones pruned" ||
  { fail "memory: $listed plans, $bad above 300 MB, $over pruned"; cat "$dir/mem"; }
# shellcheck disable=SC2207
pick=($(plans "$dir/mem" | head -1))
timeout 120 "$train" "${big[@]:0:6}" "${pick[@]}" --mem-limit-mb 300 --compile-only \
  >"$dir/c.out" 2>&1 && ok "memory: the pick compiles under the limit" ||
  { fail "memory: the pick ${pick[*]} is refused"; tail -3 "$dir/c.out"; }

# a machine where only recompute fits: ResNet-50 at 32,768² on 16 ranks of 8 H100 (80 GB)
# fits in 64 tiles holding every layer but the head, recomputed (29.3 GB a GPU;
# 100.5 GB without); the search must tile that deep and list a recompute plan
timeout 120 "$train" --model resnet --depth 50 --image-size 32768 --batch-size 1 \
  --num-classes 10 --plan auto --explain --plan-ranks 16 --plan-gpus-per-rank 8 \
  --plan-device h100 --plan-top 2 >"$dir/rc" 2>&1 || fail "--explain at 32,768²: status $?"
pick=$(plans "$dir/rc" | head -1)
case "$pick" in
  *"--recompute stage"* | *"--recompute layer"*) ok "memory: recompute where nothing else fits: ${pick:0:90}" ;;
  *) fail "memory: no recompute plan at 32,768² on 128 H100"; tail -4 "$dir/rc" ;;
esac

# 4. real runs
timeout 300 "$train" "${model[@]}" --steps 3 --plan auto >"$dir/run1" 2>&1 &&
  grep -q "^hyfi-train: plan auto: --batch-size" "$dir/run1" && grep -q "^summary:" "$dir/run1" &&
  ok "1 process: $(grep -o 'plan auto: .*' "$dir/run1" | cut -c1-100)" ||
  { fail "--plan auto in one process"; tail -5 "$dir/run1"; }
timeout 300 "$mpiexec" -n 2 "$train" "${model[@]}" --steps 3 --plan auto >"$dir/run2" 2>&1 &&
  [ "$(grep -c "^hyfi-train: plan auto:" "$dir/run2")" = 1 ] && grep -q "^summary:" "$dir/run2" &&
  ok "2 ranks: $(grep -o 'plan auto: .*' "$dir/run2" | cut -c1-100)" ||
  { fail "--plan auto on 2 ranks"; tail -5 "$dir/run2"; }

# 5. bad machines and flags: exit 2, the flag and the fix named
expect() { # NAME STATUS PATTERN -- ARGS...
  local name=$1 want=$2 pat=$3
  shift 4
  timeout 120 "$train" "${model[@]}" "$@" >"$dir/e.out" 2>&1
  local rc=$?
  if [ "$rc" = "$want" ] && grep -q -- "$pat" "$dir/e.out"; then ok "$name"
  else fail "$name: status $rc, expected $want and '$pat'"; cat "$dir/e.out"; fi
}
expect "--plan-ranks 0" 2 "--plan-ranks '0' is not valid" -- --plan auto --explain --plan-ranks 0
expect "--plan-device tpu" 2 "valid: cpu, v100, h100" -- --plan auto --explain --plan-ranks 2 \
  --plan-device tpu
expect "--plan-gpus-per-rank alone" 2 "needs --plan-ranks N" -- --plan auto --explain \
  --plan-gpus-per-rank 4
expect "--explain without --plan auto" 2 "needs --plan auto" -- --explain
expect "--plan-ranks without --explain" 2 "add --explain" -- --plan auto --plan-ranks 8
expect "--plan-model missing" 1 "--plan-model" -- --plan auto --explain --plan-model "$dir/none.txt"
expect "no plan fits" 2 "no plan of .* fits the memory" -- --plan auto --explain --plan-ranks 1 \
  --plan-gpus-per-rank 1 --plan-mem-gb 0.001 --image-size 128
expect "impossible constraints" 2 "matches the fixed settings" -- --plan auto --explain \
  --split-size 2 --spatial-size 2
[ "$fails" = 0 ] && echo "all passed" || echo "$fails failed"
exit $((fails > 0))

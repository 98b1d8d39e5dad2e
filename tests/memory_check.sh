#!/bin/bash
# 'memory_check': without StarPU's memory limit, a plan above the node's
# physical memory is refused at compile, on every rank, within seconds (it
# used to wait for memory forever):
#   ResNet-50 at 4096x4096 (about 200 GB) in one process;
#   ResNet v1-8 at 1024x1024 on 2 ranks with the node's memory given as 1 GB
#     (HYFI_PHYS_MEM_MB): both ranks end with the message;
#   the same plan with the node's memory given as 4 GB fits and trains a step.
# usage: memory_check.sh HYFI_TRAIN MPIEXEC
set -u
train=${1:?usage: memory_check.sh HYFI_TRAIN MPIEXEC}
mpiexec=${2:?usage: memory_check.sh HYFI_TRAIN MPIEXEC}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
unset STARPU_LIMIT_CPU_MEM
fails=0
refused() { # name, log, rc
    if [ "$3" = 0 ] || [ "$3" = 124 ]; then
        echo "FAILED: $1: exit status $3 (0: ran, 124: still running after the timeout)"
        tail -5 "$2"; fails=$((fails + 1)); return 1
    fi
    if ! grep -q "of host memory" "$2"; then
        echo "FAILED: $1: stopped without the memory message:"; tail -5 "$2"
        fails=$((fails + 1)); return 1
    fi
    echo "$1: exit $3: $(grep -m1 -o 'the plan needs.*GB;' "$2")"
}
start=$(date +%s)
timeout 120 "$train" --model resnet --depth 50 --dataset synthetic --image-size 4096 \
    --batch-size 2 --steps 1 >"$dir/r50.log" 2>&1
refused "ResNet-50 4096^2, one process" "$dir/r50.log" $?
echo "  ($(( $(date +%s) - start )) s)"

common=(--model resnet --depth 8 --dataset synthetic --image-size 1024 --batch-size 1
        --steps 1 --balance 3,2)
start=$(date +%s)
HYFI_PHYS_MEM_MB=1000 timeout 120 "$mpiexec" -n 2 "$train" "${common[@]}" \
    >"$dir/two.log" 2>&1
rc=$?
if refused "ResNet-8 1024^2 untiled, 2 ranks, 1 GB node" "$dir/two.log" $rc; then
    n=$(grep -c "of host memory" "$dir/two.log")
    echo "  ($(( $(date +%s) - start )) s; the message printed $n time(s))"
fi
if ! HYFI_PHYS_MEM_MB=4000 timeout 600 "$mpiexec" -n 2 "$train" "${common[@]}" \
        >"$dir/fits.log" 2>&1; then
    echo "FAILED: the plan on a 4 GB node:"; tail -5 "$dir/fits.log"
    fails=$((fails + 1))
else
    echo "ResNet-8 1024^2 untiled, 2 ranks, 4 GB node: $(grep -m1 '^step' "$dir/fits.log")"
fi
[ "$fails" = 0 ] && echo "memory_check: ok"
exit $((fails > 0))

#!/usr/bin/env bash
# End-to-end test: hyfi-train (path in $1) trains the small CNN for one epoch
# on the real Fashion-MNIST and must reach a test accuracy of at least 0.85
# (--min-acc X right after the path, or HYFI_E2E_MIN_ACC, overrides). Exit 77
# (meson's "skip") when the data set of Debian's dataset-fashion-mnist is not
# installed. Extra arguments go to hyfi-train (e.g. --precision bf16).
set -u
train=${1:?usage: e2e_fashion.sh PATH/TO/hyfi-train [--min-acc X] [hyfi-train flags...]}
shift
datadir=${HYFI_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
min_acc=${HYFI_E2E_MIN_ACC:-0.85}
if [ "${1:-}" = --min-acc ]; then
    min_acc=${2:?--min-acc needs a value}
    shift 2
fi

if [ ! -d "$datadir" ]; then
    echo "skip: $datadir not found (install Debian's dataset-fashion-mnist)"
    exit 77
fi
if [ ! -x "$train" ]; then
    echo "FAIL: $train is not an executable hyfi-train"
    exit 1
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/hyfi_e2e.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
metrics=$tmp/metrics.jsonl

# Recipe: one epoch of the small CNN at batch 64 with SGD (momentum 0.9, weight
# decay 5e-4) and a cosine learning rate from 0.1 to 0. The same recipe run
# with the ops' CPU kernels outside the engine reached 0.870-0.875 over 4
# seeds; at a constant lr 0.05 it ended near 0.79 (eval-mode batch norm lags
# weights that still move fast), hence the schedule.
"$train" --dataset fashion-mnist --datapath "$datadir" --num-epochs 1 --batch-size 64 \
    --lr 0.1 --lr-schedule cosine --momentum 0.9 --weight-decay 5e-4 --seed 42 \
    --print-freq 100 --metrics "$metrics" "$@"
rc=$?
if [ $rc -ne 0 ]; then
    echo "FAIL: hyfi-train exited with status $rc"
    exit 1
fi

# The summary is the last JSON line: {"summary":true,...,"test_accuracy":A}.
summary=$(grep '"summary":true' "$metrics" | tail -n 1)
if [ -z "$summary" ]; then
    echo "FAIL: no summary line in $metrics"
    exit 1
fi
echo "summary: $summary"
acc=$(printf '%s\n' "$summary" | sed -n 's/.*"test_accuracy":\([-0-9.eE+]*\).*/\1/p')
if [ -z "$acc" ]; then
    echo "FAIL: no numeric test_accuracy in the summary"
    exit 1
fi
if awk -v a="$acc" -v m="$min_acc" 'BEGIN { exit !(a + 0 >= m + 0) }'; then
    echo "ok: test accuracy $acc >= $min_acc"
    echo "1 passed, 0 failed"
    exit 0
fi
echo "FAIL: test accuracy $acc < $min_acc"
echo "0 passed, 1 failed"
exit 1

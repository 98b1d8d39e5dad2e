#!/bin/bash
# 'models_torch': hyfi-train --dry-run against the PyTorch twins of
# bench/torch_models.py (parameter counts and conv + fc FLOPs per image of
# every config in its COMPARE_CONFIGS). Needs PyTorch and torchvision for
# $HYFI_TORCH_PYTHON (default /usr/bin/python3, Debian's python3-torch and
# python3-torchvision); skipped (77) without them.
# usage: models_vs_torch.sh HYFI_TRAIN
set -u
hyfi_train=${1:?usage: models_vs_torch.sh HYFI_TRAIN}
py=${HYFI_TORCH_PYTHON:-/usr/bin/python3}
src=${HYFI_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
if ! "$py" -c 'import torch, torchvision' 2>/dev/null; then
    echo "skip: $py cannot import torch and torchvision (apt-get install python3-torch python3-torchvision)"
    exit 77
fi
exec "$py" "$src/bench/torch_models.py" --compare "$hyfi_train"

#!/bin/bash
# 'torch_export': safetensors files between hyfi and PyTorch (tests/torch_export.py
# says what is checked). Needs PyTorch, torchvision and safetensors for
# $HYFI_TORCH_PYTHON (default /usr/bin/python3; scripts/env.sh sets it to the
# venv of scripts/setup.sh); skipped (77) without them.
# usage: torch_export.sh HYFI_TRAIN TORCH_LOGITS
set -u
hyfi_train=${1:?usage: torch_export.sh HYFI_TRAIN TORCH_LOGITS}
torch_logits=${2:?usage: torch_export.sh HYFI_TRAIN TORCH_LOGITS}
py=${HYFI_TORCH_PYTHON:-/usr/bin/python3}
src=${HYFI_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
if ! "$py" -c 'import torch, torchvision, safetensors, numpy' 2>/dev/null; then
    echo "skip: $py cannot import torch, torchvision, safetensors and numpy" \
         "(scripts/setup.sh makes a venv with them and scripts/env.sh points" \
         "HYFI_TORCH_PYTHON at it; or apt-get install python3-torch python3-torchvision" \
         "and pip install safetensors)"
    exit 77
fi
exec "$py" "$src/tests/torch_export.py" "$hyfi_train" "$torch_logits"

#!/usr/bin/env bash
# The main job: set up a fresh machine, build hyfi and train on the real
# Fashion-MNIST data (Debian's dataset-fashion-mnist), reporting test accuracy.
# Extra arguments go to hyfi-train (see `hyfi-train --help`).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh"
bash "$root/scripts/build.sh" "$root/build"
# shellcheck source=env.sh
source "$root/scripts/env.sh"
export STARPU_HOME="${STARPU_HOME:-$root/build/starpu-home}"
# A short run of ResNet-20 (v1, CIFAR-style) on the real Fashion-MNIST with a
# cosine learning-rate schedule, then the test accuracy on the 10,000 test
# images (docs/results.md has the numbers). Later flags override these, e.g.
# `bash scripts/train.sh --model cnn --steps 0` for one epoch of the small CNN.
exec "$root/build/apps/hyfi-train" --dataset fashion-mnist --model resnet --depth 20 \
  --steps 400 --batch-size 64 --lr 0.1 --lr-schedule cosine "$@"

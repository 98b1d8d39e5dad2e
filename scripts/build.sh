#!/usr/bin/env bash
# Configure and build hyfi into a build folder (default: build/), after
# scripts/setup.sh. Extra arguments go to `meson setup`.
#   scripts/build.sh [BUILD_DIR] [meson options...]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=env.sh
source "$root/scripts/env.sh"
bdir="${1:-$root/build}"; shift || true
if [ ! -f "$bdir/build.ninja" ]; then
  meson setup "$bdir" "$root" --buildtype=release "$@" >/dev/null
fi
ninja -C "$bdir" >/dev/null || { ninja -C "$bdir"; exit 1; }
echo "[build] $bdir ready"

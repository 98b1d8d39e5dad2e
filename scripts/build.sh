#!/usr/bin/env bash
# Configure and build hyfi into a build folder (default: build/), after
# scripts/setup.sh (or scripts/setup-simgrid.sh for -Dsimulation=true).
# Extra arguments go to `meson setup`.
#   scripts/build.sh [BUILD_DIR] [meson options...]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bdir="${1:-$root/build}"; shift || true
# The simulation build (-Dsimulation=true) needs the SimGrid StarPU first on
# the search paths (scripts/env-simgrid.sh); every other build the real one.
case " $* " in
  *" -Dsimulation=true "*) source "$root/scripts/env-simgrid.sh" ;;
  *) source "$root/scripts/env.sh" ;;
esac
if [ ! -f "$bdir/build.ninja" ]; then
  log="$(mktemp)"
  meson setup "$bdir" "$root" --buildtype=release "$@" >"$log" 2>&1 ||
    { cat "$log"; rm -f "$log"; exit 1; }
  rm -f "$log"
fi
ninja -C "$bdir" >/dev/null || { ninja -C "$bdir"; exit 1; }
echo "[build] $bdir ready"

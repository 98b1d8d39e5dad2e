#!/usr/bin/env bash
# Run hyfi-train in simulation: N simulated ranks (StarPU-MPI over SMPI), each
# a node of the platform's network with the per-node machine of the
# performance models (docs/simulation.md). After scripts/setup-simgrid.sh and
#   source scripts/env-simgrid.sh; meson setup build-sim -Dsimulation=true; ninja -C build-sim
# Usage:
#   scripts/simulate.sh [-n RANKS] [--platform FILE] [--build DIR] [--] HYFI-TRAIN ARGS...
#     -n RANKS         simulated ranks (default 1), one per platform node
#     --platform FILE  SimGrid platform of the network (default platforms/epyc2.xml);
#                      its cluster's hosts must be named node-0, node-1, ...
#     --build DIR      the simulation build (default build-sim)
# Environment: STARPU_PERF_MODEL_DIR and STARPU_HOSTNAME (scripts/env-simgrid.sh:
# the repository's perfmodels/, machine epyc2-r1), STARPU_NCPU / STARPU_NCUDA (the
# simulated workers of each rank), HYFI_SIM_VERBOSE=1 (SimGrid's own messages).
# hyfi-train gets --divergence-ratio 0 and --watchdog 0: a simulation computes
# nothing, its losses are garbage.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=env-simgrid.sh
source "$root/scripts/env-simgrid.sh"
n=1 platform="$root/platforms/epyc2.xml" bdir="$root/build-sim"
while [ $# -gt 0 ]; do
  case "$1" in
    -n) n="$2"; shift 2 ;;
    --platform) platform="$2"; shift 2 ;;
    --build) bdir="$2"; shift 2 ;;
    --) shift; break ;;
    *) break ;;
  esac
done
prog="$bdir/apps/hyfi-train.so"
[ -f "$prog" ] || { echo "simulate: no $prog; build it: source scripts/env-simgrid.sh; meson setup $bdir -Dsimulation=true; ninja -C $bdir" >&2; exit 2; }
[ -f "$STARPU_PERF_MODEL_DIR/bus/$STARPU_HOSTNAME.platform.v4.xml" ] ||
  { echo "simulate: no performance models of machine '$STARPU_HOSTNAME' in $STARPU_PERF_MODEL_DIR (STARPU_HOSTNAME, STARPU_PERF_MODEL_DIR)" >&2; exit 2; }
# Each simulated rank's folded buffers are memory mappings (docs/simulation.md, "Memory per
# simulated rank"): some 850 per rank of the scaling study's plans, and Linux's default limit
# of 65,530 per process stops SimGrid past about 70 ranks ("Could not map folded virtual
# memory").
maps=$(cat /proc/sys/vm/max_map_count 2>/dev/null || echo 0)
if [ "$maps" -gt 0 ] && [ "$maps" -lt $((n * 1000)) ]; then
  echo "simulate: vm.max_map_count is $maps, and $n ranks may need some $((n * 1000)) memory" \
    "mappings; raise it: sudo sysctl -w vm.max_map_count=$((n * 2000 > 1048576 ? n * 2000 : 1048576))" >&2
fi
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
for ((i = 0; i < n; i++)); do echo "node-$i"; done > "$work/hosts"
platform="$(cd "$(dirname "$platform")" && pwd)/$(basename "$platform")"
# SimGrid prints a line per unfinished action at exit (harmless) and its
# configuration: kept only with HYFI_SIM_VERBOSE=1.
filter() { if [ "${HYFI_SIM_VERBOSE:-0}" = 1 ]; then cat; else
  grep -v -e 'ker_lmm/WARNING' -e '^\[0\.000000\] \[' -e 'simgrid_update_xml' -e '^$' \
    -e 'MPI_Init_thread level' || true; fi; }

set +e
starpu_smpirun -platform "$platform" -hostfile "$work/hosts" "$prog" "$@" \
  --divergence-ratio 0 --watchdog 0 2> >(filter >&2)
rc=$?
wait
exit $rc

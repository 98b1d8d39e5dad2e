# Environment for the simulation build (hyfi on StarPU + SimGrid, after
# scripts/setup-simgrid.sh). Usage: source scripts/env-simgrid.sh, then
#   bash scripts/build.sh build-sim -Dsimulation=true
#   starpu_smpirun -platform platforms/<net>.xml -hostfile <hosts> build-sim/apps/hyfi-train ...
# (docs/simulation.md). Performance models: the calibrated files in the
# repository's perfmodels/ (STARPU_PERF_MODEL_DIR), for the machine named by
# STARPU_HOSTNAME (default: epyc2-r1, this repository's 2-core calibration host
# as one rank uses it; perfmodels/README.md lists the machines).
# HYFI_SIMGRID_PREFIX: another SimGrid StarPU (scripts/setup-simgrid.sh
# --patched: $HYFI_DEPS/starpu-simgrid-patched).
HYFI_DEPS="${HYFI_DEPS:-/opt/hyfi-deps}"
hyfi_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
hyfi_sgp="${HYFI_SIMGRID_PREFIX:-$HYFI_DEPS/starpu-simgrid}"
export PKG_CONFIG_PATH="$hyfi_sgp/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export PATH="$hyfi_sgp/bin:$PATH"
export STARPU_PERF_MODEL_DIR="${STARPU_PERF_MODEL_DIR:-$hyfi_root/perfmodels/sampling}"
export STARPU_HOSTNAME="${STARPU_HOSTNAME:-epyc2-r1}"
export STARPU_SILENT="${STARPU_SILENT:-1}"
unset hyfi_root hyfi_sgp

#!/usr/bin/env bash
# Build a second StarPU 1.4, for simulation: StarPU on SimGrid (Debian's
# libsimgrid-dev, SimGrid 3.32) with StarPU-MPI over SimGrid's SMPI, into its
# own prefix $HYFI_DEPS/starpu-simgrid (the real StarPU of scripts/setup.sh in
# $HYFI_DEPS/starpu is left alone). Idempotent: a finished build is kept.
# Then: `source scripts/env-simgrid.sh` and
# `bash scripts/build.sh build-sim -Dsimulation=true` (docs/simulation.md).
#
# Same source as scripts/setup.sh: Debian's source package of StarPU (newest
# 1.4.x of sid, else trixie), fetched with apt-get source from the archive
# this machine already uses.
#
# Environment: HYFI_DEPS (default /opt/hyfi-deps), HYFI_SKIP_APT=1 (no apt).
#
# Every simulation build takes scripts/simgrid-patches/*.patch (SimGrid-only
# changes that leave the simulated times alone and save host time; each
# patch's header says what it changes).
#
# --patched: the same with scripts/patches/*.patch applied (SimGrid-only
# changes that halve a simulation's CPU time; each patch's header says what
# it changes), into $HYFI_DEPS/starpu-simgrid-patched. Use it with
# HYFI_SIMGRID_PREFIX=$HYFI_DEPS/starpu-simgrid-patched before sourcing
# scripts/env-simgrid.sh, in a build folder of its own (docs/simulation.md,
# "Simulation wall time").
#
# --gpus 8: a build whose simulated nodes may have up to 8 GPUs (nodes of 8
# H100, platforms/h100-cluster.xml), into $HYFI_DEPS/starpu-simgrid-gpu8:
# StarPU's limits are compile-time (at most 4 CUDA devices and 8 memory nodes
# in the default build, to keep a simulated rank's memory low; 8 GPUs need 16
# memory nodes). Use it with HYFI_SIMGRID_PREFIX=$HYFI_DEPS/starpu-simgrid-gpu8
# before sourcing scripts/env-simgrid.sh, in a build folder of its own.
set -euo pipefail
deps="${HYFI_DEPS:-/opt/hyfi-deps}"
patched=0 gpus=4
while [ $# -gt 0 ]; do
  case "$1" in
    --patched) patched=1; shift ;;
    --gpus) gpus="${2:-}"; shift 2 || true ;;
    *) echo "usage: setup-simgrid.sh [--patched] [--gpus 4|8]" >&2; exit 2 ;;
  esac
done
case "$gpus" in
  4) maxnodes=8 ;;
  8) maxnodes=16 ;;
  *) echo "setup-simgrid: --gpus $gpus: use 4 (the default) or 8" >&2; exit 2 ;;
esac
sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
log() { printf '[setup-simgrid] %s\n' "$*"; }

# shellcheck source=apt-missing.sh
source "$(dirname "${BASH_SOURCE[0]}")/apt-missing.sh"
apt_install_missing build-essential pkg-config libsimgrid-dev xsltproc xz-utils || true
sg_ver=$(pkg-config --modversion simgrid 2>/dev/null || true)
[ -n "$sg_ver" ] || { echo "setup-simgrid: SimGrid not found (pkg-config simgrid); install libsimgrid-dev" >&2; exit 1; }
case "$sg_ver" in
  3.17*|3.22*|4.*) log "warning: SimGrid $sg_ver is outside StarPU's tested range (3.11-3.36, not 3.17 or 3.22)" ;;
esac

prefix="$deps/starpu-simgrid"
# Bump when the configure options below change: an older build is then rebuilt.
# shellcheck source=starpu-source.sh
source "$(dirname "${BASH_SOURCE[0]}")/starpu-source.sh"
simgrid_patches_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/simgrid-patches"
recipe="simgrid-recipe-3-$(starpu_patches_sum)-$(cat "$simgrid_patches_dir"/*.patch | md5sum | cut -c1-8)"
patches=("$simgrid_patches_dir"/*.patch)
if [ "$patched" = 1 ]; then
  prefix="$deps/starpu-simgrid-patched"
  for p in "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"/patches/*.patch; do patches+=("$p"); done
  recipe="$recipe-patched-$(cat "${patches[@]}" | md5sum | cut -c1-8)"
fi
if [ "$gpus" != 4 ]; then
  prefix="$prefix-gpu$gpus"
  recipe="$recipe-gpu$gpus"
fi
if [ -f "$prefix/.hyfi-complete" ] && grep -q "$recipe" "$prefix/.hyfi-complete"; then
  log "StarPU (SimGrid) present in $prefix ($(cat "$prefix/.hyfi-complete"))"
  exit 0
fi
rm -rf "$prefix"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
starpu_source "$work"
for p in "${patches[@]+"${patches[@]}"}"; do
  log "applying $(basename "$p")"
  (cd "$src" && patch -s -p1 <"$p") || { echo "setup-simgrid: $p does not apply" >&2; exit 1; }
done
log "building StarPU $upstream on SimGrid $sg_ver into $prefix"
# --enable-simgrid with --enable-mpi: StarPU-MPI on SMPI (configure finds
# smpicc/smpicxx/smpirun and needs --disable-shared: every simulated rank is
# a thread of one process). No CUDA (configure refuses it with SimGrid:
# simulated GPUs come from STARPU_NCUDA and the performance models), no FxT
# (it would need a static -fPIC libfxt). maxcpus 64: otherwise this host's core
# count caps the simulated nodes' CPU workers. maxnodes 8 (RAM, up to 4
# GPUs, a disk): every data handle holds a per-memory-node table of
# per-memory-node requests, so the default 32 made each simulated rank hold
# ~3x the memory (docs/simulation.md, "Memory per simulated rank").
t0=$(date +%s)
(cd "$src" && ./configure -q --prefix="$prefix" --enable-simgrid --enable-mpi \
    --disable-shared --enable-static --with-pic --disable-cuda --without-fxt \
    --enable-maxcpus=64 --enable-maxnumanodes=4 --enable-maxbuffers=16 --enable-maxnodes="$maxnodes" \
    --enable-maxcudadev="$gpus" \
    --disable-opencl --disable-hip --disable-fortran --disable-build-doc \
    --disable-build-examples --disable-build-tests --disable-starpufft --disable-socl \
    --disable-openmp --disable-starpupy --disable-glpk --disable-hdf5 --disable-leveldb \
    --disable-mlr --disable-valgrind --enable-blas-lib=none >"$work/configure.log" 2>&1) \
  || { tail -40 "$work/configure.log" >&2; echo "setup-simgrid: StarPU configure failed" >&2; exit 1; }
t1=$(date +%s)
(cd "$src" && make -s -j"$(nproc)" >"$work/make.log" 2>&1 && make -s install >>"$work/make.log" 2>&1) \
  || { tail -40 "$work/make.log" >&2; echo "setup-simgrid: StarPU build failed" >&2; exit 1; }
t2=$(date +%s)
echo "$ver simgrid-$sg_ver $recipe" > "$prefix/.hyfi-complete"
log "StarPU $ver (SimGrid $sg_ver) installed in $prefix: configure $((t1 - t0)) s, build $((t2 - t1)) s"
log "use: source scripts/env-simgrid.sh"

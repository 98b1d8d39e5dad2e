#!/usr/bin/env bash
# Pack hyfi for a lent GPU machine (no internet, no apt, no StarPU/MPICH/oneDNN
# there; CUDA, cuBLAS and cuDNN come from its own python3 site-packages).
# Runs HERE, after scripts/setup.sh:
#   1. builds a release build with CUDA codelets in build-gpu/
#      (scripts/build.sh build-gpu -Dnvcc_arch=$HYFI_NVCC_ARCH, default sm_90);
#   2. stages libhyfi, apps/hyfi-train and the tests gpu-run.sh runs (the build
#      tree's layout, for their $ORIGIN RPATHs), StarPU's shared libraries and
#      tools, MPICH's mpiexec, every non-system non-CUDA shared library they
#      need (from ldd), UCX's plugins, the Fashion-MNIST files, all stripped;
#   3. writes .gpu-bundle/hyfi-gpu.tar.xz (xz -9) and prints its size.
# On the GPU machine: carry .gpu-bundle and run `bash scripts/gpu-run.sh`
# (docs/user-guide.md, "GPU machine"). Idempotent: the build is incremental
# and the archive is rewritten only when its contents changed.
#
# Environment: HYFI_NVCC_ARCH (sm_90), HYFI_BUNDLE_DATA=0 (leave the data
# out), HYFI_BUNDLE_MAX_MIB (60: above it the data is left out;
# the working tree, about 3 MiB, travels beside it within 64 MiB), HYFI_DEPS,
# HYFI_BUILD_JOBS (ninja jobs when build-gpu/ exists already: 1).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=env.sh
source "$root/scripts/env.sh"
log() { printf '[gpu-bundle] %s\n' "$*"; }
die() { printf '[gpu-bundle] error: %s\n' "$*" >&2; exit 1; }

arch="${HYFI_NVCC_ARCH:-sm_90}"
bdir="$root/build-gpu"
outdir="$root/.gpu-bundle"
out="$outdir/hyfi-gpu.tar.xz"
max_mib="${HYFI_BUNDLE_MAX_MIB:-60}"
starpu_prefix="$HYFI_DEPS/starpu"
datadir="${HYFI_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}"
ucx_plugins=/usr/lib/x86_64-linux-gnu/ucx

for t in readelf ldd strip tar xz sha256sum; do
  command -v "$t" >/dev/null || die "'$t' not found (binutils, tar, xz-utils, coreutils)"
done
[ -f "$starpu_prefix/.hyfi-complete" ] || die "no StarPU in $starpu_prefix; run scripts/setup.sh first"
grep -q -- '--enable-cuda' "$starpu_prefix/.hyfi-complete" \
  || die "StarPU in $starpu_prefix was built without CUDA ($(cat "$starpu_prefix/.hyfi-complete")); a GPU bundle needs a StarPU with CUDA (install nvcc, remove $starpu_prefix, rerun scripts/setup.sh)"

# ------------------------------------------------------------------ build
log "building $bdir (release, CUDA codelets, -arch=$arch)"
# An existing build folder is brought up to date with few jobs (shared
# machines); a fresh one gets ninja's default through scripts/build.sh.
if [ -f "$bdir/build.ninja" ]; then
  ninja -C "$bdir" -j "${HYFI_BUILD_JOBS:-1}" >/dev/null || { ninja -C "$bdir" -j 1; die "the build of $bdir failed"; }
fi
bash "$root/scripts/build.sh" "$bdir" -Dnvcc_arch="$arch" >/dev/null
# An existing build folder keeps its options: make sure of the ones we need.
cur_arch=$(meson introspect --buildoptions "$bdir" 2>/dev/null \
  | python3 -c 'import json,sys; print({o["name"]: o["value"] for o in json.load(sys.stdin)}.get("nvcc_arch", ""))' 2>/dev/null || true)
cur_type=$(meson introspect --buildoptions "$bdir" 2>/dev/null \
  | python3 -c 'import json,sys; print({o["name"]: o["value"] for o in json.load(sys.stdin)}.get("buildtype", ""))' 2>/dev/null || true)
if [ "$cur_arch" != "$arch" ] || [ "$cur_type" != release ]; then
  log "reconfiguring $bdir (nvcc_arch '$cur_arch' -> '$arch', buildtype '$cur_type' -> release)"
  meson configure "$bdir" -Dnvcc_arch="$arch" --buildtype=release >/dev/null
  bash "$root/scripts/build.sh" "$bdir" >/dev/null
fi
grep -q '#define HYFI_HAVE_CUDA 1' "$bdir/hyfi_config.h" \
  || die "$bdir was configured without CUDA codelets (nvcc, cuBLAS or cuDNN not found: see $bdir/meson-logs/meson-log.txt)"
[ -x "$bdir/tests/test_cuda_ops" ] || die "$bdir/tests/test_cuda_ops missing after the build"
log "build ready"

# ------------------------------------------------------------------ stage
stage="$(mktemp -d "${TMPDIR:-/tmp}/hyfi-gpu-stage.XXXXXX")"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/build-gpu/apps" "$stage/build-gpu/tests" "$stage/lib" "$stage/bin" "$stage/tests"

is_elf() { [ -f "$1" ] && [ ! -L "$1" ] && [ "$(head -c 4 "$1" | od -An -tx1 | tr -d ' \n')" = 7f454c46 ]; }
soname() { readelf -d "$1" 2>/dev/null | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p'; }

# hyfi: the library (with its symlinks), the driver, every test executable.
for f in "$bdir"/libhyfi.so*; do
  { [ -L "$f" ] || [ -f "$f" ]; } && cp -P "$f" "$stage/build-gpu/"
done
[ -f "$stage/build-gpu/libhyfi.so" ] || die "$bdir/libhyfi.so missing after the build"
cp "$bdir/apps/hyfi-train" "$stage/build-gpu/apps/"
# The tests that gpu-run.sh runs (the others need no GPU; leaving them out
# keeps room for the data).
ntests=0
for t in test_cuda_ops test_engine_cuda test_engine test_pipeline_exact; do
  f="$bdir/tests/$t"
  if is_elf "$f" && [ -x "$f" ]; then cp "$f" "$stage/build-gpu/tests/"; ntests=$((ntests + 1)); fi
done
cp "$root/tests/e2e_fashion.sh" "$stage/tests/"

# StarPU's libraries, named by their sonames, and its tools.
for f in "$starpu_prefix"/lib/*.so*; do
  [ -L "$f" ] && continue
  is_elf "$f" || continue
  n=$(soname "$f"); cp "$f" "$stage/lib/${n:-$(basename "$f")}"
done
for t in starpu_machine_display starpu_fxt_tool; do
  [ -x "$starpu_prefix/bin/$t" ] && cp "$starpu_prefix/bin/$t" "$stage/bin/"
done

# MPICH's launcher: mpiexec.hydra starts hydra_pmi_proxy from its own folder.
hydra=$(readlink -f "$(command -v mpiexec.hydra || echo /usr/bin/mpiexec.hydra)")
if [ -x "$hydra" ] && [ -x "$(dirname "$hydra")/hydra_pmi_proxy" ]; then
  cp "$hydra" "$stage/bin/mpiexec.hydra"
  cp "$(dirname "$hydra")/hydra_pmi_proxy" "$stage/bin/"
  ln -s mpiexec.hydra "$stage/bin/mpiexec"
else
  log "warning: MPICH's mpiexec.hydra/hydra_pmi_proxy not found; the bundle has no mpiexec"
fi

# UCX's transport plugins: UCX looks for them in <folder of libucs>/ucx.
if [ -d "$ucx_plugins" ]; then
  mkdir -p "$stage/lib/ucx"
  for f in "$ucx_plugins"/*.so*; do
    [ -L "$f" ] && continue
    is_elf "$f" || continue
    n=$(soname "$f"); cp "$f" "$stage/lib/ucx/${n:-$(basename "$f")}"
  done
fi

# Every shared library that ldd finds for the staged files, except the C/C++
# runtime (on every Linux machine) and CUDA's (the GPU machine has its own).
is_system() {
  case "$1" in
    linux-vdso.so*|linux-gate.so*|ld-linux*.so*|libc.so*|libm.so*|libmvec.so*|libpthread.so*|\
    libdl.so*|librt.so*|libresolv.so*|libutil.so*|libanl.so*|libnsl.so*|libBrokenLocale.so*|\
    libnss_*|libthread_db.so*|libstdc++.so*|libgcc_s.so*) return 0 ;;
  esac
  return 1
}
is_cuda() {
  case "$1" in
    libcuda.so*|libcudart.so*|libcublas.so*|libcublasLt.so*|libcudnn*.so*|libcusolver*.so*|\
    libcusparse*.so*|libcufft*.so*|libcurand.so*|libnvJitLink.so*|libnvrtc*.so*|libnccl.so*|\
    libnvToolsExt.so*|libnvidia-*.so*|libcupti.so*|libnvblas.so*|libnvjpeg.so*|libnpp*.so*) return 0 ;;
  esac
  return 1
}
declare -A seen=()
missing=()
# ldd lists the whole closure, so one pass over the staged files (the UCX
# plugins included) finds every library.
while IFS= read -r -d '' f; do
  is_elf "$f" || continue
  while read -r name arrow path _; do
    [ "$arrow" = "=>" ] || continue
    is_system "$name" && continue
    is_cuda "$name" && continue
    case "$name" in libhyfi.so*) continue ;; esac
    [ -n "${seen[$name]:-}" ] && continue
    if [ "$path" = "not" ]; then missing+=("$name (needed by ${f#"$stage"/})"); seen[$name]=1; continue; fi
    seen[$name]=1
    [ -e "$stage/lib/$name" ] || [ -e "$stage/lib/ucx/$name" ] && continue
    cp -L "$path" "$stage/lib/$name"
  done < <(LD_LIBRARY_PATH="$stage/lib:$LD_LIBRARY_PATH" ldd "$f" 2>/dev/null || true)
done < <(find "$stage" -type f -print0)
[ ${#missing[@]} -eq 0 ] || die "libraries not found here: ${missing[*]}"

# Strip the copies (never the originals).
nstrip=0
while IFS= read -r -d '' f; do
  is_elf "$f" || continue
  chmod u+w "$f"
  if strip --strip-unneeded "$f" 2>/dev/null; then nstrip=$((nstrip + 1)); else log "warning: could not strip ${f#"$stage"/}"; fi
done < <(find "$stage" -type f -print0)
log "staged: libhyfi, hyfi-train, $ntests test executables, $(find "$stage/lib" -maxdepth 1 -name '*.so*' | wc -l) libraries, $(ls "$stage/bin" | wc -l) tools; $nstrip files stripped"

# The data of tests/e2e_fashion.sh (already gzip'ed: xz gains nothing on it).
with_data=0
if [ "${HYFI_BUNDLE_DATA:-1}" != 0 ]; then
  if ls "$datadir"/*.gz >/dev/null 2>&1; then
    mkdir -p "$stage/data/fashion-mnist"
    cp "$datadir"/*.gz "$stage/data/fashion-mnist/"
    with_data=1
  else
    log "note: $datadir not found (Debian's dataset-fashion-mnist); the bundle has no data"
  fi
else
  log "note: HYFI_BUNDLE_DATA=0: leaving the data out"
fi

{
  echo "hyfi GPU bundle"
  echo "source: $(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)"
  echo "nvcc_arch: $arch"
  echo "starpu: $(cat "$starpu_prefix/.hyfi-complete")"
  echo "host: $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME"), glibc $(ldd --version 2>/dev/null | head -1 | awk '{print $NF}')"
  echo "needs from the GPU machine: the NVIDIA driver (libcuda), CUDA 13 libraries cudart, cublas, cublasLt, cusolver, cusparse, nvJitLink, and cuDNN 9"
  echo "files:"
  (cd "$stage" && find . \( -type f -o -type l \) | sort | sed 's|^\./|  |')
} > "$stage/MANIFEST.txt"

# ------------------------------------------------------------------ pack
mkdir -p "$outdir"
pack() {  # pack STAGE -> $out, unless the same contents are already packed
  local sum
  sum=$( (cd "$stage" && find . \( -type f -o -type l \) | LC_ALL=C sort | while read -r p; do
           if [ -L "$p" ]; then echo "link $p $(readlink "$p")"; else echo "file $p $(sha256sum < "$p" | cut -c1-64)"; fi
         done) | sha256sum | cut -c1-64)
  if [ -f "$out" ] && [ "$(cat "$outdir/hyfi-gpu.contents" 2>/dev/null)" = "$sum" ]; then
    log "archive up to date (same contents)"
    return
  fi
  log "compressing (xz -9, one thread; a few minutes)"
  tar -C "$stage" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cf - . \
    | xz -9 -T1 -c > "$out.tmp"
  mv -f "$out.tmp" "$out"
  echo "$sum" > "$outdir/hyfi-gpu.contents"
}
pack
size=$(stat -c %s "$out")
if [ "$with_data" = 1 ] && [ "$size" -gt $((max_mib * 1024 * 1024)) ]; then
  log "warning: $((size / 1048576)) MiB with the data is over $max_mib MiB: leaving the data out"
  rm -rf "$stage/data"
  sed -i '/data\/fashion-mnist/d' "$stage/MANIFEST.txt"
  with_data=0
  pack
  size=$(stat -c %s "$out")
fi
rm -f "$out.tmp"
mib=$(awk -v s="$size" 'BEGIN { printf "%.1f", s / 1048576 }')
log "bundle ${out#"$root"/}: $mib MiB ($size bytes), $( [ "$with_data" = 1 ] && echo "with" || echo "WITHOUT") the Fashion-MNIST data"
[ "$size" -le $((61 * 1024 * 1024)) ] || log "warning: over 61 MiB: with the working tree it may not fit the 64 MiB that a run can carry"
log "on the GPU machine: carry '.gpu-bundle' and run: bash scripts/gpu-run.sh [tests|train|all]"

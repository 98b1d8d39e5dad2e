#!/usr/bin/env bash
# Run hyfi's CUDA checks on a lent GPU machine from the bundle that
# scripts/gpu-bundle.sh made (.gpu-bundle/hyfi-gpu.tar.xz, carried along).
# Runs THERE, from the repository root:
#   bash scripts/gpu-run.sh [tests|train|all]      (default: all)
#     tests: build-gpu/tests/test_cuda_ops, test_engine, test_engine_cuda
#     train: hyfi-train --device cuda on synthetic data (30 steps), then one
#            epoch on the bundled Fashion-MNIST (tests/e2e_fashion.sh: test
#            accuracy >= 0.85)
# Needs no StarPU, MPICH or oneDNN there (the bundle has them); takes CUDA,
# cuBLAS and cuDNN from python3's site-packages/nvidia/*/lib (pip's
# nvidia-cuda-runtime, nvidia-cublas, nvidia-cudnn-cu13, ...), then
# /usr/local/cuda/lib64. Each step's output goes to $OUT/<step>.log when OUT is
# set (else to a folder that is printed); the last line is "N passed, N failed";
# the exit status is 0 when nothing failed.
#
# A CUDA test that skips (exit 77) counts as skipped without a visible GPU and
# as failed when nvidia-smi lists one. Environment: HYFI_GPU_BUNDLE (the
# archive), HYFI_GPU_DIR (unpack there, kept; else a temporary folder, removed),
# HYFI_GPU_STEP_TIMEOUT (seconds per step, 300).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
log() { printf '[gpu-run] %s\n' "$*"; }
die() { printf '[gpu-run] error: %s\n' "$*" >&2; exit 2; }
usage() { sed -n '5,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

what="${1:-all}"
case "$what" in
  tests|train|all) ;;
  -h|--help) usage; exit 0 ;;
  *) usage >&2; die "unknown selection '$what' (tests, train or all)" ;;
esac
bundle="${HYFI_GPU_BUNDLE:-$root/.gpu-bundle/hyfi-gpu.tar.xz}"
step_timeout="${HYFI_GPU_STEP_TIMEOUT:-300}"
[ -f "$bundle" ] || die "no bundle at $bundle: run 'bash scripts/gpu-bundle.sh' on the development machine and carry '.gpu-bundle'"

# ------------------------------------------------------------------ unpack
work="$(mktemp -d "${TMPDIR:-/tmp}/hyfi-gpu-work.XXXXXX")" || die "mktemp failed"
if [ -n "${HYFI_GPU_DIR:-}" ]; then
  dest="$HYFI_GPU_DIR"
  if [ -d "$dest" ] && [ -n "$(ls -A "$dest" 2>/dev/null)" ] && [ ! -f "$dest/MANIFEST.txt" ]; then
    die "HYFI_GPU_DIR=$dest is neither empty nor an unpacked bundle; not touching it"
  fi
  rm -rf "$dest"
  mkdir -p "$dest" || die "cannot create $dest"
  dest="$(cd "$dest" && pwd)"
  trap 'rm -rf "$work"' EXIT
else
  dest="$work/bundle"
  mkdir -p "$dest"
  trap 'rm -rf "$work"' EXIT
fi
log "unpacking ${bundle#"$root"/} into $dest"
if command -v xz >/dev/null 2>&1; then
  tar -xJf "$bundle" -C "$dest" || die "could not unpack $bundle"
else
  python3 - "$bundle" "$dest" <<'EOF' || die "could not unpack $bundle (no xz; python3's tarfile failed)"
import sys, tarfile
with tarfile.open(sys.argv[1], "r:xz") as tf:
    if hasattr(tarfile, "fully_trusted_filter"):
        tf.extractall(sys.argv[2], filter="fully_trusted")
    else:
        tf.extractall(sys.argv[2])
EOF
fi
[ -x "$dest/build-gpu/apps/hyfi-train" ] || die "the bundle has no build-gpu/apps/hyfi-train"

if [ -n "${OUT:-}" ]; then
  logdir="$OUT"
else
  logdir="$(mktemp -d "${TMPDIR:-/tmp}/hyfi-gpu-logs.XXXXXX")"
fi
mkdir -p "$logdir" "$work/tmp" "$work/starpu-home"
log "logs in $logdir"

# ------------------------------------------------------------------ library path
# The bundle's libraries first, then the CUDA libraries of python3's nvidia
# wheels (site-packages/nvidia/<pkg>/lib, nvidia/cu13/lib for CUDA 13 wheels),
# then the CUDA toolkit and the driver's folders.
nv_roots=()
pys=()
command -v python3 >/dev/null 2>&1 && pys+=("$(command -v python3)")
for p in /opt/*/.venv/bin/python3 /usr/local/bin/python3 /usr/bin/python3; do
  [ -x "$p" ] && pys+=("$p")
done
for py in "${pys[@]}"; do
  while IFS= read -r d; do
    [ -n "$d" ] && [ -d "$d" ] && nv_roots+=("$d")
  done < <("$py" -c 'import nvidia; print("\n".join(nvidia.__path__))' 2>/dev/null)
  [ ${#nv_roots[@]} -gt 0 ] && break
done
if [ ${#nv_roots[@]} -eq 0 ]; then
  for d in /opt/*/.venv/lib/python3*/site-packages/nvidia /usr/local/lib/python3*/dist-packages/nvidia \
           /usr/local/lib/python3*/site-packages/nvidia /usr/lib/python3/dist-packages/nvidia \
           "${HOME:-/nonexistent}"/.local/lib/python3*/site-packages/nvidia; do
    [ -d "$d" ] && nv_roots+=("$d")
  done
fi
ldpath="$dest/lib:$dest/lib/ucx"  # lib/ucx: UCX's plugins need each other
declare -A in_path=()
add_dir() {
  [ -d "$1" ] || return 0
  local d; d="$(cd "$1" && pwd -P)"
  [ -n "${in_path[$d]:-}" ] && return 0
  in_path[$d]=1; ldpath="$ldpath:$d"
}
for r in "${nv_roots[@]}"; do
  for d in "$r"/*/lib "$r"/*/lib64; do
    ls "$d"/lib*.so* >/dev/null 2>&1 && add_dir "$d"
  done
done
add_dir /usr/local/cuda/lib64
add_dir /usr/local/nvidia/lib64
add_dir /usr/local/nvidia/lib
[ -n "${LD_LIBRARY_PATH:-}" ] && ldpath="$ldpath:$LD_LIBRARY_PATH"

# Only hyfi's programs get this environment (the bundle's libraries are
# Debian 12's: not for this machine's own tools).
runenv=(env "LD_LIBRARY_PATH=$ldpath" "PATH=$dest/bin:$PATH" "STARPU_HOME=$work/starpu-home"
        "STARPU_SILENT=1" "HYFI_SOURCE_DIR=$root" "TMPDIR=$work/tmp" "UCX_MODULE_DIR=$dest/lib/ucx"
        "HYFI_FASHION_MNIST_DIR=$dest/data/fashion-mnist")

# ------------------------------------------------------------------ machine
machine_log="$logdir/machine.log"
gpu=no
{
  echo "== bundle"; sed -n '1,6p' "$dest/MANIFEST.txt"
  echo "== nvidia roots: ${nv_roots[*]:-none found}"
  echo "== LD_LIBRARY_PATH for hyfi: $ldpath"
  echo "== nvidia-smi -L"
} > "$machine_log"
if command -v nvidia-smi >/dev/null 2>&1; then
  smi=$(nvidia-smi -L 2>&1); echo "$smi" >> "$machine_log"
  printf '%s\n' "$smi"
  grep -q '^GPU [0-9]' <<<"$smi" && gpu=yes
else
  echo "nvidia-smi not found" >> "$machine_log"
  log "nvidia-smi not found"
  ls /dev/nvidia0 >/dev/null 2>&1 && gpu=unknown
fi
echo "== starpu_machine_display" >> "$machine_log"
smd=$(timeout -k 10 300 "${runenv[@]}" starpu_machine_display 2>&1); smd_rc=$?
printf '%s\n' "$smd" >> "$machine_log"
ncuda=$(sed -n 's/^\([0-9][0-9]*\) CUDA worker.*/\1/p' <<<"$smd" | head -1)
grep -q '^No CUDA worker' <<<"$smd" && ncuda=0
[ "$smd_rc" = 0 ] || ncuda="unknown (starpu_machine_display exited $smd_rc; see machine.log)"
log "GPU visible: $gpu; StarPU CUDA workers: ${ncuda:-unknown}"
[ "$gpu" = yes ] && [ "$ncuda" = 0 ] && log "warning: a GPU is visible but StarPU found no CUDA worker (driver or library problem? see $machine_log)"

# ------------------------------------------------------------------ steps
passed=0; failed=0; skipped=0; results=()
record() {  # record STATUS NAME DETAIL
  results+=("$(printf '%-4s %-16s %s' "$1" "$2" "$3")")
  case "$1" in PASS) passed=$((passed + 1)) ;; FAIL) failed=$((failed + 1)) ;; SKIP) skipped=$((skipped + 1)) ;; esac
}
# The libraries: every bundled program and library must find all it needs.
libcheck() {
  local f miss=""
  echo "== libraries (ldd with the path above)"
  while IFS= read -r -d '' f; do
    [ "$(head -c 4 "$f" | od -An -tx1 | tr -d ' \n')" = 7f454c46 ] || continue
    local nf
    nf=$("${runenv[@]}" ldd "$f" 2>&1 | awk '/not found/ {print $1}' | sort -u | tr '\n' ' ')
    [ -n "$nf" ] && miss="$miss ${f#"$dest"/}: $nf;"
  done < <(find "$dest/build-gpu" "$dest/lib" "$dest/bin" -type f -print0)
  for n in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcudnn.so.9 libcusolver.so.12 libcusparse.so.12 libnvJitLink.so.13; do
    echo "$n => $("${runenv[@]}" ldd "$dest/lib/libstarpu-1.4.so.9" "$dest/build-gpu/libhyfi.so" 2>/dev/null \
                   | awk -v n="$n" '$1 == n {print $3; exit}')"
  done
  # The driver's libcuda is loaded by cudart at run time (dlopen), not linked.
  local cu="" d ldc
  for d in ${ldpath//:/ }; do
    [ -e "$d/libcuda.so.1" ] && { cu="$d/libcuda.so.1"; break; }
  done
  ldc=$(command -v ldconfig || echo /sbin/ldconfig)
  [ -n "$cu" ] || cu=$("$ldc" -p 2>/dev/null | awk '$1 == "libcuda.so.1" {print $NF; exit}')
  echo "libcuda.so.1 (driver) => ${cu:-not found}"
  if [ -n "$miss" ]; then echo "MISSING:$miss"; return 1; fi
  echo "all found"
}
if libcheck >> "$machine_log" 2>&1; then
  record PASS libraries "every bundled file finds its libraries"
else
  record FAIL libraries "missing libraries: see machine.log"
  grep MISSING "$machine_log"
fi

run_step() {  # run_step NAME KIND CMD...   (KIND: cuda or plain)
  local name="$1" kind="$2"; shift 2
  local lf="$logdir/$name.log" t0 rc
  echo
  log "=== $name: $*"
  t0=$(date +%s)
  timeout -k 10 "$step_timeout" "${runenv[@]}" "$@" 2>&1 | tee "$lf"
  rc=${PIPESTATUS[0]}
  local secs=$(( $(date +%s) - t0 ))
  if [ "$rc" = 0 ]; then
    record PASS "$name" "${secs}s"
  elif [ "$rc" = 77 ] && [ "$kind" = cuda ] && [ "$gpu" = yes ]; then
    record FAIL "$name" "skipped (exit 77) although nvidia-smi lists a GPU, ${secs}s"
  elif [ "$rc" = 77 ]; then
    record SKIP "$name" "exit 77 (no usable GPU), ${secs}s"
  elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    record FAIL "$name" "timed out after ${step_timeout}s"
  else
    record FAIL "$name" "exit $rc, ${secs}s"
  fi
  echo "[gpu-run] $name: exit $rc after ${secs}s" >> "$lf"
}
skip_step() { record SKIP "$1" "$2"; log "=== $1: skipped: $2"; }

B="$dest/build-gpu"
if [ "$what" = tests ] || [ "$what" = all ]; then
  run_step cuda_ops cuda "$B/tests/test_cuda_ops"
  run_step engine plain "$B/tests/test_engine"
  if [ -x "$B/tests/test_engine_cuda" ]; then
    run_step engine_cuda cuda "$B/tests/test_engine_cuda"
  fi
fi
if [ "$what" = train ] || [ "$what" = all ]; then
  if [ "$gpu" = no ]; then
    skip_step train_synthetic "no GPU visible"
    skip_step train_fashion "no GPU visible"
  else
    run_step train_synthetic cuda "$B/apps/hyfi-train" --device cuda --dataset synthetic \
      --steps 30 --batch-size 64 --print-freq 10 -v
    if ls "$dest"/data/fashion-mnist/*.gz >/dev/null 2>&1; then
      run_step train_fashion cuda bash "$dest/tests/e2e_fashion.sh" "$B/apps/hyfi-train" --device cuda
    else
      skip_step train_fashion "the bundle has no Fashion-MNIST data (see gpu-bundle.sh's output)"
    fi
  fi
fi

# ------------------------------------------------------------------ summary
{
  echo
  echo "== hyfi GPU run ($what): GPU visible: $gpu, StarPU CUDA workers: ${ncuda:-unknown}"
  printf '%s\n' "${results[@]}"
  [ "$skipped" = 0 ] || echo "($skipped skipped)"
  echo "$passed passed, $failed failed"
} | tee "$logdir/summary.log"
[ -n "${HYFI_GPU_DIR:-}" ] && log "bundle kept in $dest"
[ "$failed" = 0 ]

#!/usr/bin/env bash
# Run hyfi's CUDA checks on a lent GPU machine from the bundle that
# scripts/gpu-bundle.sh made (.gpu-bundle/hyfi-gpu.tar.xz, carried along).
# Runs THERE, from the repository root:
#   bash scripts/gpu-run.sh [LIST]      LIST: comma-separated steps [all]
#     tests: build-gpu/tests/test_cuda_ops, test_engine_cuda
#     train: hyfi-train --device cuda on synthetic data (30 steps), then one
#            epoch on the bundled Fashion-MNIST (tests/e2e_fashion.sh: test
#            accuracy >= 0.85)
#     exact: test_pipeline_exact's plans on CUDA workers only, then on CPU and
#            CUDA workers mixed, against the CPU single-place reference
#     bench: training images/s, hyfi-train --device cuda against PyTorch on
#            the same GPU (bench/torch_train.py --device cuda), alternating
#     all:   tests,train,exact,bench
# Needs no StarPU, MPICH or oneDNN there (the bundle has them); takes CUDA,
# cuBLAS and cuDNN from python3's site-packages/nvidia/*/lib (pip's
# nvidia-cuda-runtime, nvidia-cublas, nvidia-cudnn-cu13, ...), then
# /usr/local/cuda/lib64. Each step's output goes to its own log; with OUT set
# they are packed into $OUT/gpu-logs.tar.gz (with StarPU's calibrated
# performance models), and $OUT/summary.log holds the table; the last line is
# "N passed, N failed"; the exit status is 0 when nothing failed.
#
# A CUDA test that skips (exit 77) counts as skipped without a visible GPU and
# as failed when nvidia-smi lists one. Environment: HYFI_GPU_BUNDLE (the
# archive), HYFI_GPU_DIR (unpack there, kept; else a temporary folder, removed),
# HYFI_GPU_STEP_TIMEOUT (seconds per step, 300), HYFI_GPU_DEADLINE (seconds
# for the whole run: a step gets at most what is left, and steps that would
# start with under 15 s left are skipped; default none), HYFI_GPU_BENCH_ROWS
# (bench rows, comma-separated: r50-b32, r50-b64, amoeba-512, amoeba-1024,
# tiled-1024; default all), HYFI_GPU_BENCH_REPS (alternating repetitions per
# side, 2), HYFI_GPU_TORCH_FLAGS (extra torch_train.py flags, default
# --cudnn-benchmark; empty: PyTorch's defaults), HYFI_GPU_BENCH_KNOBS (hyfi
# sides as environment settings separated by ';', "default" for none, e.g.
# 'default;STARPU_SCHED=eager': each side runs in every repetition).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
log() { printf '[gpu-run] %s\n' "$*"; }
die() { printf '[gpu-run] error: %s\n' "$*" >&2; exit 2; }
usage() { sed -n '5,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
t_start=$(date +%s)

what="${1:-all}"
case "$what" in -h|--help) usage; exit 0 ;; esac
[ "$what" = all ] && what=tests,train,exact,bench
declare -A want=()
IFS=, read -r -a _sel <<<"$what"
for w in "${_sel[@]}"; do
  case "$w" in
    tests|train|exact|bench) want[$w]=1 ;;
    *) usage >&2; die "unknown step '$w' (tests, train, exact, bench or all)" ;;
  esac
done
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

# Logs stay out of $OUT (only 8 files come back from there): packed at the end.
if [ -n "${OUT:-}" ]; then
  logdir="$work/logs"
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
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv \
    >> "$machine_log" 2>&1
  # the versions of PyTorch and its cuDNN (whose libraries hyfi loads too)
  for p in /opt/*/.venv/bin/python3 python3; do
    command -v "$p" >/dev/null 2>&1 || continue
    timeout 60 "$p" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
          "cudnn", torch.backends.cudnn.version())' >> "$machine_log" 2>&1 && break
  done
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

# Seconds left for a step: HYFI_GPU_STEP_TIMEOUT, or less near the deadline.
step_budget() {
  local left
  if [ -z "${HYFI_GPU_DEADLINE:-}" ]; then echo "$step_timeout"; return; fi
  left=$(( HYFI_GPU_DEADLINE - ($(date +%s) - t_start) ))
  [ "$left" -lt "$step_timeout" ] && echo "$left" || echo "$step_timeout"
}
run_step() {  # run_step NAME KIND CMD...   (KIND: cuda or plain)
  local name="$1" kind="$2"; shift 2
  local lf="$logdir/$name.log" t0 rc budget
  budget=$(step_budget)
  if [ "$budget" -lt 15 ]; then skip_step "$name" "out of time (HYFI_GPU_DEADLINE)"; return; fi
  echo
  log "=== $name: $*"
  t0=$(date +%s)
  timeout -k 10 "$budget" "${runenv[@]}" "$@" 2>&1 | tee "$lf"
  rc=${PIPESTATUS[0]}
  local secs=$(( $(date +%s) - t0 ))
  if [ "$rc" = 0 ]; then
    record PASS "$name" "${secs}s"
  elif [ "$rc" = 77 ] && [ "$kind" = cuda ] && [ "$gpu" = yes ]; then
    record FAIL "$name" "skipped (exit 77) although nvidia-smi lists a GPU, ${secs}s"
  elif [ "$rc" = 77 ]; then
    record SKIP "$name" "exit 77 (no usable GPU), ${secs}s"
  elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    record FAIL "$name" "timed out after ${budget}s"
  else
    record FAIL "$name" "exit $rc, ${secs}s"
  fi
  echo "[gpu-run] $name: exit $rc after ${secs}s" >> "$lf"
}
skip_step() { record SKIP "$1" "$2"; log "=== $1: skipped: $2"; }

B="$dest/build-gpu"
if [ -n "${want[tests]:-}" ]; then
  run_step cuda_ops cuda "$B/tests/test_cuda_ops"
  if [ -x "$B/tests/test_engine_cuda" ]; then
    run_step engine_cuda cuda "$B/tests/test_engine_cuda"
  fi
fi
if [ -n "${want[train]:-}" ]; then
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
if [ -n "${want[exact]:-}" ]; then
  # The reference on the CPU with one thread per kernel (as pipeline_exact.sh),
  # then every plan of 'check' on CUDA workers, then on CPU + CUDA workers.
  mkdir -p "$work/exact"
  run_step exact_ref plain env HYFI_CPU_THREADS=1 HYFI_LEND_MIN_BYTES=0 \
    "$B/tests/test_pipeline_exact" ref "$work/exact"
  run_step exact_cuda cuda env HYFI_TEST_DEVICE=cuda "$B/tests/test_pipeline_exact" check-nompi \
    "$work/exact"
  run_step exact_mixed cuda env HYFI_TEST_DEVICE=mixed HYFI_CPU_THREADS=1 \
    "$B/tests/test_pipeline_exact" check-nompi "$work/exact"
fi
if [ -n "${want[bench]:-}" ]; then
  # Training images/s on synthetic data, fp32 (TF32 off on both sides: hyfi's
  # cuDNN calls use FMA math), SGD momentum 0.9, weight decay 5e-4, 5 warm-up
  # steps dropped; hyfi and PyTorch alternate (ABBA).
  py=python3
  for p in /opt/*/.venv/bin/python3; do [ -x "$p" ] && py="$p" && break; done
  reps="${HYFI_GPU_BENCH_REPS:-2}"
  # cuDNN's autotuner on for PyTorch too (hyfi measures its algorithms once per shape)
  torch_flags="${HYFI_GPU_TORCH_FLAGS---cudnn-benchmark}"
  rows="${HYFI_GPU_BENCH_ROWS:-r50-b32,r50-b64,amoeba-512,amoeba-1024,tiled-1024}"
  bench_row() {  # NAME -> "model flags|batch|size|steps|hyfi-only extra flags"
    case "$1" in
      r50-b32) echo "--model resnet --resnet-version 1 --depth 50|32|224|20|" ;;
      r50-b64) echo "--model resnet --resnet-version 1 --depth 50|64|224|20|" ;;
      amoeba-512) echo "--model amoebanet --num-layers 6 --num-filters 64|8|512|10|" ;;
      amoeba-1024) echo "--model amoebanet --num-layers 6 --num-filters 64|2|1024|10|" ;;
      tiled-1024) echo "--model amoebanet --num-layers 6 --num-filters 64|2|1024|10|--split-size 2 --spatial-size 1 --num-spatial-parts 4 --slice-method square" ;;
      *) return 1 ;;
    esac
  }
  mkdir -p "$logdir/bench" "$logdir/homes"
  # hyfi sides: one per knob (environment settings; "default": none), each
  # with its own STARPU_HOME per row (its performance models: a clean profile)
  IFS=';' read -r -a knobs <<<"${HYFI_GPU_BENCH_KNOBS:-default}"
  IFS=, read -r -a rowlist <<<"$rows"
  for row in "${rowlist[@]}"; do
    def=$(bench_row "$row") || { skip_step "bench_$row" "unknown bench row"; continue; }
    IFS='|' read -r mflags batch size nsteps extra <<<"$def"
    # shellcheck disable=SC2206
    common=($mflags --batch-size "$batch" --image-size "$size" --num-classes 10 --lr 0.05
            --momentum 0.9 --weight-decay 5e-4)
    sides=()
    for k in "${!knobs[@]}"; do sides+=("hyfi$k"); done
    [ -z "$extra" ] && sides+=(torch) # the tiled row: hyfi tiled against amoeba-1024
    ns=${#sides[@]}
    for ((r = 1; r <= reps; r++)); do
      for ((j = 0; j < ns; j++)); do
        # ABBA for two sides, rotation for more
        if [ "$ns" = 2 ]; then i=$(( r % 2 ? j : 1 - j )); else i=$(( (j + r - 1) % ns )); fi
        side="${sides[$i]}"
        b="$logdir/bench/$row.$side.$r"
        if [ "$side" = torch ]; then
          # shellcheck disable=SC2086
          run_step "bench_${row}_torch_$r" cuda env PYTHONUNBUFFERED=1 "$py" \
            "$root/bench/torch_train.py" "${common[@]}" --use-torch-models --device cuda \
            --warmup 5 --steps "$nsteps" $torch_flags
          grep '^{' "$logdir/bench_${row}_torch_$r.log" | tail -1 > "$b.json"
        else
          k=${side#hyfi}
          knob="${knobs[$k]}"
          [ "$knob" = default ] && knob=""
          home="$logdir/homes/$row.$side"
          [ -d "$home" ] || cp -r "$work/starpu-home" "$home" 2>/dev/null || mkdir -p "$home"
          # shellcheck disable=SC2086
          run_step "bench_${row}_${side}_$r" cuda env STARPU_HOME="$home" $knob \
            "$B/apps/hyfi-train" --device cuda --dataset synthetic "${common[@]}" $extra \
            --steps $((nsteps + 5)) --print-freq 1000000 --metrics "$b.metrics"
        fi
      done
    done
  done
  # the table: median over repetitions of each run's median images/s
  "$py" - "$logdir/bench" "$rows" "${HYFI_GPU_BENCH_KNOBS:-default}" <<'PY' \
    | tee "$logdir/bench.table" || true
import glob, json, os, statistics, sys
d, rows, knobs = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(";")
def ips(path):
    try:
        if path.endswith(".json"):
            return json.loads(open(path).read())["median_images_per_sec"]
        for line in open(path):
            j = json.loads(line)
            if j.get("summary"):
                return j.get("median_images_per_sec")
    except Exception:
        return None
def runs(row, side, ext):
    return [v for v in (ips(p) for p in glob.glob(os.path.join(d, "%s.%s.*.%s" % (row, side, ext))))
            if v]
fmt = lambda v: ("%.1f (%s)" % (statistics.median(v), "-".join("%.0f" % x for x in
                                                               (min(v), max(v))))) if v else "-"
print("%-12s %-34s %20s %20s %7s" % ("row", "hyfi side", "hyfi img/s", "torch img/s", "ratio"))
for row in rows:
    t = runs(row, "torch", "json")
    for k, knob in enumerate(knobs):
        h = runs(row, "hyfi%d" % k, "metrics")
        ratio = "%.2f" % (statistics.median(h) / statistics.median(t)) if h and t else "-"
        print("%-12s %-34s %20s %20s %7s" % (row, knob[:34], fmt(h), fmt(t), ratio))
PY
fi

# ------------------------------------------------------------------ summary
{
  echo
  [ -f "$logdir/bench.table" ] && { echo; cat "$logdir/bench.table"; }
  echo "== hyfi GPU run ($what, $(( $(date +%s) - t_start )) s): GPU visible: $gpu, StarPU CUDA workers: ${ncuda:-unknown}"
  printf '%s\n' "${results[@]}"
  [ "$skipped" = 0 ] || echo "($skipped skipped)"
  echo "$passed passed, $failed failed"
} | tee "$logdir/summary.log"
if [ -n "${OUT:-}" ]; then
  cp "$logdir/summary.log" "$OUT/" 2>/dev/null
  [ -d "$work/starpu-home" ] && cp -r "$work/starpu-home" "$logdir/starpu-home" 2>/dev/null
  tar -C "$logdir" -czf "$OUT/gpu-logs.tar.gz" . 2>/dev/null && log "logs: \$OUT/gpu-logs.tar.gz"
fi
[ -n "${HYFI_GPU_DIR:-}" ] && log "bundle kept in $dest"
[ "$failed" = 0 ]

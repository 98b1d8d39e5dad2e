#!/usr/bin/env bash
# hyfi vs PyTorch training throughput on the CPU, side by side.
#
#   bench/cpu_vs_pytorch.sh [options]
#
# For each row (model, batch, image size) it runs hyfi-train --dataset
# synthetic and bench/torch_train.py under each PyTorch variant (--torch) with
# the same model config, batch, image size, 10 classes and optimizer (SGD, lr,
# momentum 0.9, weight decay 5e-4), R times each, alternating the sides (ABBA
# with one variant: hyfi first in odd repetitions; with more, the order rotates
# by one each repetition), and prints a markdown table of the medians over the
# repetitions of each run's median images/s (every side drops 5 warm-up steps,
# then measures N steps) and hyfi's ratio to the fastest variant.
#
# PyTorch variants:
#   debian        Debian's python3-torch (/usr/bin/python3), eager
#   pypi          the newest PyTorch on PyPI, eager, in a virtual environment
#                 that the bench makes on first use (--torch-venv; pip install
#                 torch torchvision: the wheel PyPI has is the CUDA build, some
#                 3 GB; it runs here on the CPU only, CUDA_VISIBLE_DEVICES='')
#   pypi-compile  the same, the model under torch.compile (TorchInductor's C++
#                 kernels; compiling happens in the warm-up steps)
#   debian-cl, pypi-cl, pypi-compile-cl  the same in channels_last (NHWC)
#
# With --precision bf16 hyfi trains with --precision bf16, every PyTorch variant
# under torch.autocast(bfloat16), and hyfi in fp32 runs beside them (side
# hyfi32), so the table also gives hyfi bf16 / hyfi fp32.
#
# Each run's "foreign" CPU load (CPU time that other processes used
# during the run, in cores: busy time from /proc/stat minus the run's own
# user+system time, over its wall time) is recorded, so that noise from other
# work on the machine shows in the table.
#
# Rows (10 classes):
#   cnn        hyfi's small CNN, batch 64, 28x28
#   resnet18   ResNet-18 v1 (ImageNet style, torchvision layout), batch 8, 64x64
#   resnet50   ResNet-50 v1 (ImageNet style, torchvision layout), batch 8, 64x64
#   resnet50-128  the same at 128x128
#   resnet110  ResNet-110 v2 (CIFAR style, pre-activation bottleneck), batch 32, 32x32
#   amoebanet  AmoebaNet-D (L=6, F=64), batch 4, 128x128
#
# Options:
#   -r, --reps R        repetitions per side and row [3]
#   -n, --steps N       measured steps per run for every row [per row: cnn 60,
#                       resnet18 30, resnet50 15, resnet50-128 8, resnet110 12,
#                       amoebanet 25]
#   --rows LIST         comma-separated subset of: cnn,resnet18,resnet50,
#                       resnet50-128,resnet110,amoebanet [all]
#   --torch LIST        PyTorch variants, comma-separated subset of: debian,
#                       pypi, pypi-compile [debian,pypi,pypi-compile]
#                       (and debian-cl, pypi-cl, pypi-compile-cl)
#   --torch-venv DIR    the PyPI variants' environment [$HYFI_DEPS/torch-venv]
#   --precision P       fp32 | bf16: both sides' precision (above) [fp32]
#   --threads T         PyTorch threads (torch.set_num_threads) [nproc]
#   --lr X              learning rate of both sides [0.05, hyfi-train's default]
#   --build DIR         hyfi build folder [build]; built with scripts/build.sh if
#                       hyfi-train is missing
#   --out DIR           where logs, metrics and the table go [build/bench-cpu]
#   --no-calibrate      skip hyfi's untimed calibration run per row (StarPU
#                       performance models; kept in $STARPU_HOME, default
#                       <out>/starpu-home)
#   --hyfi-env 'K=V ..' extra environment of the hyfi runs (e.g. STARPU_NCPU=1)
#   --knobs 'A;B;..'    instead of the comparison: run hyfi alone under each
#                       environment A, B, ... (each 'K=V K=V', or 'default'),
#                       round-robin within each repetition, and print a table
#                       of the rows' median images/s per environment, e.g.
#                       --knobs 'default;STARPU_NCPU=1;STARPU_SCHED=eager'
#   -h, --help          this text
#
# Not part of the test suite (meson does not know bench/). Takes about 13
# minutes with the defaults on 2 cores (first use: a few more for the PyPI
# environment; torch.compile caches its kernels for later runs).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

reps=3 steps="" rows="cnn,resnet18,resnet50,resnet50-128,resnet110,amoebanet"
threads="$(nproc)" lr=0.05 bdir="$root/build" out="" calibrate=1 hyfi_env="" knobs=""
torch_variants="debian,pypi,pypi-compile" torch_venv="" precision=fp32
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    -r|--reps) reps="$2"; shift 2 ;;
    -n|--steps) steps="$2"; shift 2 ;;
    --rows) rows="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --lr) lr="$2"; shift 2 ;;
    --build) bdir="$(cd "$2" 2>/dev/null && pwd || echo "$2")"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --no-calibrate) calibrate=0; shift ;;
    --hyfi-env) hyfi_env="$2"; shift 2 ;;
    --knobs) knobs="$2"; shift 2 ;;
    --torch) torch_variants="$2"; shift 2 ;;
    --torch-venv) torch_venv="$2"; shift 2 ;;
    --precision) precision="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "cpu_vs_pytorch.sh: unknown option '$1' (--help lists them)" >&2; exit 2 ;;
  esac
done
[[ "$reps" =~ ^[1-9][0-9]*$ ]] || { echo "cpu_vs_pytorch.sh: --reps needs a positive integer" >&2; exit 2; }
case "$precision" in fp32|bf16) ;; *)
  echo "cpu_vs_pytorch.sh: --precision is fp32 or bf16" >&2; exit 2 ;; esac
[ -n "$knobs" ] && [ "$precision" = bf16 ] &&
  { echo "cpu_vs_pytorch.sh: --knobs runs hyfi alone; give it --hyfi-env, not --precision" >&2; exit 2; }
[ -z "$steps" ] || [[ "$steps" =~ ^[1-9][0-9]*$ ]] || { echo "cpu_vs_pytorch.sh: --steps needs a positive integer" >&2; exit 2; }
out="${out:-$bdir/bench-cpu}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"

# shellcheck source=../scripts/env.sh
source "$root/scripts/env.sh"
export STARPU_HOME="${STARPU_HOME:-$out/starpu-home}"
mkdir -p "$STARPU_HOME"
PY=/usr/bin/python3 # the tables' Python; Debian's python3-torch is its torch
torch_venv="${torch_venv:-$HYFI_DEPS/torch-venv}"
# PyTorch variants: side name, Python, extra torch_train.py flags, label
declare -A tv_py=() tv_flags=() tv_label=()
declare -a tv_sides=()
if [ -z "$knobs" ]; then
  IFS=, read -r -a tvl <<<"$torch_variants"
  for v in "${tvl[@]}"; do
    cl="" base_v="$v"
    case "$v" in *-cl) cl="--channels-last" base_v="${v%-cl}" ;; esac
    case "$base_v" in
      debian) py=/usr/bin/python3 side=torch flags="" ;;
      pypi) py="$torch_venv/bin/python" side=torchp flags="" ;;
      pypi-compile) py="$torch_venv/bin/python" side=torchpc flags="--compile" ;;
      *) echo "cpu_vs_pytorch.sh: unknown --torch variant '$v' (debian, pypi, pypi-compile," \
           "each also with -cl)" >&2
         exit 2 ;;
    esac
    label_extra="$([ -n "$flags" ] || echo ", eager")"
    [ -n "$cl" ] && side="${side}cl" label_extra+=", channels_last"
    [ "$precision" = bf16 ] && label_extra+=", autocast bf16"
    flags="$flags $cl $([ "$precision" = bf16 ] && echo "--autocast bf16")"
    if [ "$base_v" != debian ] && ! "$py" -c 'import torch, torchvision' 2>/dev/null; then
      echo "[bench] making $torch_venv: the newest torch and torchvision from PyPI (~3 GB)" >&2
      rm -rf "$torch_venv"
      if ! { /usr/bin/python3 -m venv "$torch_venv" &&
             "$torch_venv/bin/pip" install -q torch torchvision >&2; }; then
        echo "cpu_vs_pytorch.sh: could not install PyTorch from PyPI into $torch_venv" \
          "(pip's message above; --torch debian runs without it)" >&2
        exit 1
      fi
    fi
    # torchvision: the ImageNet-style ResNets of the resnet18/resnet50 rows
    "$py" -c 'import torch, torchvision' 2>/dev/null || {
      echo "cpu_vs_pytorch.sh: $py cannot import torch and torchvision" \
        "(Debian: apt install python3-torch python3-torchvision)" >&2
      exit 1
    }
    if [ "$base_v" = pypi-compile ] && ! "$py" -c 'import os, sysconfig
assert os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))' 2>/dev/null; then
      echo "cpu_vs_pytorch.sh: torch.compile builds C++ against Python.h, which is missing" \
        "(apt install python3-dev)" >&2
      exit 1
    fi
    ver=$(CUDA_VISIBLE_DEVICES='' "$py" -c 'import torch; print(torch.__version__)')
    tv_sides+=("$side"); tv_py[$side]="$py"; tv_flags[$side]="$flags"
    tv_label[$side]="PyTorch $ver ($base_v$label_extra)"
  done
  [ ${#tv_sides[@]} -gt 0 ] || { echo "cpu_vs_pytorch.sh: --torch names no variant" >&2; exit 2; }
fi

train="$bdir/apps/hyfi-train"
if [ ! -x "$train" ]; then
  echo "[bench] building hyfi into $bdir" >&2
  bash "$root/scripts/build.sh" "$bdir" >&2
fi
help="$("$train" --help)"
have_model() { grep -q -- "$1" <<<"$help"; }

WARMUP=5 # hyfi-train's fixed warm-up; torch_train.py --warmup matches it
WARM_CAL=10 # steps of hyfi's calibration run

# name | hyfi/torch model flags | batch | image size | default measured steps | label
row_def() {
  case "$1" in
    cnn)       echo "--model cnn|64|28|60|cnn (3 conv)" ;;
    resnet18)  echo "--model resnet --resnet-version 1 --depth 18|8|64|30|ResNet-18 v1 (ImageNet style)" ;;
    resnet50)  echo "--model resnet --resnet-version 1 --depth 50|8|64|15|ResNet-50 v1 (ImageNet style)" ;;
    resnet50-128) echo "--model resnet --resnet-version 1 --depth 50|8|128|8|ResNet-50 v1 (ImageNet style)" ;;
    resnet110) echo "--model resnet --resnet-version 2 --depth 110|32|32|12|ResNet-110 v2 (CIFAR style)" ;;
    amoebanet) echo "--model amoebanet --num-layers 6 --num-filters 64|4|128|25|AmoebaNet-D (6, 64)" ;;
    *) return 1 ;;
  esac
}

cpu_busy() { # jiffies the CPUs were busy (all but idle and iowait)
  awk '/^cpu /{print $2+$3+$4+$7+$8+$9}' /proc/stat
}
hz=$(getconf CLK_TCK)

# run_one SIDE LOGBASE CMD...: runs CMD, writes LOGBASE.log and appends one
# JSON line {side, rate, mean, wall, own_cpu, foreign} to $out/runs.jsonl.
run_one() {
  local side="$1" base="$2"; shift 2
  local b0 b1 t0 t1 tf="$base.time"
  b0=$(cpu_busy); t0=$(date +%s.%N)
  if ! /usr/bin/time -f "%U %S" -o "$tf" "$@" >"$base.log" 2>&1; then
    echo "[bench] FAILED: $* (log: $base.log)" >&2
    tail -5 "$base.log" >&2
    return 1
  fi
  t1=$(date +%s.%N); b1=$(cpu_busy)
  "$PY" - "$side" "$base" "$t0" "$t1" "$b0" "$b1" "$hz" "$tf" >>"$out/runs.jsonl" <<'PY'
import json, sys
side, base, t0, t1, b0, b1, hz, tf = sys.argv[1:]
wall = float(t1) - float(t0)
u, s = map(float, open(tf).read().split()[-2:])
own = u + s
busy = (int(b1) - int(b0)) / int(hz)
if not side.startswith("torch"):
    summ = [json.loads(l) for l in open(base + ".metrics") if '"summary"' in l][-1]
    med, mean = summ["median_images_per_sec"], summ["mean_images_per_sec"]
else:
    r = json.loads([l for l in open(base + ".log") if l.startswith("{")][-1])
    med, mean = r["median_images_per_sec"], r["mean_images_per_sec"]
print(json.dumps({"run": base.rsplit("/", 1)[-1], "side": side, "median": med, "mean": mean,
                  "wall": round(wall, 2), "own_cpu": round(own, 2),
                  "foreign": round(max(0.0, busy - own) / wall, 2)}))
PY
  tail -1 "$out/runs.jsonl" >&2
}

# Sides of a row: hyfi and torch, or one hyfi side per --knobs environment.
declare -a sides=() side_env=()
if [ -n "$knobs" ]; then
  IFS=';' read -r -a side_env <<<"$knobs"
  for i in "${!side_env[@]}"; do
    side_env[$i]="$(echo ${side_env[$i]})" # trim
    [ "${side_env[$i]}" = default ] && side_env[$i]=""
    sides+=("k$i")
  done
else
  sides=(hyfi)
  [ "$precision" = bf16 ] && sides+=(hyfi32)
  sides+=("${tv_sides[@]}")
  for _ in "${sides[@]}"; do side_env+=(""); done
fi
base_home="$STARPU_HOME"

start=$(date +%s)
: >"$out/runs.jsonl"
declare -a done_rows=() skipped=()
IFS=, read -r -a rowlist <<<"$rows"
for row in "${rowlist[@]}"; do
  def=$(row_def "$row") || { echo "cpu_vs_pytorch.sh: unknown row '$row'" >&2; exit 2; }
  IFS='|' read -r mflags batch size nsteps label <<<"$def"
  nsteps="${steps:-$nsteps}"
  model="$(awk '{print $2}' <<<"$mflags")"
  if ! have_model "$model"; then
    echo "[bench] $row: hyfi-train has no --model $model yet; skipped" >&2
    skipped+=("$row"); continue
  fi
  # shellcheck disable=SC2206
  hyfi_args=($mflags --dataset synthetic --batch-size "$batch" --image-size "$size"
             --num-classes 10 --lr "$lr" --momentum 0.9 --weight-decay 5e-4 --print-freq 1000000)
  # shellcheck disable=SC2206
  torch_args=("$root/bench/torch_train.py" $mflags --use-torch-models --batch-size "$batch"
              --image-size "$size" --num-classes 10 --lr "$lr" --momentum 0.9 --weight-decay 5e-4
              --threads "$threads" --warmup "$WARMUP" --steps "$nsteps")
  # hyfi command of side i (its environment; in knob mode its own STARPU_HOME)
  hyfi_cmd_of() {
    local e="$hyfi_env ${side_env[$1]}" home="$base_home"
    [ -n "$knobs" ] && home="$base_home-${sides[$1]}"
    mkdir -p "$home"
    # shellcheck disable=SC2086
    hyfi_cmd=(env STARPU_HOME="$home" $e "$train" "${hyfi_args[@]}")
    if [ "${sides[$1]}" = hyfi ]; then hyfi_cmd+=(--precision "$precision"); fi
  }
  if [ "$calibrate" = 1 ]; then
    for i in "${!sides[@]}"; do
      [[ "${sides[$i]}" = torch* ]] && continue
      hyfi_cmd_of "$i"
      echo "[bench] $row: hyfi calibration run ($WARM_CAL steps, untimed) ${side_env[$i]}" >&2
      "${hyfi_cmd[@]}" --steps "$WARM_CAL" >"$out/$row.${sides[$i]}.calibrate.log" 2>&1 ||
        { echo "[bench] $row: hyfi calibration run failed (log: $out/$row.${sides[$i]}.calibrate.log)" >&2
          tail -5 "$out/$row.${sides[$i]}.calibrate.log" >&2; exit 1; }
    done
  fi
  ns=${#sides[@]}
  for ((r = 1; r <= reps; r++)); do
    # order: ABBA for two sides (A first in odd repetitions), rotation for more
    for ((j = 0; j < ns; j++)); do
      if [ "$ns" = 2 ]; then i=$(( r % 2 ? j : 1 - j )); else i=$(( (j + r - 1) % ns )); fi
      side="${sides[$i]}"
      base="$out/$row.$side.$r"
      if [[ "$side" = torch* ]]; then
        # shellcheck disable=SC2086 # the variant's flags: words or none
        run_one "$side" "$base" env CUDA_VISIBLE_DEVICES='' "${tv_py[$side]}" "${torch_args[@]}" \
          ${tv_flags[$side]}
      else
        hyfi_cmd_of "$i"
        run_one "$side" "$base" "${hyfi_cmd[@]}" --steps $((nsteps + WARMUP)) --metrics "$base.metrics"
      fi
    done
  done
  done_rows+=("$row|$batch|$size|$nsteps|$label")
done

# ------------------------------------------------------------------ table
cpu="$(awk -F': ' '/^model name/{print $2; exit}' /proc/cpuinfo)"
envs=""
for v in OMP_NUM_THREADS OPENBLAS_NUM_THREADS MKL_NUM_THREADS OMP_WAIT_POLICY STARPU_NCPU STARPU_SCHED STARPU_WORKERS_NOBIND; do
  envs+="$v=${!v-unset} "
done
knob_list=""
for i in "${!sides[@]}"; do
  if [ -n "$knobs" ]; then knob_list+="${sides[$i]}=${side_env[$i]:-default};"
  elif [ "${sides[$i]}" = hyfi ]; then knob_list+="hyfi=hyfi;"
  elif [ "${sides[$i]}" = hyfi32 ]; then knob_list+="hyfi32=hyfi fp32;"
  else knob_list+="${sides[$i]}=${tv_label[${sides[$i]}]};"; fi
done
{
  if [ -n "$knobs" ]; then
    echo "hyfi alone under several environments (knobs), CPU training, synthetic data"
  else
    echo "hyfi vs PyTorch, CPU training, synthetic data"
  fi
  echo
  echo "- machine: $(nproc) cores, $cpu; $(uname -srm)"
  echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'); git $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$root" diff --quiet 2>/dev/null || echo ' (uncommitted changes)')"
  echo "- env: ${envs% }; hyfi extra env: ${hyfi_env:-none}; PyTorch threads: $threads"
  [ -n "$knobs" ] || echo "- PyTorch variants run: $(for s in "${tv_sides[@]}"; do printf '%s; ' "${tv_label[$s]}"; done | sed 's/; $//')"
  [ "$precision" = fp32 ] || echo "- precision: hyfi --precision $precision, PyTorch under torch.autocast(bfloat16), hyfi fp32 beside them"
  echo "- SGD lr $lr, momentum 0.9, weight decay 5e-4; 10 classes; $WARMUP warm-up steps dropped; $reps repetitions per side (alternating); value = median over repetitions of each run's median images/s; range = min-max of the runs' medians; best/best = ratio of the fastest runs (noise only slows runs down); foreign = most CPU (in cores) that other processes used during any run of the row"
  echo
  "$PY" - "$out/runs.jsonl" "$knob_list" "${done_rows[@]}" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
sides = [kv.split("=", 1) for kv in sys.argv[2].split(";") if kv]
rows = [spec.split("|") for spec in sys.argv[3:]]

def stat(row, side):
    xs = [r["median"] for r in runs if r["run"].startswith(row + "." + side + ".")]
    return (statistics.median(xs), min(xs), max(xs)) if xs else None

def fmt(t):
    if t is None:
        return "n/a"
    return ("%.1f (%.1f-%.1f)" if t[0] < 100 else "%.0f (%.0f-%.0f)") % t

def foreign(row):
    return max(r["foreign"] for r in runs if r["run"].startswith(row + "."))

h32 = len(sides) > 1 and sides[1][0] == "hyfi32"
if sides and sides[0][0] == "hyfi" and all(s.startswith("torch") for s, _ in sides[1 + h32:]):
    tvs = sides[1 + h32:]
    print("| model | batch | image | steps | hyfi img/s (range) | "
          + ("hyfi fp32 img/s (range) | hyfi/hyfi fp32 | " if h32 else "")
          + " | ".join("%s img/s (range)" % lab for _, lab in tvs)
          + " | hyfi/best PyTorch | best/best | foreign load |")
    print("|---|---|---|---|---|" + ("---|---|" if h32 else "") + "---|" * len(tvs) + "---|---|---|")
    for row, batch, size, steps, label in rows:
        h = stat(row, "hyfi")
        ts = [stat(row, s) for s, _ in tvs]
        ok = [t for t in ts if t]
        best = max(t[0] for t in ok) if ok else None
        bestmax = max(t[2] for t in ok) if ok else None
        mid = ""
        if h32:
            f = stat(row, "hyfi32")
            mid = "%s | %s | " % (fmt(f), "**%.2f**" % (h[0] / f[0]) if h and f else "n/a")
        print("| %s | %s | %sx%s | %s | %s | %s%s | %s | %s | %.2f |" % (
            label, batch, size, size, steps, fmt(h), mid, " | ".join(fmt(t) for t in ts),
            "**%.2f**" % (h[0] / best) if h and best else "n/a",
            "%.2f" % (h[2] / bestmax) if h and bestmax else "n/a", foreign(row)))
else:
    print("| model | batch | image | " + " | ".join(e.replace("STARPU_", "") for _, e in sides)
          + " | best | foreign load |")
    print("|---|---|---|" + "---|" * len(sides) + "---|---|")
    for row, batch, size, steps, label in rows:
        st = [stat(row, s) for s, _ in sides]
        best = max(range(len(sides)), key=lambda i: st[i][0])
        print("| %s | %s | %sx%s | %s | %s | %.2f |" % (
            label, batch, size, size, " | ".join(fmt(x) for x in st),
            sides[best][1].replace("STARPU_", ""), foreign(row)))
PY
  for s in "${skipped[@]}"; do echo; echo "($s skipped: hyfi-train has no such --model yet)"; done
  echo
  echo "total bench time $(( $(date +%s) - start )) s; runs in $out/runs.jsonl"
} | tee "$out/table.md"

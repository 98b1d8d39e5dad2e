# Shared set-up of the bench scripts (sourced): with root, bdir and out set,
# bench_setup NAME makes the output folder (default $bdir/NAME, absolute),
# puts StarPU on the paths, builds hyfi if needed and sets
#   train      the hyfi-train binary
#   mpiexec    MPICH's mpiexec
#   STARPU_HOME (per bench: its own performance models), STARPU_SILENT
bench_setup() {
  out="${out:-$bdir/$1}"
  mkdir -p "$out"
  out="$(cd "$out" && pwd)"
  # shellcheck source=../scripts/env.sh
  source "$root/scripts/env.sh"
  train="$bdir/apps/hyfi-train"
  [ -x "$train" ] || bash "$root/scripts/build.sh" "$bdir" >&2
  export STARPU_HOME="$out/starpu-home" STARPU_SILENT=1
  mkdir -p "$STARPU_HOME"
  mpiexec=$(command -v mpiexec.mpich || command -v mpiexec)
}

# bench_parse ARGS...: `--NAME VALUE` sets the variable NAME (dashes as
# underscores) where the script listed NAME in bench_opts; `--build DIR` sets
# bdir; -h/--help prints the script's header comment.
bench_parse() {
  while [ $# -gt 0 ]; do
    case "$1" in
      -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
      --build) bdir="$2"; shift 2 ;;
      --*)
        local v="${1#--}"
        v="${v//-/_}"
        if [[ " $bench_opts " == *" $v "* ]] && [ $# -ge 2 ]; then
          printf -v "$v" '%s' "$2"
          shift 2
        else
          echo "$(basename "$0"): unknown option '$1' (--help lists them)" >&2
          exit 2
        fi ;;
      *) echo "$(basename "$0"): unexpected argument '$1' (--help lists them)" >&2; exit 2 ;;
    esac
  done
}

# bench_rotate: run_cfg CONFIG REP for every entry of configs[] and every
# repetition 1..reps, the order rotated by one between repetitions.
bench_rotate() {
  local r j n=${#configs[@]}
  for ((r = 1; r <= reps; r++)); do
    for ((j = 0; j < n; j++)); do
      run_cfg "${configs[$(( (j + r - 1) % n ))]}" "$r"
    done
  done
}

# bench_machine: the machine and date lines of a results table.
bench_machine() {
  echo "- machine: $(nproc) cores, $(awk -F': ' '/^model name/{print $2; exit}' /proc/cpuinfo); $(uname -srm)"
  echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'); git $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')"
}

# bench_slides SIZE: the folder ($out/slides-SIZE) of 2 classes x 1 real tissue
# mosaic of SIZE^2 as tiled TIFF (scripts/make_slides.py, with Debian's python3:
# numpy and Pillow), made once.
bench_slides() {
  local d="$out/slides-$1"
  if [ ! -f "$d/.done" ]; then
    rm -rf "$d"
    /usr/bin/python3 "$root/scripts/make_slides.py" --out "$d" --size "$1" --per-class 1 \
      --format tiff-tiled --level 1 >"$out/slides-$1.log" 2>&1 ||
      { echo "[bench] making $1^2 slides failed (log $out/slides-$1.log)" >&2; exit 1; }
    touch "$d/.done"
  fi
  echo "$d"
}

# bench_layers SIZE MODEL-FLAGS...: the model's layer count (--balance units).
bench_layers() {
  local size=$1; shift
  "$train" --dry-run "$@" --image-size "$size" --batch-size 1 2>/dev/null |
    sed -n 's/^layers: \([0-9]*\).*/\1/p'
}

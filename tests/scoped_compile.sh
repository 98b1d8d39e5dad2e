#!/bin/bash
# 'scoped_compile': a rank's own share of a tiled plan trains exactly what the
# whole plan does. Each rank of an MPI run builds and registers only its share
# (engine/share.c, keyed.c: deferred registration; localise.c: local copies of
# what every tile reads, flushed partial sums); HYFI_SUBMIT_ALL=1 builds,
# registers and submits the whole step on every rank, as before any of that.
# Both runs of each plan (16 tiles of stage 0 spread over 4 ranks, stage 1 on
# the last; and 4 tiles with GEMS and 2 data-parallel units; one micro-batch
# per replica, so no sum depends on timing) must give the same
# losses to the last digit printed (9 significant digits), and the scoped run
# must submit fewer tasks per rank.
# usage: scoped_compile.sh HYFI_TRAIN MPIEXEC
set -u
train=${1:?usage: scoped_compile.sh HYFI_TRAIN MPIEXEC}
mpiexec=${2:?usage: scoped_compile.sh HYFI_TRAIN MPIEXEC}
export HYFI_CPU_THREADS=1 HYFI_LEND_MIN_BYTES=0
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fails=0
run() { # name, submit-all (0/1), flags...
    local name=$1 all=$2
    shift 2
    if ! HYFI_SUBMIT_ALL=$all timeout 300 "$mpiexec" -n 4 "$train" "$@" --num-classes 2 \
            --steps 3 --print-freq 1 --split-size 2 --spatial-size 1 --slice-method square \
            -v --metrics "$dir/$name.json" >"$dir/$name.log" 2>&1; then
        echo "FAILED: $name"
        tail -5 "$dir/$name.log"
        fails=$((fails + 1))
    fi
}
tiles16=(--batch-size 2 --num-spatial-parts 16)
for model in resnet amoebanet replicas; do
    case $model in
        resnet) flags=(--model resnet --depth 8 --image-size 64 "${tiles16[@]}") ;;
        amoebanet) flags=(--model amoebanet --num-layers 3 --num-filters 16 --image-size 128
                          "${tiles16[@]}") ;;
        # 4 tiles, GEMS and 2 data-parallel units (4 replicas, one micro-batch
        # each): a rank's replicas, their tree partners, the tiles' copies
        replicas) flags=(--model resnet --depth 8 --image-size 64 --batch-size 8
                         --num-spatial-parts 4 --gems mast --data-parallel 2 --allreduce tree) ;;
    esac
    run "$model.scoped" 0 "${flags[@]}"
    run "$model.all" 1 "${flags[@]}"
    python3 - "$dir" "$model" <<'PY' || fails=$((fails + 1))
import json, re, sys
d, model = sys.argv[1:3]
def losses(name):
    return [json.loads(l)["loss"] for l in open(f"{d}/{name}.json") if '"step"' in l]
def submitted(name):
    # "hyfi: rank R submits N of the T tasks of a training step" (-v; a whole-step
    # run submits all T and prints no such line)
    got = {}
    for l in open(f"{d}/{name}.log"):
        m = re.search(r"rank (\d+) submits (\d+) of the (\d+) tasks", l)
        if m:
            got[int(m.group(1))] = (int(m.group(2)), int(m.group(3)))
    return got
def far(name):
    # "hyfi-train: compiled rank R of N: H handles, B tasks built (F of far tiles not), ..."
    got = {}
    for l in open(f"{d}/{name}.log"):
        m = re.search(r"compiled rank (\d+) of \d+: \d+ handles, \d+ tasks built \((\d+) of far", l)
        if m:
            got[int(m.group(1))] = int(m.group(2))
    return got
a, b = losses(model + ".scoped"), losses(model + ".all")
sa = submitted(model + ".scoped")
ok = len(a) == 3 and a == b
fewer = len(sa) == 4 and all(n < t for n, t in sa.values())
print("%s: losses scoped %s, whole step %s: %s; tasks submitted per rank %s of %s: %s" % (
    model, a, b, "equal" if ok else "MISMATCH", [sa[r][0] for r in sorted(sa)],
    [sa[r][1] for r in sorted(sa)], "fewer" if fewer else "NOT FEWER"))
# 16 tiles (4 x 4) on 4 ranks: the first and last ranks do not build the
# tasks of tiles more than twice the halo's reach from their own
# (engine/spatial_halo.c, hyfi_sp_tile), and the losses above stay exact;
# whole-step runs build every task
fa, fw = far(model + ".scoped"), far(model + ".all")
trims = True
if model != "replicas":
    trims = (len(fa) == 4 and fa[0] > 0 and fa[3] > 0 and len(fw) == 4 and
             not any(fw.values()))
    print("%s: far tiles' tasks not built per rank %s, whole step %s: %s" % (
        model, [fa.get(r) for r in range(4)], [fw.get(r) for r in range(4)],
        "as expected" if trims else "NOT AS EXPECTED"))
sys.exit(0 if ok and fewer and trims else 1)
PY
done
[ "$fails" = 0 ] || exit 1
echo "scoped_compile: every rank's share trains the whole plan's losses"

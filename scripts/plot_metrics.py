#!/usr/bin/env python3
"""Draw hyfi-train's --metrics JSON lines: loss, images/s, accuracy and (on
several ranks) each rank's peak memory against the step, one line per file
(runs), and one per rank where the ranks differ, in one PNG or SVG.

    hyfi-train ... --metrics run.json
    python3 scripts/plot_metrics.py run.json -o run.png
    python3 scripts/plot_metrics.py a.json b.json --label fp32 --label bf16 -o cmp.svg

Panels: the loss of every step; images/s of every step, the first 5 steps
(warm-up: StarPU calibrates there, the summary leaves them out) shaded, and a
dashed line at the summary's median; the accuracy: the training accuracy of
every step's batch (train_accuracy) and the test accuracy of the summary as a
point at the last step (hyfi-train evaluates once, at the end). A run of
several ranks records each rank's own figures (rank_images_per_sec,
rank_peak_memory_mb): images/s is then drawn once per rank (rank 0 solid,
the others dashed), and a fourth panel draws each rank's peak memory. Files
with the same values draw as one line (say so in the legend). A resumed run
appends to its file: its steps continue the curve.

Needs matplotlib (Debian: python3-matplotlib; PyPI: matplotlib); run by a
Python without it, it runs again under /usr/bin/python3 when that one has it."""
import argparse
import json
import sys

WARMUP = 5  # hyfi-train's warm-up steps (train_run.h WARMUP_STEPS)


def read(path):
    steps, summary = {}, None
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
            except ValueError:
                sys.exit("plot_metrics: %s line %d is not JSON (a run killed mid-line?): %.60s"
                         % (path, n, line))
            if "step" in row:
                steps[row["step"]] = row  # a resumed run's steps replace the same steps
            elif row.get("summary"):
                summary = row
    return [steps[k] for k in sorted(steps)], summary


def ranks(steps, key):
    """Each rank's (steps, values) of a per-rank list (one entry per rank; null
    entries left out); [] where no step has it."""
    n = max([len(r.get(key) or []) for r in steps] + [0])
    out = []
    for k in range(n):
        pts = [(r["step"], r[key][k]) for r in steps
               if len(r.get(key) or []) > k and r[key][k] is not None]
        out.append(([a for a, _ in pts], [b for _, b in pts]))
    return out


def system_python(a):
    """This Python lacks matplotlib: run again under Debian's /usr/bin/python3
    when it has it (python3-matplotlib serves that one alone; a python3 first
    on PATH, e.g. pyenv's or a virtualenv's, does not see it), else say how
    to get it for this Python."""
    import os
    import subprocess
    sysp = "/usr/bin/python3"
    here = os.path.realpath(sys.executable or "")
    if (os.path.exists(sysp) and os.path.realpath(sysp) != here
            and not os.environ.get("HYFI_PLOT_REEXEC")
            and subprocess.run([sysp, "-c", "import matplotlib"],
                               stderr=subprocess.DEVNULL).returncode == 0):
        os.environ["HYFI_PLOT_REEXEC"] = "1"
        os.execv(sysp, [sysp, os.path.abspath(__file__)] + sys.argv[1:])
    sys.exit("plot_metrics: needs matplotlib, which this Python (%s) lacks: %s -m pip install "
             "matplotlib, or apt-get install python3-matplotlib and run it with %s"
             % (sys.executable, sys.executable, sysp))


def main():
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("metrics", nargs="+", help="hyfi-train --metrics files")
    ap.add_argument("-o", "--output", required=True, help="picture to write (.png or .svg)")
    ap.add_argument("--label", action="append", default=[],
                    help="legend name of each file, in order [the file names]")
    ap.add_argument("--title", default=None, help="title [the files]")
    a = ap.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        system_python(a)
    runs = []
    for i, path in enumerate(a.metrics):
        steps, summary = read(path)
        if not steps and not summary:
            sys.exit("plot_metrics: %s has no step or summary line" % path)
        label = a.label[i] if i < len(a.label) else path
        runs.append((label, steps, summary))
    # files with the same curves (every rank's of one run): one line
    groups = []
    for label, steps, summary in runs:
        key = json.dumps([(r["step"], r["loss"]) for r in steps])
        for g in groups:
            if g[0] == key:
                g[1].append(label)
                break
        else:
            groups.append((key, [label], steps, summary))

    memory = any(ranks(steps, "rank_peak_memory_mb") for _, _, steps, _ in groups)
    fig, ax = plt.subplots(4 if memory else 3, 1, figsize=(9, 10.5 if memory else 8), sharex=True,
                           gridspec_kw={"height_ratios": [3, 3, 2] + ([2] if memory else [])})
    last = 1
    for _, labels, steps, summary in groups:
        name = labels[0] if len(labels) == 1 else "%s (and %d alike)" % (labels[0], len(labels) - 1)
        x = [r["step"] for r in steps]
        last = max([last] + x)
        mark = "." if len(x) < 50 else None
        (line,) = ax[0].plot(x, [r["loss"] for r in steps], marker=mark, label=name)
        c = line.get_color()
        per_rank = ranks(steps, "rank_images_per_sec")
        if per_rank:  # one line per rank: rank 0 solid, the others dashed
            for k, (xk, yk) in enumerate(per_rank):
                ax[1].plot(xk, yk, color=c, ls="-" if k == 0 else (0, (4, 1 + k)), lw=1.2,
                           marker=mark if k == 0 else None, label="%s rank %d" % (name, k))
        else:
            ax[1].plot(x, [r["images_per_sec"] for r in steps], color=c, marker=mark, label=name)
        if summary and summary.get("median_images_per_sec"):
            ax[1].axhline(summary["median_images_per_sec"], color=c, ls="--", lw=1,
                          label="%s: median %.1f (summary)" % (name, summary["median_images_per_sec"]))
        acc = [(r["step"], r["train_accuracy"]) for r in steps
               if r.get("train_accuracy") is not None]
        if acc:
            ax[2].plot([a for a, _ in acc], [b for _, b in acc], color=c, lw=1, alpha=0.8,
                       label="%s: training (each step's batch)" % name)
        if summary and summary.get("test_accuracy") is not None:
            xs = x[-1] if x else 0
            ax[2].plot([xs], [summary["test_accuracy"]], "o", color=c,
                       label="%s: test %.4f" % (name, summary["test_accuracy"]))
        for k, (xk, yk) in enumerate(ranks(steps, "rank_peak_memory_mb") if memory else []):
            ax[3].plot(xk, yk, color=c, ls="-" if k == 0 else (0, (4, 1 + k)), lw=1.2,
                       label="%s rank %d" % (name, k))
    ax[1].axvspan(0.5, min(WARMUP, last) + 0.5, color="0.9", zorder=0,
                  label="warm-up (not in the summary)")
    ax[0].set_ylabel("loss")
    ax[1].set_ylabel("images/s")
    ax[2].set_ylabel("accuracy")
    ax[2].set_ylim(0, 1)
    if not ax[2].lines:
        ax[2].text(0.5, 0.5, "no accuracy (no train_accuracy recorded, no test split)",
                   ha="center", va="center", transform=ax[2].transAxes, color="0.4")
    if memory:
        ax[3].set_ylabel("peak memory (MB)")
        ax[3].legend(loc="lower right", fontsize=8)
    ax[-1].set_xlabel("step")
    ax[-1].set_xlim(0.5, last + 0.5)
    for k in range(len(ax)):
        ax[k].grid(alpha=0.3)
    ax[0].legend(loc="upper right", fontsize=8)
    ax[1].legend(loc="lower right", fontsize=8)
    if ax[2].lines:
        ax[2].legend(loc="best", fontsize=8)  # (the curve rises: lower left is often taken)
    ax[1].set_ylim(bottom=0)
    fig.suptitle(a.title or "hyfi-train: " + ", ".join(a.metrics))
    fig.tight_layout()
    fig.savefig(a.output, dpi=100)
    nr = max([len(ranks(st, "rank_images_per_sec")) for _, _, st, _ in groups] + [1])
    print("plot_metrics: wrote %s (%d run%s, %d step%s%s)" % (
        a.output, len(groups), "s" if len(groups) > 1 else "", last, "s" if last != 1 else "",
        ", %d ranks each drawn" % nr if nr > 1 else ""))


if __name__ == "__main__":
    main()

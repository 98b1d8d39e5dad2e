#!/usr/bin/python3
"""Per-codelet time of hyfi's tasks from StarPU's history performance models.

  STARPU_HOME=/tmp/sh build/apps/hyfi-train ... --steps 20   # fresh STARPU_HOME
  STARPU_HOME=/tmp/sh bench/starpu_codelet_summary.py --steps 20

For each hyfi_* model it runs `starpu_perfmodel_display -s MODEL` (StarPU's
bin/ on PATH: source scripts/env.sh) and adds up mean x count over the
footprints (one footprint per data size) of every worker architecture, so the
totals cover every task the runs in that STARPU_HOME executed (calibration and
warm-up included). --steps divides them by the number of training steps those
runs made, giving ms per step; tasks of concurrent workers overlap, so the sum
can exceed the step's wall time.
"""
import argparse
import os
import re
import subprocess
import sys


def models():
    out = subprocess.run(["starpu_perfmodel_display", "-l"], capture_output=True, text=True,
                         check=True).stdout
    home = os.environ.get("STARPU_HOME", os.path.expanduser("~"))
    names, cur_dir = [], ""
    for line in out.splitlines():
        m = re.match(r"codelet directory: <(.*)>", line)
        if m:
            cur_dir = m.group(1)
        m = re.match(r"file: <(hyfi_[^.>]*)\.", line)
        if m and cur_dir.startswith(home):
            names.append(m.group(1))
    return sorted(set(names))


def model_total(name):
    out = subprocess.run(["starpu_perfmodel_display", "-s", name], capture_output=True,
                         text=True).stdout
    tot_us, n_tot, arch = 0.0, 0, {}
    cur = None
    for line in out.splitlines():
        m = re.match(r"# performance model for (\S+)", line)
        if m:
            cur = m.group(1)
            continue
        f = line.split()
        if len(f) == 6 and not line.startswith("#"):
            try:
                mean, n = float(f[3]), int(f[5])
            except ValueError:
                continue
            tot_us += mean * n
            n_tot += n
            arch[cur] = arch.get(cur, 0.0) + mean * n
    return tot_us, n_tot, arch


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=float, default=1.0,
                    help="training steps run in this STARPU_HOME")
    a = ap.parse_args()
    rows = []
    for m in models():
        us, n, _ = model_total(m)
        if n:
            rows.append((us, n, m))
    if not rows:
        sys.exit("no hyfi_* performance models under STARPU_HOME=%s" %
                 os.environ.get("STARPU_HOME", "~"))
    total = sum(r[0] for r in rows)
    print("%10s %6s %9s %8s  %s" % ("ms/step", "%", "tasks/st", "us/task", "codelet"))
    for us, n, m in sorted(rows, reverse=True):
        print("%10.2f %5.1f%% %9.1f %8.1f  %s" % (us / 1e3 / a.steps, 100 * us / total,
                                                 n / a.steps, us / n, m))
    print("%10.2f %5.1f%% %9.1f %8s  total" % (total / 1e3 / a.steps, 100.0,
                                               sum(r[1] for r in rows) / a.steps, ""))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Merge StarPU history performance models measured apart into one folder.

Ranks that share a machine and a model folder overwrite each other's files
at shutdown (each writes what it loaded plus its own measurements), so a
multi-rank calibration gives each rank its own folder; this merges them: for
every codelets/45/<symbol>.<MACHINE> the entries of all folders, footprint by
footprint (sums, sums of squares and counts added), and the first folder's
bus/<MACHINE>.* files.

  bench/merge_perfmodels.py OUT MACHINE IN1 [IN2 ...]
"""
import glob
import math
import os
import shutil
import sys


def parse(path):
    """(lines, {arch: (index of '# number of entries' value line, first entry line,
    end line)}, {arch: {hash: [size, flops, sum, sum2, n]}})"""
    lines = open(path).read().split("\n")
    sections, entries = {}, {}
    arch, i = None, 0
    while i < len(lines):
        ln = lines[i]
        if ln.startswith("# Model for "):
            arch = ln[len("# Model for "):].strip()
        elif arch and ln.startswith("# number of entries"):
            count_at = i + 1
        elif arch and ln.startswith("# hash"):
            j = i + 1
            ent = {}
            while j < len(lines) and lines[j] and not lines[j].startswith("#"):
                f = lines[j].split()
                if len(f) == 8:
                    ent[f[0]] = [f[1], f[2], float(f[5]), float(f[6]), int(f[7])]
                j += 1
            sections[arch] = (count_at, i + 1, j)
            entries[arch] = ent
            arch = None
            i = j
            continue
        i += 1
    return lines, sections, entries


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    out, machine, ins = sys.argv[1], sys.argv[2], sys.argv[3:]
    os.makedirs(os.path.join(out, "codelets", "45"), exist_ok=True)
    os.makedirs(os.path.join(out, "bus"), exist_ok=True)
    for src in glob.glob(os.path.join(ins[0], "bus", machine + ".*")):
        shutil.copy(src, os.path.join(out, "bus"))
    names = set()
    for d in ins:
        names |= {os.path.basename(p) for p in glob.glob(os.path.join(d, "codelets", "45", "*." + machine))}
    for name in sorted(names):
        files = [os.path.join(d, "codelets", "45", name) for d in ins]
        files = [f for f in files if os.path.exists(f)]
        lines, sections, merged = parse(files[0])
        for f in files[1:]:
            _, _, ent = parse(f)
            for arch, e in ent.items():
                if arch not in merged:
                    sys.stderr.write("merge: %s: %s has arch %s, not in %s: left out\n"
                                     % (name, f, arch, files[0]))
                    continue
                for h, (size, flops, s, s2, n) in e.items():
                    m = merged[arch].setdefault(h, [size, flops, 0.0, 0.0, 0])
                    m[2] += s
                    m[3] += s2
                    m[4] += n
        # rewrite the sections from the last one back, so indices stay valid
        for arch, (count_at, first, end) in sorted(sections.items(), key=lambda kv: -kv[1][1]):
            rows = []
            for h, (size, flops, s, s2, n) in merged[arch].items():
                if n == 0:  # a footprint without a sample
                    continue
                mean = s / n
                dev = math.sqrt(max(s2 / n - mean * mean, 0.0))
                rows.append("%s\t%-15s\t%-15e\t%-15e\t%-15e\t%-15e\t%-15e\t%u" % (
                    h, size, float(flops), mean, dev, s, s2, n))
            lines[first:end] = rows
            lines[count_at] = str(len(rows))
        with open(os.path.join(out, "codelets", "45", name), "w") as f:
            f.write("\n".join(lines))


if __name__ == "__main__":
    main()

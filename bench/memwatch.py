#!/usr/bin/env python3
"""Run a command and report the peak memory of its process tree.

  bench/memwatch.py [--limit-mb N] [--interval S] [--pss] [--json FILE] -- COMMAND...

Samples /proc every S seconds (default 0.25) and records the peaks, over
the command and all its descendants, of
  rss_mb   VmRSS summed (what /usr/bin/time's "maximum resident set size"
           reports per process; counts a page once per mapping, so folded
           simulation buffers, one file page mapped many times, inflate it)
  anon_mb  RssAnon summed: private memory, what the processes really hold
  pss_mb   with --pss only: Pss summed (smaps_rollup): shared pages divided
           among their mappings, so a folded page counts once. Reading it
           walks every mapped page under the process's memory-map lock: with
           a large simulation's folded buffers (50,000 mappings, 400 GB
           mapped at 64 ranks) it took half a core and stalled the
           simulation's own mmaps, slowing it several times
With --limit-mb, the whole tree is killed (SIGKILL) when anon_mb passes N,
and the report says so (exit status 137). The report is one JSON line on
stderr and in FILE: {"rc", "wall_s", "rss_mb", "anon_mb", "pss_mb",
"killed_over_limit"}.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time


def children_map():
    kids = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                s = f.read()
        except OSError:
            continue
        ppid = int(s[s.rfind(")") + 2:].split()[1])
        kids.setdefault(ppid, []).append(int(d))
    return kids


def tree(pid):
    kids, out, todo = children_map(), [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def kb(path, key):
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit-mb", type=float, default=0)
    ap.add_argument("--interval", type=float, default=0.25)
    ap.add_argument("--json")
    ap.add_argument("--pss", action="store_true")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    if not cmd:
        ap.error("no command")
    t0 = time.time()
    p = subprocess.Popen(cmd, start_new_session=True)

    def stop(signum, _frame):  # a timeout or ^C ends the whole tree
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    peak = {"rss_mb": 0.0, "anon_mb": 0.0, "pss_mb": 0.0}
    killed = False
    while p.poll() is None:
        rss = anon = pss = 0
        for q in tree(p.pid):
            rss += kb("/proc/%d/status" % q, "VmRSS:")
            anon += kb("/proc/%d/status" % q, "RssAnon:")
            if a.pss:
                pss += kb("/proc/%d/smaps_rollup" % q, "Pss:")
        for k, v in (("rss_mb", rss), ("anon_mb", anon), ("pss_mb", pss)):
            peak[k] = max(peak[k], v / 1024.0)
        if a.limit_mb and anon / 1024.0 > a.limit_mb:
            killed = True
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
            break
        time.sleep(a.interval)
    rc = p.wait()
    rep = {"rc": 137 if killed else rc, "wall_s": round(time.time() - t0, 2),
           "killed_over_limit": killed}
    rep.update({k: round(v, 1) for k, v in peak.items() if a.pss or k != "pss_mb"})
    line = json.dumps(rep)
    print(line, file=sys.stderr)
    if a.json:
        with open(a.json, "w") as f:
            f.write(line + "\n")
    sys.exit(rep["rc"] if rep["rc"] >= 0 else 128 - rep["rc"])


if __name__ == "__main__":
    main()

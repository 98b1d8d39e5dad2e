#!/usr/bin/python3
"""Summarise a oneDNN verbose log (ONEDNN_VERBOSE=1) by primitive.

  ONEDNN_VERBOSE=1 build/apps/hyfi-train ... > hyfi.log
  ONEDNN_VERBOSE=1 /usr/bin/python3 bench/torch_train.py ... > torch.log
  bench/dnnl_verbose_summary.py hyfi.log --steps 20 [--by kind|impl|call] [--top 30]

Only "exec" lines count. Times are oneDNN's own per-call wall times (ms), so
calls that ran concurrently on several StarPU workers add up to more than the
wall time. --steps divides the totals to per-step figures (pass the number of
steps the log covers). --skip N drops the first N exec lines (warm-up).

Groups:
  kind  primitive kind + propagation (convolution forward_training, reorder, ...)
  impl  kind + propagation + implementation (jit:avx2, gemm:jit, simple:any, ...)
  call  impl + the memory formats and the problem descriptor (one line per shape)
"""
import argparse
import collections
import sys


def parse(path, skip):
    n = 0
    for line in open(path, errors="replace"):
        if not (line.startswith("onednn_verbose,exec,") or line.startswith("dnnl_verbose,exec,")):
            continue
        f = line.rstrip("\n").split(",")
        # marker,exec,engine,primitive,impl,prop,mds,attrs,aux,problem,time
        if len(f) < 11:
            continue
        n += 1
        if n <= skip:
            continue
        try:
            t = float(f[-1])
        except ValueError:
            continue
        yield {"kind": f[3], "impl": f[4], "prop": f[5], "mds": f[6], "attrs": f[7],
               "aux": f[8], "problem": ",".join(f[9:-1]), "ms": t}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("log")
    ap.add_argument("--by", choices=["kind", "impl", "call"], default="impl")
    ap.add_argument("--steps", type=float, default=1.0)
    ap.add_argument("--skip", type=int, default=0)
    ap.add_argument("--top", type=int, default=40)
    a = ap.parse_args()
    tot = collections.defaultdict(float)
    cnt = collections.Counter()
    for r in parse(a.log, a.skip):
        if a.by == "kind":
            k = "%s %s" % (r["kind"], r["prop"])
        elif a.by == "impl":
            k = "%s %s %s" % (r["kind"], r["prop"], r["impl"])
        else:
            k = "%s %s %s | %s | %s %s" % (r["kind"], r["prop"], r["impl"], r["mds"], r["aux"],
                                           r["problem"])
        tot[k] += r["ms"]
        cnt[k] += 1
    total = sum(tot.values())
    if not total:
        sys.exit("no oneDNN exec lines in %s (ONEDNN_VERBOSE=1 set?)" % a.log)
    print("%10s %7s %8s %6s  %s" % ("ms/step", "%", "calls/st", "ms/call", "group"))
    for k, v in sorted(tot.items(), key=lambda kv: -kv[1])[:a.top]:
        print("%10.2f %6.1f%% %8.1f %6.3f  %s" % (v / a.steps, 100 * v / total, cnt[k] / a.steps,
                                                  v / cnt[k], k))
    print("%10.2f %6.1f%% %8.1f %6s  total" % (total / a.steps, 100.0, sum(cnt.values()) / a.steps,
                                               ""))


if __name__ == "__main__":
    main()

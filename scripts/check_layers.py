#!/usr/bin/env python3
"""Calls between the engine's files: which file calls into which, from the
object files' symbol tables (nm), and the circles among them.

usage: check_layers.py OBJDIR... [--graph]
A file "calls into" another when it references a global symbol the other
defines. Exit 1 when two files reach each other (a strongly connected
component of more than one file), naming the circle; --graph prints the
edges. The engine's intended layers are in docs/architecture.md."""
import os
import subprocess
import sys


def symbols(obj):
    out = subprocess.run(["nm", "--defined-only", "-g", obj], capture_output=True, text=True,
                         check=True).stdout
    defined = {l.split()[-1] for l in out.splitlines() if len(l.split()) == 3}
    out = subprocess.run(["nm", "--undefined-only", "-g", obj], capture_output=True, text=True,
                         check=True).stdout
    undefined = {l.split()[-1] for l in out.splitlines() if l.split()}
    return defined, undefined


def sccs(nodes, edges):
    index, low, stack, on, res = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            res.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return res


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    defs, undefs = {}, {}
    for d in (a for a in sys.argv[1:] if not a.startswith("--")):
        objs = sorted(f for f in os.listdir(d) if f.endswith(".o"))
        if not objs:
            print(f"check_layers: no object files in {d}", file=sys.stderr)
            return 2
        for o in objs:
            n = o[:-2]  # "compile.c.o" -> "compile.c"
            defs[n], undefs[n] = symbols(os.path.join(d, o))
    owner = {s: f for f, ds in defs.items() for s in ds}
    edges = {f: set() for f in defs}
    for f, us in undefs.items():
        for s in us:
            if s in owner and owner[s] != f:
                edges[f].add(owner[s])
    if "--graph" in sys.argv:
        for f in sorted(edges):
            print(f"{f} -> {' '.join(sorted(edges[f])) or '(nothing)'}")
    bad = [c for c in sccs(edges.keys(), edges) if len(c) > 1]
    for c in bad:
        why = []
        for f in c:
            for t in sorted(edges[f] & set(c)):
                syms = sorted(s for s in undefs[f] if owner.get(s) == t)
                why.append(f"  {f} -> {t}: {', '.join(syms[:4])}{' ...' if len(syms) > 4 else ''}")
        print("circle: " + " <-> ".join(c) + "\n" + "\n".join(why))
    if bad:
        return 1
    print(f"check_layers: {len(edges)} files, no circle")
    return 0


if __name__ == "__main__":
    sys.exit(main())

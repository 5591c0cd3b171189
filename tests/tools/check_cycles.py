#!/usr/bin/env python3
"""No circles between the files of one layer.

The graph: file A -> file B when A.o references (nm: U) a function B.o defines (nm: T/W), both
in the same layer (src/<layer>/). A strongly connected component of two or more files is a
circle: those files cannot be understood, tested or replaced one without the others. Every
circle must be named in the allowlist (tests/tools/cycles.allow): the declared module internals
and the circles an issue-30 step will remove (that step deletes its line). A circle that is not
covered fails; an allowlist line that matches no circle any more is reported as stale (delete
it). Upward calls (a lower layer naming an upper layer's function) fail too; the link would
refuse most of them, this names them.

Prints the numbers per layer (for before/after notes): files, cross-file edges (same layer),
circles and the files in them, modules (a declared module's files counted as one) and the circles
between modules, which are the ones the allowlist must name.

Usage: check_cycles.py --src SRC_DIR [--allow FILE] ARCHIVE_OR_OBJECT...
  (ctest passes the layer libraries, libmesh_<layer>.a; a single archive of every layer works
  too: each object is placed by its source's name under SRC_DIR/<layer>/)
"""
import argparse
import fnmatch
import os
import subprocess
import sys

LAYERS = ["base", "core", "http", "net", "node", "app"]


def source_layers(src):
    """basename.c -> layer (basenames are unique: check_layers.sh)."""
    where = {}
    for layer in LAYERS:
        d = os.path.join(src, layer)
        for f in sorted(os.listdir(d)) if os.path.isdir(d) else []:
            if f.endswith(".c"):
                where[f] = layer
    return where


def symbols(paths):
    """{object basename.c: (defined functions, undefined symbols)} from nm."""
    out = subprocess.run(["nm", "-A", "--no-sort"] + paths, check=True, capture_output=True,
                         text=True).stdout
    objs = {}
    for line in out.splitlines():
        # "lib.a:file.c.o:<addr> T name" or "file.c.o:         U name"
        head, _, rest = line.rpartition(":")
        if not head:
            continue
        obj = os.path.basename(head.split(":")[-1])
        parts = rest.split()
        if len(parts) < 2:
            continue
        kind, name = parts[-2], parts[-1]
        if not obj.endswith(".o"):
            continue
        c = obj[:-2]  # x.c.o -> x.c (CMake's object names)
        defs, refs = objs.setdefault(c, (set(), set()))
        if kind in ("T", "W"):
            defs.add(name)
        elif kind == "U":
            refs.add(name)
    return objs


def sccs(nodes, edges):
    """Tarjan's strongly connected components (iterative), each sorted."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                    advanced = True
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                out.append(sorted(comp))
    return out


def read_allow(path):
    """Lines "module LAYER NAME PATTERN... # why" (the files matching are one module: their circle
    is its inside) and "circle LAYER NAME... # the step that removes it" (NAME: a file or a
    module). Returns ({layer: [(name, patterns)]}, [(line number, layer, {names}, text)])."""
    modules, circles = {}, []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            text = line.split("#", 1)[0].split()
            if not text:
                continue
            if text[0] == "module" and len(text) >= 4 and text[1] in LAYERS:
                modules.setdefault(text[1], []).append((text[2], text[3:]))
            elif text[0] == "circle" and len(text) >= 4 and text[1] in LAYERS:
                circles.append((n, text[1], set(text[2:]), line.strip()))
            else:
                sys.exit(f"{path}:{n}: want 'module LAYER NAME PATTERN...' or "
                         "'circle LAYER NAME...'")
    return modules, circles


def module_of(c, mods):
    return next((name for name, pats in mods if any(fnmatch.fnmatchcase(c, p) for p in pats)), c)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--src", required=True)
    ap.add_argument("--allow", default=os.path.join(os.path.dirname(__file__), "cycles.allow"))
    ap.add_argument("objects", nargs="+")
    a = ap.parse_args()

    where = source_layers(a.src)
    objs = symbols(a.objects)
    owner = {}  # function -> defining file
    for c, (defs, _) in objs.items():
        for s in defs:
            owner.setdefault(s, c)
    bad = 0
    unknown = sorted(c for c in objs if c not in where)
    for c in unknown:
        print(f"{c}: an object with no source under {a.src}/<layer>/")
        bad = 1

    rank = {name: i for i, name in enumerate(LAYERS)}
    edges = {}  # same-layer file graph
    calls = {}  # (a, b) -> functions, for the report
    down = 0  # (file, function of a lower layer) pairs
    for c, (_, refs) in objs.items():
        if c not in where:
            continue
        for s in refs:
            d = owner.get(s)
            if d is None or d == c or d not in where:
                continue
            la, lb = where[c], where[d]
            if la == lb:
                edges.setdefault(c, set()).add(d)
                calls.setdefault((c, d), set()).add(s)
            elif rank[lb] > rank[la]:
                print(f"{la}/{c} calls {s} of {lb}/{d}, a layer above it")
                bad = 1
            else:
                down += 1

    modules, allowed = read_allow(a.allow)
    print("files: .c files; edges: A calls a function of B, same layer; circles: strongly")
    print("connected sets of files (then of modules: a declared module's files counted as one)")
    print(f"{'layer':6} {'files':>5} {'edges':>5} {'circles':>7} {'in them':>7} {'modules':>7} "
          f"{'circles':>7}")
    tot = [0] * 6
    found = []
    for layer in LAYERS:
        files = sorted(c for c in objs if where.get(c) == layer)
        e = {c: edges.get(c, set()) for c in files}
        ne = sum(len(v) for v in e.values())
        circles = [comp for comp in sccs(files, e) if len(comp) > 1]
        nin = sum(len(comp) for comp in circles)
        mods = modules.get(layer, [])
        me = {}
        for c, v in e.items():
            for d in v:
                x, y = module_of(c, mods), module_of(d, mods)
                if x != y:
                    me.setdefault(x, set()).add(y)
        mnodes = sorted({module_of(c, mods) for c in files})
        mcircles = [comp for comp in sccs(mnodes, me) if len(comp) > 1]
        row = (len(files), ne, len(circles), nin, len(mnodes), len(mcircles))
        print(f"{layer:6} {row[0]:5} {row[1]:5} {row[2]:7} {row[3]:7} {row[4]:7} {row[5]:7}")
        tot = [t + v for t, v in zip(tot, row)]
        found += [(layer, comp, mods) for comp in mcircles]
        for name, pats in mods:
            inside = [c for c in files if module_of(c, mods) == name]
            print(f"         module {name}: {' '.join(inside)}")
    print(f"{'all':6} {tot[0]:5} {tot[1]:5} {tot[2]:7} {tot[3]:7} {tot[4]:7} {tot[5]:7}"
          f"  (+{down} file->function references down a layer)")

    used = set()
    for layer, comp, mods in found:
        rule = next((r for r in allowed if r[1] == layer and set(comp) <= r[2]), None)
        inner = sorted((x, y) for (x, y) in calls
                       if module_of(x, mods) in comp and module_of(y, mods) in comp
                       and module_of(x, mods) != module_of(y, mods))
        detail = "; ".join(f"{x}->{y} ({', '.join(sorted(calls[(x, y)])[:4])}"
                           f"{', ...' if len(calls[(x, y)]) > 4 else ''})" for x, y in inner)
        if rule:
            used.add(rule[0])
            print(f"allowed  {layer}: {' '.join(comp)}  [cycles.allow:{rule[0]}]")
            if set(comp) != rule[2]:
                print(f"shrunk   cycles.allow:{rule[0]}: the circle is {' '.join(comp)} now, "
                      "update the line")
        else:
            print(f"CIRCLE   {layer}: {' '.join(comp)}: {detail}")
            bad = 1
    for n, layer, names, line in allowed:
        if n not in used:
            print(f"stale    cycles.allow:{n}: no circle of these any more, delete the line: "
                  f"{line}")
    if bad:
        print("check_cycles: FAILED (no upward calls; break a circle, or name it in "
              "tests/tools/cycles.allow with the step that removes it)")
    return bad


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""No process globals: no state outside the objects the node owns (issue 30 S10).

Reads the layer libraries (nm --defined-only, System V format, which names each symbol's
section) and lists every symbol in a writable data section (.data, .data.rel, .data.rel.local,
.bss, .tdata, .tbss; not .rodata or .data.rel.ro, which are constants). Each one must be named
in the allowlist (tests/tools/globals.allow) with the reason it is not state the node should own:
the documented exceptions (logging settings, libcurl's global init, unique temp names) and
scratch buffers that hold nothing from one call to the next. A symbol not listed fails; an
allowlist line that matches no symbol any more is reported stale (delete it) and fails too.
The composition root (app/main.c) is not in the libraries and is not checked.

Allowlist lines: "layer/file.c symbol reason..."; symbol matches the symbol itself and a
function-local static's numbered copies (slab matches slab.0, slab.1).

Usage: check_globals.py --src SRC_DIR [--allow FILE] ARCHIVE...
"""
import argparse
import os
import re
import subprocess
import sys

from check_cycles import LAYERS, source_layers  # noqa: E402 (the same file -> layer map)
WRITABLE = re.compile(r"^\.(data|bss|tdata|tbss)(\.rel(\.local)?)?(\.|$)")


def globals_of(archives, where):
    """(layer/file.c, symbol) of every symbol in a writable section."""
    found = set()
    for a in archives:
        out = subprocess.run(["nm", "--defined-only", "-A", "-f", "sysv", a], check=True,
                             capture_output=True, text=True).stdout
        for line in out.splitlines():
            parts = [p.strip() for p in line.split("|")]
            if len(parts) < 7 or ":" not in parts[0]:
                continue
            sect = parts[-1]
            if not WRITABLE.match(sect) or sect.startswith(".data.rel.ro"):
                continue
            head, sym = parts[0].rsplit(":", 1)
            if sym.startswith("__odr_asan."):
                continue  # ASan's one-definition-rule markers (sanitizer builds), not state
            obj = head.rsplit(":", 1)[-1]
            base = os.path.basename(obj)
            if base.endswith(".o"):
                base = base[:-2]
            layer = where.get(base, "?")
            found.add((f"{layer}/{base}", sym))
    return found


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", required=True)
    ap.add_argument("--allow", default=os.path.join(os.path.dirname(__file__), "globals.allow"))
    ap.add_argument("archives", nargs="+")
    args = ap.parse_args()
    allow = []
    with open(args.allow) as f:
        for n, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip() if line.lstrip().startswith("#") else line.strip()
            if not line:
                continue
            parts = line.split(None, 2)
            if len(parts) < 3:
                print(f"{args.allow}:{n}: want 'layer/file.c symbol reason': {line}")
                return 1
            allow.append((parts[0], parts[1], n))
    found = globals_of(args.archives, source_layers(args.src))
    used = set()
    bad = []
    for file, sym in sorted(found):
        hit = [a for a in allow if a[0] == file and (sym == a[1] or sym.startswith(a[1] + "."))]
        if hit:
            used.update(a[2] for a in hit)
        else:
            bad.append((file, sym))
    stale = [a for a in allow if a[2] not in used]
    per_layer = {}
    for file, _ in found:
        per_layer[file.split("/")[0]] = per_layer.get(file.split("/")[0], 0) + 1
    print("writable statics per layer: " +
          ", ".join(f"{l} {per_layer.get(l, 0)}" for l in LAYERS) + f"; {len(found)} in all, "
          f"{len(allow)} allowlist lines")
    for file, sym in bad:
        print(f"process global not in {os.path.basename(args.allow)}: {file} {sym} "
              "(make it a field of the object that owns it, or list it with why)")
    for a in stale:
        print(f"stale line {a[2]} of {os.path.basename(args.allow)}: {a[0]} {a[1]} matches no "
              "symbol (delete it)")
    return 1 if bad or stale else 0


if __name__ == "__main__":
    sys.exit(main())

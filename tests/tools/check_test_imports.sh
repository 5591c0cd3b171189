#!/bin/sh
# Test code imports the shared harness, never another test module, and only one place decides
# where Python finds it (docs/testing.md, "The harness"):
#   - no Python file under tests/ or bench/ imports a test module (test_*) or a conftest, or loads
#     one by path (importlib);
#   - nothing under tests/ touches sys.path (tests/conftest.py needs no line: pytest puts its
#     directory, tests/, on sys.path), nor PYTHONPATH or site.addsitedir;
#   - a bench script (run outside pytest) may have one line, exactly
#     `sys.path.insert(0, os.path.join(<dir>[, ".."], "tests"))`, to import harness.*.
# Prints every violation; exit 1 if any. Argument: the repository root (default: this checkout).
set -eu
root="${1:-$(dirname "$0")/../..}"
cd "$root"
bad=0
say() { echo "$*"; bad=1; }

# code that changes the module search path (prose that names sys.path does not match)
path_change='sys\.path\.[a-z]+\(|sys\.path[[:space:]]*(\[[^]]*\][[:space:]]*)?\+?=[^=]|PYTHONPATH|addsitedir\('

py_tests=$(find tests -name node_modules -prune -o -name '*.py' -type f -print | sort)
bench=$(find bench -maxdepth 1 -type f | sort)
python_bench=""
for f in $bench; do
  case "$f" in *.py) python_bench="$python_bench $f"; continue ;; esac
  head -n 1 "$f" | grep -q '^#!.*python' && python_bench="$python_bench $f"
done

for f in $py_tests $python_bench; do
  grep -nE '^[[:space:]]*(from|import)[[:space:]]+(test_[A-Za-z0-9_]*|conftest)([[:space:].,]|$)' "$f" |
    while IFS= read -r l; do echo "$f:$l: imports a test module (shared code goes to tests/harness)"; done
  grep -nE '(import_module|SourceFileLoader|spec_from_file_location)[[:space:]]*\([^)]*(test_|conftest)' "$f" |
    while IFS= read -r l; do echo "$f:$l: loads a test module through importlib"; done
done | { grep . && exit 1 || exit 0; } || bad=1

for f in $py_tests; do
  grep -nE "$path_change" "$f" |
    while IFS= read -r l; do echo "$f:$l: changes where Python finds modules (only tests/conftest.py's directory is added, by pytest)"; done
done | { grep . && exit 1 || exit 0; } || bad=1

allowed='^sys\.path\.insert\(0, os\.path\.join\([A-Za-z_]+(, "\.\.")?, "tests"\)\)$'
for f in $python_bench; do
  n=0
  for l in $(grep -nE "$path_change" "$f" | cut -d: -f1); do
    line=$(sed -n "${l}p" "$f")
    if printf '%s\n' "$line" | grep -qE "$allowed"; then
      n=$((n + 1))
      [ "$n" -le 1 ] || say "$f:$l: a second path line (one is enough: tests/, then import harness.*)"
    else
      say "$f:$l: $line: not the one allowed path line (sys.path.insert(0, os.path.join(<dir>, \"tests\")))"
    fi
  done
done
exit $bad

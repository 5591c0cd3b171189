#!/bin/sh
# Includes only go down: a file in src/LAYER/ may include headers of its own layer or of the
# layers below it (order: base core http net node app). Prints every violation; exit 1 if any.
# The build refuses upward includes of the .c files too (each layer is a library that sees only
# its own and lower include directories: CMakeLists.txt); this check also sees headers no .c of
# the layer includes, and two rules the compiler cannot: header basenames are unique across
# src/*/ (a duplicate would silently resolve to the includer's own directory), and src/core/ is
# pure (no <uv.h>, no header of http/ or net/ — which the layer order already forbids).
set -eu
src="${1:-$(dirname "$0")/../../src}"
layers="base core http net node app"
rank() { i=0; for l in $layers; do [ "$l" = "$1" ] && { echo $i; return; }; i=$((i + 1)); done; echo -1; }
bad=0
for dir in "$src"/*/; do
  layer=$(basename "$dir")
  r=$(rank "$layer")
  [ "$r" -ge 0 ] || { echo "src/$layer: not a known layer ($layers)"; bad=1; continue; }
  for f in "$dir"*.c "$dir"*.h; do
    [ -f "$f" ] || continue
    for h in $(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$f"); do
      found=""
      for l in $layers; do [ -f "$src/$l/$h" ] && found=$l; done
      [ -n "$found" ] || { echo "$f: includes $h, which is in no layer"; bad=1; continue; }
      if [ "$(rank "$found")" -gt "$r" ]; then
        echo "$f ($layer) includes $h from $found, a layer above it"
        bad=1
      fi
    done
  done
done
[ -z "$(find "$src" -maxdepth 1 -name '*.[ch]')" ] || { echo "src/: files outside a layer"; bad=1; }
dups=$(for l in $layers; do for h in "$src/$l"/*.h; do [ -f "$h" ] && basename "$h"; done; done |
  sort | uniq -d)
for h in $dups; do
  echo "$h: more than one layer has a header of this name:" "$src"/*/"$h"
  bad=1
done
for f in "$src"/core/*.[ch]; do
  [ -f "$f" ] || continue
  if grep -q '^[[:space:]]*#[[:space:]]*include[[:space:]]*<uv\.h>' "$f"; then
    echo "$f: core is pure, includes <uv.h>"
    bad=1
  fi
done
exit $bad

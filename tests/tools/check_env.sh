#!/bin/sh
# Tunables, not the environment (issue 30 S11): every MESH_LLM_* variable is read once at start,
# by node/tunables.c:tunables_load (config_parse for the node, cli_dispatch for the commands) or,
# for the four that stand for an option, by node/config*.c with the options; call sites get the
# values at init (config_t.tun, the opts structs of net/). So no getenv("MESH_LLM_...") and no
# env_ms / options_env_ms call outside node/{options,tunables,config*}.c (and base/util.c, which
# defines env_ms). A read still waiting for its step is listed below as "file VARIABLE why"; a
# read not listed, or a listed one that is gone, fails. Prints each mismatch; exit 1 if any.
set -eu
src="${1:-$(dirname "$0")/../../src}"
allowed='
'
found=$(cd "$src" && grep -nE 'getenv\("MESH_LLM_|getenv\([A-Z_]+_ENV\)|(^|[^_a-z])(options_)?env_ms0?\(' */*.c |
  grep -vE '^(node/options|node/tunables|node/config[a-z_]*|base/util)\.c:' |
  sed -nE 's/^([^:]+):[0-9]+:.*(MESH_LLM_[A-Z0-9_]+).*/\1 \2/p; t; s/^([^:]+):([0-9]+):.*/\1 ?line\2/p' |
  sort -u)
bad=0
echo "$found" | { rc=0; while read -r f v; do
  [ -n "$f" ] || continue
  echo "$allowed" | awk -v f="$f" -v v="$v" '$1 == f && $2 == v { ok = 1 } END { exit !ok }' || {
    echo "src/$f: reads $v from the environment: take it from the tunables given at init" \
      "(config_t.tun, an opts struct), or list it here with why"
    rc=1
  }
done; exit $rc; } || bad=1
echo "$allowed" | { rc=0; while read -r f v rest; do
  [ -n "$f" ] || continue
  echo "$found" | awk -v f="$f" -v v="$v" '$1 == f && $2 == v { ok = 1 } END { exit !ok }' ||
    { echo "src/$f: $v is listed but no longer read there: drop it from the list"; rc=1; }
done; exit $rc; } || bad=1
exit $bad

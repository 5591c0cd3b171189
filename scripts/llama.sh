#!/bin/sh
# Locate or build the pinned llama.cpp binaries (llama-server, ggml-rpc-server, llama-quantize,
# llama-bench). Prints the directory that holds them on stdout; progress goes to stderr.
#
# Usage: scripts/llama.sh [--cache-dir | --cache-subdir]
# Order: $MESH_LLM_BIN_DIR, then llama-server + rpc-server on PATH, then the build cache
# ($MESH_LLM_CACHE, default ~/.cache/mesh-llm/llama.cpp/<pin>/bin), building it if absent.
set -eu
PIN_PKG="node-llama-cpp@3.22.1"
TGZ_SHA="a0d9dd80eacd2ab1cfe71aee57ac8a806487fd70b3d2a38fbec637752d9e5c5f"
BUNDLE_SHA="5f5d1105d5df040738d87b8290e5d17e7362131cdcfdb0831618e0ea528b4a51"
CACHE="${MESH_LLM_CACHE:-$HOME/.cache/mesh-llm}"
# FLAVOR names the build options below: a change of options gets a new cache directory.
FLAVOR="noamx"
ROOT="$CACHE/llama.cpp/$(echo "$PIN_PKG" | tr '@' '-')-$FLAVOR"
BIN="$ROOT/bin"
TARGETS="llama-server ggml-rpc-server llama-quantize llama-bench"
# --cache-dir: where the pinned build lives (built or not); --cache-subdir: the same, relative to
# the cache (CMakeLists.txt records both for the binary's own search, src/node/bin_find.c)
case "${1:-}" in
  --cache-dir) echo "$BIN"; exit 0 ;;
  --cache-subdir) echo "${BIN#"$CACHE"/}"; exit 0 ;;
esac

say() { echo "mesh-llm setup: $*" >&2; }

has_bins() { [ -x "$1/llama-server" ] && { [ -x "$1/ggml-rpc-server" ] || [ -x "$1/rpc-server" ]; }; }

if [ -n "${MESH_LLM_BIN_DIR:-}" ]; then
  if has_bins "$MESH_LLM_BIN_DIR"; then echo "$MESH_LLM_BIN_DIR"; exit 0; fi
  say "MESH_LLM_BIN_DIR=$MESH_LLM_BIN_DIR has no llama-server and rpc-server; building the pinned llama.cpp instead"
fi
if [ -z "${MESH_LLM_FORCE_BUILD:-}" ] && command -v llama-server >/dev/null 2>&1; then
  d=$(dirname "$(command -v llama-server)")
  if has_bins "$d"; then echo "$d"; exit 0; fi
fi
if [ -f "$BIN/.complete" ]; then echo "$BIN"; exit 0; fi

mkdir -p "$ROOT"
exec 9>"$ROOT/.lock"
flock 9
if [ -f "$BIN/.complete" ]; then echo "$BIN"; exit 0; fi

say "building llama.cpp from $PIN_PKG (one time, about 7 minutes on 2 cores) into $ROOT"
work="$ROOT/work"
rm -rf "$work"; mkdir -p "$work"
(cd "$work" && npm pack --silent "$PIN_PKG" >/dev/null 2>&1) || { say "npm pack $PIN_PKG failed (is the npm registry reachable?)"; exit 1; }
tgz=$(ls "$work"/node-llama-cpp-*.tgz)
echo "$TGZ_SHA  $tgz" | sha256sum -c --quiet - || { say "sha256 mismatch for $tgz"; exit 1; }
tar -xzf "$tgz" -C "$work" package/llama/gitRelease.bundle
echo "$BUNDLE_SHA  $work/package/llama/gitRelease.bundle" | sha256sum -c --quiet - || { say "sha256 mismatch for the llama.cpp bundle"; exit 1; }
git -c advice.detachedHead=false clone -q "$work/package/llama/gitRelease.bundle" "$work/src" 2>&1 | grep -v 'detached HEAD' >&2 || true
[ -f "$work/src/CMakeLists.txt" ] || { say "git clone of the bundle failed"; exit 1; }
gen=""; command -v ninja >/dev/null 2>&1 && gen="-G Ninja"
# Native CPU code, but without ggml's AMX kernels: on CPUs with AMX they crash llama-server with
# a segfault in ggml_backend_amx_mul_mat on small Q8_0 models (TinyStories-656K-Q8_0). Explicit
# -mno-* flags win over -march=native whatever their order.
case "$(uname -m)" in
  x86_64 | i?86) noamx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" ;;
  *) noamx="" ;; # the flags are x86-only; other CPUs have no AMX
esac
# shellcheck disable=SC2086
cmake -S "$work/src" -B "$work/build" $gen -DCMAKE_BUILD_TYPE=Release -DGGML_RPC=ON \
  -DCMAKE_C_FLAGS="$noamx" -DCMAKE_CXX_FLAGS="$noamx" \
  -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=OFF >"$work/cmake.log" 2>&1 \
  || { tail -30 "$work/cmake.log" >&2; say "cmake configure failed (log: $work/cmake.log)"; exit 1; }
jobs=$(nproc 2>/dev/null || echo 2)
# shellcheck disable=SC2086
cmake --build "$work/build" -j "$jobs" --target $TARGETS >"$work/build.log" 2>&1 \
  || { tail -30 "$work/build.log" >&2; say "llama.cpp build failed (log: $work/build.log)"; exit 1; }
rm -rf "$BIN"; mkdir -p "$BIN"
for t in $TARGETS; do cp "$work/build/bin/$t" "$BIN/"; done
(cd "$work/src" && git describe --tags --always 2>/dev/null || true) >"$BIN/VERSION"
rm -rf "$work"
touch "$BIN/.complete"
say "llama.cpp $(cat "$BIN/VERSION") ready in $BIN"
echo "$BIN"

#!/bin/sh
# Locate or build the pinned llama.cpp binaries (llama-server, ggml-rpc-server, llama-quantize,
# llama-bench) for the flavour this machine can use. Prints the directory that holds them on
# stdout; progress goes to stderr.
#
# Usage: scripts/llama.sh [--cache-dir | --cache-subdir | --flavour]
# Order: $MESH_LLM_BIN_DIR, then llama-server + rpc-server on PATH (unless MESH_LLM_FLAVOR is
# set), then the build cache ($MESH_LLM_CACHE, default ~/.cache/mesh-llm/llama.cpp/<pin>-<key>/bin,
# one directory per flavour and pin), building it if absent.
#
# Flavours (docs/install.md#gpus): MESH_LLM_FLAVOR=auto (default) | cpu | vulkan | cuda | rocm.
#   auto   CUDA when an NVIDIA GPU is present, ROCm when /dev/kfd is, Vulkan when a GPU render
#          node and the Vulkan loader are, else CPU. A CPU-type Vulkan device (Mesa's lavapipe)
#          never makes auto pick Vulkan.
#   cpu    the pinned source, static, native code (the fastest on a CPU).
#   vulkan the pinned source with dynamically loaded ggml backends (GGML_BACKEND_DL) and the
#   cuda   Vulkan or CUDA backend prebuilt from the very same pin by node-llama-cpp (npm,
#          pinned by npm's sha512 integrity): no Vulkan SDK, no nvcc, no long GPU build.
#   rocm   the pinned source with GGML_HIP (needs ROCm's hipcc; untested here).
# A GPU flavour that cannot be set up says why and falls back to the CPU flavour, never silently.
set -eu
PIN_PKG="node-llama-cpp@3.22.1"
TGZ_SHA="a0d9dd80eacd2ab1cfe71aee57ac8a806487fd70b3d2a38fbec637752d9e5c5f"
BUNDLE_SHA="5f5d1105d5df040738d87b8290e5d17e7362131cdcfdb0831618e0ea528b4a51"
# the prebuilt GPU backends of the same pin (npm view PKG dist.integrity)
VULKAN_PKG="@node-llama-cpp/linux-x64-vulkan@3.22.1"
VULKAN_SRI="sha512-bBxqU+JOcBu1nb5Qj2zcMci+JByT1E8EajHvYodyNfVIPkEhXh+/HMwR1/BT7xP08YK0hks+kM8fglER0P8JEg=="
CUDA_PKG="@node-llama-cpp/linux-x64-cuda@3.22.1"
CUDA_SRI="sha512-8rQCjyNNLZJUFit+YpjwlC4hwkKgOMIkB2wuycKBf8NU2O3ySKbiWZQ8aw9ku2nUTXjSnUIrE6KB88itduTBuA=="
CACHE="${MESH_LLM_CACHE:-$HOME/.cache/mesh-llm}"
TARGETS="llama-server ggml-rpc-server llama-quantize llama-bench"

say() { echo "mesh-llm setup: $*" >&2; }

# ---- which flavour ----
detect_flavour() {
  if [ -e /dev/nvidiactl ] || { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; }; then
    echo cuda
  elif [ -e /dev/kfd ]; then
    echo rocm
  elif ls /dev/dri/renderD* >/dev/null 2>&1 && { ldconfig -p 2>/dev/null | grep -q 'libvulkan\.so\.1'; }; then
    echo vulkan
  else
    echo cpu
  fi
}
want="${MESH_LLM_FLAVOR:-auto}"
case "$want" in
  auto) FLAVOUR=$(detect_flavour) ;;
  cpu | vulkan | cuda | rocm) FLAVOUR=$want ;;
  *) say "MESH_LLM_FLAVOR=$want is not a flavour: auto, cpu, vulkan, cuda or rocm"; exit 2 ;;
esac

# KEY names a flavour's build options: a change of options gets a new cache directory.
key_of() {
  case "$1" in
    cpu) echo noamx ;;
    vulkan) echo vulkan-dl ;;
    cuda) echo cuda-dl ;;
    rocm) echo rocm ;;
  esac
}
bin_of() { echo "$CACHE/llama.cpp/$(echo "$PIN_PKG" | tr '@' '-')-$(key_of "$1")/bin"; }
# A GPU flavour auto picked whose setup failed before (its .failed says why) stays the CPU one
# until MESH_LLM_FLAVOR asks for it again
if [ "$want" = auto ] && [ "$FLAVOUR" != cpu ] && [ -f "$(dirname "$(bin_of "$FLAVOUR")")/.failed" ]; then
  FLAVOUR=cpu
fi

# --cache-dir: where the flavour's pinned build lives (built or not); --cache-subdir: the same,
# relative to the cache (CMakeLists.txt records both for the binary's own search,
# src/node/bin_find.c); --flavour: the flavour this machine gets
case "${1:-}" in
  --cache-dir) bin_of "$FLAVOUR"; exit 0 ;;
  --cache-subdir) b=$(bin_of "$FLAVOUR"); echo "${b#"$CACHE"/}"; exit 0 ;;
  --flavour) echo "$FLAVOUR"; exit 0 ;;
esac

# ---- building ----

# Show a build's progress: one line per 10% of ninja's "[n/N]" (or make's "[ n%]") steps.
progress() {
  awk -v what="$1" '
    { print > logfile; fflush(logfile) }
    match($0, /^\[[0-9]+\/[0-9]+\]/) {
      split(substr($0, 2, RLENGTH - 2), a, "/"); p = int(100 * a[1] / a[2])
    }
    match($0, /^\[ *[0-9]+%\]/) { p = int(substr($0, 2, RLENGTH - 3)) }
    p >= next_p { printf "mesh-llm setup: %s: %d%%\n", what, p > "/dev/stderr"; next_p = p - p % 10 + 10 }
    BEGIN { next_p = 10; p = 0 }
  ' logfile="$2"
}

# The pinned source, checked, cloned into $1/src.
fetch_source() {
  work=$1
  (cd "$work" && npm pack --silent "$PIN_PKG" >/dev/null 2>&1) || { say "npm pack $PIN_PKG failed (is the npm registry reachable?)"; return 1; }
  tgz=$(ls "$work"/node-llama-cpp-*.tgz)
  echo "$TGZ_SHA  $tgz" | sha256sum -c --quiet - || { say "sha256 mismatch for $tgz"; return 1; }
  tar -xzf "$tgz" -C "$work" package/llama/gitRelease.bundle
  echo "$BUNDLE_SHA  $work/package/llama/gitRelease.bundle" | sha256sum -c --quiet - || { say "sha256 mismatch for the llama.cpp bundle"; return 1; }
  git -c advice.detachedHead=false clone -q "$work/package/llama/gitRelease.bundle" "$work/src" 2>&1 | grep -v 'detached HEAD' >&2 || true
  [ -f "$work/src/CMakeLists.txt" ] || { say "git clone of the bundle failed"; return 1; }
}

# An npm package checked against its pinned sha512 integrity, unpacked into $1/pkg.
fetch_npm() {
  work=$1 pkg=$2 sri=$3
  (cd "$work" && npm pack --silent "$pkg" >/dev/null 2>&1) || { say "npm pack $pkg failed (is the npm registry reachable?)"; return 1; }
  tgz=$(ls -t "$work"/*.tgz | head -1)
  got="sha512-$(openssl dgst -sha512 -binary "$tgz" | base64 -w0)"
  [ "$got" = "$sri" ] || { say "integrity mismatch for $pkg ($got)"; return 1; }
  mkdir -p "$work/pkg" && tar -xzf "$tgz" -C "$work/pkg"
}

# Build flavour $1 into its cache directory. 0, or 1 with the reason said.
build_flavour() {
  flavour=$1
  bin=$(bin_of "$flavour")
  root=$(dirname "$bin")
  mkdir -p "$root"
  work="$root/work"
  rm -rf "$work"; mkdir -p "$work"
  # Native CPU code, but without ggml's AMX kernels: on CPUs with AMX they crash llama-server
  # with a segfault in ggml_backend_amx_mul_mat on small Q8_0 models (TinyStories-656K-Q8_0).
  # Explicit -mno-* flags win over -march=native whatever their order.
  case "$(uname -m)" in
    x86_64 | i?86) noamx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" ;;
    *) noamx="" ;; # the flags are x86-only; other CPUs have no AMX
  esac
  targets=$TARGETS native=""
  case "$flavour" in
    cpu) opts="-DBUILD_SHARED_LIBS=OFF"; minutes=7 ;;
    vulkan | cuda)
      # ggml's backends as shared modules beside the binaries: the CPU one built here (native),
      # the GPU one from npm; $ORIGIN rpaths keep the directory relocatable
      # (ggml refuses GGML_NATIVE with GGML_BACKEND_DL: -march=native in the flags instead)
      opts="-DBUILD_SHARED_LIBS=ON -DGGML_BACKEND_DL=ON -DGGML_NATIVE=OFF -DCMAKE_BUILD_RPATH_USE_ORIGIN=ON"
      native="-march=native"
      targets="$targets ggml-cpu"; minutes=9 ;;
    rocm)
      command -v hipconfig >/dev/null 2>&1 || { say "the rocm flavour needs ROCm (hipconfig, hipcc): not installed"; return 1; }
      opts="-DBUILD_SHARED_LIBS=OFF -DGGML_HIP=ON"; minutes=30 ;;
  esac
  say "building llama.cpp from $PIN_PKG, $flavour flavour (one time, about $minutes minutes on 2 cores) into $root"
  fetch_source "$work" || return 1
  gen=""; command -v ninja >/dev/null 2>&1 && gen="-G Ninja"
  # shellcheck disable=SC2086
  cmake -S "$work/src" -B "$work/build" $gen -DCMAKE_BUILD_TYPE=Release -DGGML_RPC=ON $opts \
    -DCMAKE_C_FLAGS="$native $noamx" -DCMAKE_CXX_FLAGS="$native $noamx" \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF >"$work/cmake.log" 2>&1 \
    || { tail -30 "$work/cmake.log" >&2; say "cmake configure failed (log: $work/cmake.log)"; return 1; }
  jobs=$(nproc 2>/dev/null || echo 2)
  # shellcheck disable=SC2086
  { cmake --build "$work/build" -j "$jobs" --target $targets 2>&1; echo "rc=$?" >"$work/build.rc"; } \
    | progress "llama.cpp ($flavour)" "$work/build.log"
  grep -q '^rc=0$' "$work/build.rc" \
    || { tail -30 "$work/build.log" >&2; say "llama.cpp build failed (log: $work/build.log)"; return 1; }
  rm -rf "$bin"; mkdir -p "$bin"
  for t in $TARGETS; do cp "$work/build/bin/$t" "$bin/"; done
  case "$flavour" in
    vulkan | cuda)
      cp -P "$work"/build/bin/*.so* "$bin/"
      if [ "$flavour" = vulkan ]; then pkg=$VULKAN_PKG sri=$VULKAN_SRI lib=libggml-vulkan.so
      else pkg=$CUDA_PKG sri=$CUDA_SRI lib=libggml-cuda.so; fi
      fetch_npm "$work" "$pkg" "$sri" || return 1
      found=$(find "$work/pkg" -name "$lib" | head -1)
      [ -n "$found" ] || { say "$pkg has no $lib"; return 1; }
      cp "$found" "$bin/"
      # the backend must load: llama-server lists the devices it sees (none is not an error)
      out=$("$bin/llama-server" --list-devices 2>&1) \
        || { echo "$out" | tail -5 >&2; say "llama-server --list-devices failed with the $flavour backend"; return 1; }
      echo "$out" | grep -q 'Available devices' \
        || { echo "$out" | tail -5 >&2; say "the $flavour backend did not load"; return 1; }
      ;;
  esac
  (cd "$work/src" && git describe --tags --always 2>/dev/null || true) >"$bin/VERSION"
  echo "$flavour" >"$bin/FLAVOUR"
  rm -rf "$work"
  touch "$bin/.complete"
  say "llama.cpp $(cat "$bin/VERSION") ($flavour) ready in $bin"
}

# One flavour's build, in a shell of its own (set -e holds there whatever the caller's context),
# locked: two setups at once build once; a failure leaves .failed (the reason was said).
if [ "${1:-}" = --build-raw ]; then
  build_flavour "$2"
  exit 0
fi
if [ "${1:-}" = --build-one ]; then
  bin=$(bin_of "$2")
  mkdir -p "$(dirname "$bin")"
  exec 9>"$(dirname "$bin")/.lock"
  flock 9
  [ -f "$bin/.complete" ] && exit 0
  rm -f "$(dirname "$bin")/.failed"
  sh "$0" --build-raw "$2" || { echo "the $2 build failed: see the setup's output" >"$(dirname "$bin")/.failed"; exit 1; }
  exit 0
fi
ensure() {
  b=$(bin_of "$1")
  [ -f "$b/.complete" ] || sh "$0" --build-one "$1" || return 1
  # a build from before flavours had names: it is the CPU one (its key says so)
  [ -f "$b/FLAVOUR" ] || echo "$1" >"$b/FLAVOUR" 2>/dev/null || true
}

has_bins() { [ -x "$1/llama-server" ] && { [ -x "$1/ggml-rpc-server" ] || [ -x "$1/rpc-server" ]; }; }

if [ -n "${MESH_LLM_BIN_DIR:-}" ]; then
  if has_bins "$MESH_LLM_BIN_DIR"; then echo "$MESH_LLM_BIN_DIR"; exit 0; fi
  say "MESH_LLM_BIN_DIR=$MESH_LLM_BIN_DIR has no llama-server and rpc-server; building the pinned llama.cpp instead"
fi
if [ -z "${MESH_LLM_FORCE_BUILD:-}" ] && [ -z "${MESH_LLM_FLAVOR:-}" ] && command -v llama-server >/dev/null 2>&1; then
  d=$(dirname "$(command -v llama-server)")
  if has_bins "$d"; then echo "$d"; exit 0; fi
fi

if ensure "$FLAVOUR"; then
  bin_of "$FLAVOUR"
  exit 0
fi
[ "$FLAVOUR" = cpu ] && exit 1
say "WARNING: the $FLAVOUR flavour could not be set up (above); falling back to the CPU flavour: inference will run on the CPU only"
ensure cpu || exit 1
bin_of cpu

#!/bin/sh
# Install the Debian packages mesh-llm needs to build and test, only those missing.
# Usage: scripts/deps.sh [build|test]
set -eu
PKGS="build-essential cmake ninja-build pkg-config git ca-certificates \
libuv1-dev libjansson-dev libngtcp2-dev libngtcp2-crypto-gnutls-dev \
libgnutls28-dev nettle-dev libsodium-dev libcurl4-openssl-dev libsecp256k1-dev libwslay-dev libconfig-dev \
libminiupnpc-dev libnatpmp-dev"
if [ "${1:-build}" = test ]; then
  PKGS="$PKGS libcmocka-dev python3 python3-pytest curl procps iproute2 clang libclang-rt-14-dev \
chromium prometheus systemd man-db \
nftables miniupnpd miniupnpd-nftables natpmpc miniupnpc coturn \
mesa-vulkan-drivers libvulkan1"
  # mesa-vulkan-drivers: lavapipe, the software Vulkan device the GPU path is tested on
  # coturn: the TURN/STUN server tests/integration/test_turn.py runs (not as a service)
fi
# npm fetches the pinned llama.cpp source; a Node.js from elsewhere (nodesource) is fine.
command -v npm >/dev/null 2>&1 || PKGS="$PKGS nodejs npm"
missing=""
for p in $PKGS; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing="$missing $p"
  fi
done
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
updated=0
if [ -n "$missing" ]; then
  echo "mesh-llm setup: installing Debian packages:$missing" >&2
  $SUDO apt-get update -q >&2 || true
  updated=1
  # shellcheck disable=SC2086
  $SUDO apt-get install -y -q --no-install-recommends $missing >&2
fi
# llhttp: Debian's node-llhttp ships the C sources. Its Node.js dependencies can conflict
# with a non-Debian Node.js, so unpack the package instead of installing it.
LLHTTP_DIR="${MESH_LLM_CACHE:-$HOME/.cache/mesh-llm}/llhttp"
if [ ! -f /usr/share/llhttp/llhttp.c ] && [ ! -f "$LLHTTP_DIR/usr/share/llhttp/llhttp.c" ]; then
  echo "mesh-llm setup: unpacking Debian node-llhttp C sources into $LLHTTP_DIR" >&2
  [ "$updated" = 1 ] || $SUDO apt-get update -q >&2 || true
  tmp=$(mktemp -d)
  (cd "$tmp" && apt-get download node-llhttp >&2)
  mkdir -p "$LLHTTP_DIR"
  dpkg -x "$tmp"/node-llhttp_*.deb "$LLHTTP_DIR"
  rm -rf "$tmp"
fi
# npm clients the integration tests drive (openai, @anthropic-ai/sdk, puppeteer-core): tests/js
if [ "${1:-build}" = test ]; then
  js="$(dirname "$0")/../tests/js"
  if [ ! -d "$js/node_modules" ] || [ "$js/package-lock.json" -nt "$js/node_modules/.package-lock.json" ]; then
    echo "mesh-llm setup: installing the test's npm packages into tests/js/node_modules" >&2
    (cd "$js" && npm ci --no-audit --no-fund --loglevel=error >&2)
  fi
  # the coding agents the launcher tests run (claude, codex, opencode, pi; ~1.2 GB: their
  # native binaries): tests/agents
  ag="$(dirname "$0")/../tests/agents"
  if [ ! -d "$ag/node_modules" ] || [ "$ag/package-lock.json" -nt "$ag/node_modules/.package-lock.json" ]; then
    echo "mesh-llm setup: installing the coding agents into tests/agents/node_modules" >&2
    # npm install --no-save, not npm ci: the lock pins every package this platform installs, but
    # it cannot list opencode's binaries for other platforms (a registry that carries only
    # linux-x64 ones has no metadata for them), and npm ci refuses a lock without them. --no-save
    # installs what the lock pins and leaves package.json and the lock as they are.
    (cd "$ag" && npm install --no-save --no-audit --no-fund --loglevel=error >&2)
  fi
fi

#!/bin/sh
# `make run`: serve MODEL, or the first .gguf in ~/.models, with the pinned llama.cpp.
set -eu
model="${1:-}"
[ $# -gt 0 ] && shift
if [ -z "$model" ]; then
  model=$(ls "$HOME"/.models/*.gguf 2>/dev/null | head -n 1 || true)
fi
if [ -z "$model" ]; then
  cat >&2 <<MSG
mesh-llm: no model to serve.
  Give one:            make run MODEL=path/to/model.gguf
  or put a .gguf in:   ~/.models/   (the first one found is served)
  For a tiny test model: make run MODEL=../shared/models/stories260K.gguf
MSG
  exit 2
fi
if [ ! -f "$model" ]; then
  echo "mesh-llm: model file '$model' does not exist" >&2
  exit 2
fi
bindir=$(scripts/llama.sh)
exec ./build/mesh-llm --bin-dir "$bindir" --model "$model" "$@"

#!/bin/sh
# `make run`: serve MODEL, or the first .gguf in ~/.models, or else the catalog's default small
# chat model (downloaded from the hub, HF_ENDPOINT or https://huggingface.co, on first use; the
# node is up at once and logs the download's progress).
set -eu
model="${1:-}"
[ $# -gt 0 ] && shift
if [ -z "$model" ]; then
  model=$(ls "$HOME"/.models/*.gguf 2>/dev/null | head -n 1 || true)
fi
if [ -z "$model" ]; then
  model=$(./build/mesh-llm models list 2>/dev/null | awk '/\(default\)/ {print $1; exit}')
  hub="${HF_ENDPOINT:-https://huggingface.co}"
  if [ -z "$model" ] || ! curl -s -o /dev/null --max-time 10 "$hub"; then
    echo "mesh-llm: no model in ~/.models and the hub ($hub) cannot be reached to download" \
      "the default model${model:+ $model}." >&2
    echo "  Give one:            make run MODEL=path/to/model.gguf" >&2
    echo "  or put a .gguf in:   ~/.models/" >&2
    if [ -d ../shared/models ]; then
      echo "  Test models here:    make run MODEL=../shared/models/stories260K.gguf" >&2
    fi
    exit 2
  fi
  echo "mesh-llm: no model in ~/.models: serving the default $model (downloaded from $hub" \
    "into ~/.models on first use)" >&2
fi
bindir=$(scripts/llama.sh)
exec ./build/mesh-llm --bin-dir "$bindir" --model "$model" "$@"

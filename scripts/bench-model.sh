#!/bin/sh
# bench-model.sh SYNTH OUT — make the realistic-size benchmark model once (deterministic bytes).
#
# The shared test models are tiny (stories260K decodes ~3000 tokens/s here), so any fixed
# per-token cost of a relay dominates their ratios. Benchmarks also run on a synthesized llama
# model the size of a small real one: 8 layers, dim 2048, FFN 5632, 16 heads (4 KV heads),
# F32 matrices, 363 M parameters, 1.35 GiB — on 2 CPUs it decodes at ~28 tokens/s, like a
# 1B-class quantized model. Random weights: the text is gibberish, the timing is real.
set -eu
synth=$1
out=$2
template=${MESH_LLM_TEST_MODELS:-$(dirname "$0")/../../shared/models}/stories260K.gguf
[ -s "$out" ] && exit 0
[ -x "$synth" ] || { echo "bench-model: $synth not built (make build)" >&2; exit 1; }
[ -r "$template" ] || { echo "bench-model: template $template not found (set MESH_LLM_TEST_MODELS)" >&2; exit 1; }
mkdir -p "$(dirname "$out")"
echo "bench-model: synthesizing $out (1.35 GiB, once)" >&2
"$synth" --template "$template" --out "$out.tmp" --dim 2048 --ffn 5632 --layers 8 --heads 16 \
    --kv-heads 4 --ctx 2048 --seed 3 --embd-type q8_0 --name synth-363m
mv "$out.tmp" "$out"

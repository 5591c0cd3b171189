#!/bin/sh
# vision-model.sh SYNTH DIR — make the vision tests' projector once (deterministic bytes) in DIR
# and print its path: DIR/stories260K-mmproj-<checksum of this recipe>.gguf, so a changed recipe
# makes a new file.
#
# No small real vision model exists among the shared test models. This is a LLaVA-style
# projector (clip.projector_type "mlp": a 2-block CLIP ViT of width 32 over 56x56 images in
# 14x14 patches, then mm.0 / GELU / mm.2 to 64) with random weights, for stories260K (embedding
# size 64, which llama.cpp checks the projector's output against): llama-server -m
# stories260K.gguf --mmproj THIS loads it as a multimodal model, and each image becomes 16
# embeddings in the prompt ((56 / 14)²). Random weights: the answer is gibberish; what a test
# can assert is that the image was encoded (16 more prompt tokens), not what it shows.
set -eu
synth=$1
sum=$(cksum <"$0" | cut -d' ' -f1)
out=$2/stories260K-mmproj-$sum.gguf
[ -s "$out" ] && { echo "$out"; exit 0; }
[ -x "$synth" ] || { echo "vision-model: $synth not built (make build)" >&2; exit 1; }
mkdir -p "$(dirname "$out")"
"$synth" --mmproj --out "$out.tmp.$$" --dim 64 --vdim 32 --ffn 64 --layers 2 --heads 2 \
    --image-size 56 --patch-size 14 --seed 1 --name stories260K-mmproj-synth >&2
mv "$out.tmp.$$" "$out"
echo "$out"

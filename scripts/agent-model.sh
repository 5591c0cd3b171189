#!/bin/sh
# agent-model.sh SYNTH DIR [tool-call] — make the coding-agent tests' model once (deterministic
# bytes) in DIR and print its path: DIR/agent-tools-32k-<checksum of this recipe>.gguf, so a
# changed recipe makes a new file.
#
# Coding agents send a first request of 8,000+ tokens (system prompt and tool definitions); the
# shared test models are trained for 2048. This one is a synthesized llama model with a 32k
# trained context, the Phi-3 tokenizer (../shared/models/vocab) and a chat template that takes
# tools (tests/agents/chat_template.jinja): 2 layers, dim 128, so a 10k-token prompt takes
# seconds on one CPU. Random weights but for --reply: whatever the prompt, it answers " Hello
# from the mesh" (the Phi-3 tokens 15043,515,278,27716) and stops, so an agent gets a short answer
# in seconds; the assertion is the protocol round trip, not the quality.
#
# tool-call: DIR/agent-tool-call-<checksum>.gguf, the same model answering a tool call in its
# template's format, <tool_call>{"name":"weather","arguments":{"city":"Paris"}}</tool_call>, which
# llama-server parses into OpenAI tool_calls when the request has tools (and leaves as text when
# it has none): the Ollama tools test. A reply token's successor is set by that token alone, so
# no token may repeat: the 26 tokens spell the repeated characters with other pieces or byte
# tokens (<0x22> is '"', <0x5F> '_').
set -eu
synth=$1
here=$(dirname "$0")/..
sum=$(cat "$0" "$here/tests/agents/chat_template.jinja" | cksum | cut -d' ' -f1)
name=agent-tools-32k
reply=15043,515,278,27716
if [ "${3:-}" = tool-call ]; then
  name=agent-tool-call
  reply=29966,10154,29918,4804,26208,29908,978,4710,705,1624,3284,25699,28819,12690,1115,37,2177
  reply=$reply,275,9092,16040,517,324,98,1052,29880,29958
fi
out=$2/$name-$sum.gguf
vocab=${MESH_LLM_TEST_MODELS:-$here/../shared/models}/vocab/ggml-vocab-phi-3.gguf
[ -s "$out" ] && { echo "$out"; exit 0; }
[ -x "$synth" ] || { echo "agent-model: $synth not built (make build)" >&2; exit 1; }
[ -r "$vocab" ] || { echo "agent-model: $vocab not found (set MESH_LLM_TEST_MODELS)" >&2; exit 1; }
mkdir -p "$(dirname "$out")"
"$synth" --template "$vocab" --out "$out.tmp.$$" --dim 128 --ffn 256 --layers 2 --heads 4 \
    --ctx 32768 --seed 7 --embd-type f32 --name "$name" --reply "$reply" \
    --chat-template "$here/tests/agents/chat_template.jinja" >&2
mv "$out.tmp.$$" "$out"
echo "$out"

"""Split and allocation tests' models and helpers (from test_mesh_split.py): the small model and
its size, a short context, per-node environments and models dirs, /v1/models and plan look-ups,
greedy completions, a two-node split, the GGUF synthesizer."""
import os

from harness.mesh import ENV, wait_converged
from harness.node import model_path, wait_for

SMALL = "stories260K"
TINY = "TinyStories-656K-Q8_0"
SMALL_SIZE = os.path.getsize(model_path(SMALL))
PROMPT = "Once upon a time"


# A context short enough that the KV cache stays inside the 10 % margin of the 1.1 x size rule,
# so the memory figures below are multiples of the model's size (the ledger counts the KV cache
# of the context a model loads with: stories260K at its trained 2048 tokens needs 2.5 MB).
SMALL_CTX = ("--ctx-size", "128")


def gb(nbytes):
    return f"{nbytes / 1e9:.9f}"


def env_for(tmp_path, name):
    env = dict(ENV)
    env["LLAMA_CACHE"] = str(tmp_path / f"llama-cache-{name}")  # each node its own rpc cache
    return env


def models_dir(tmp_path, name, *models):
    d = tmp_path / f"models-{name}"
    d.mkdir()
    for m in models:
        os.symlink(model_path(m), d / f"{m}.gguf")
    return str(d)


def models_status(node):
    r = node.request("GET", "/v1/models")
    assert r.status == 200, r
    return {m["id"]: m["status"] for m in r.json()["data"]}


def plan_of(node, model):
    for p in node.status()["plan"]:
        if p["model"] == model:
            return p
    return None


def text(r):
    assert r.status == 200, r
    return r.json()["choices"][0]["text"]


def greedy(node, model, n=40):
    return node.complete(model, prompt=PROMPT, max_tokens=n, seed=42)


def split_pair(start_node, tmp_path, extra_b=()):
    vram = gb(0.6 * SMALL_SIZE)  # neither fits alone (needs 1.1 x size), together they do
    a = start_node("--port", "0", "--model", model_path(SMALL), *SMALL_CTX, "--max-vram", vram,
                   env=env_for(tmp_path, "a"))
    b = start_node("--port", "0", "--models-dir", models_dir(tmp_path, "b", SMALL),
                   *SMALL_CTX, "--max-vram", vram, "--join", a.token, *extra_b, env=env_for(tmp_path, "b"))
    wait_converged([a, b])
    for n in (a, b):
        wait_for(lambda: models_status(n).get(SMALL) == "ready", timeout=60,
                 what=f"the split model ready on {n.id[:8]}")
    return a, b


SYNTH_BIN = os.path.join(os.path.dirname(os.environ.get("MESH_LLM_BIN", "build/mesh-llm")),
                         "mesh-gguf-synth")
THRESHOLD = 10 * 1024 * 1024  # llama.cpp's RPC hash-cache threshold

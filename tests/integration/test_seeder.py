"""A seeder given several --model files (seed 000, docs/architecture.md "Which model a node
serves"): it loads the ones its memory holds, in the order given, and lists the rest in the mesh
catalog — a model that does not fit beside the others is "waiting" there with no host, and a node
that joins with its file and room serves it. (The seed has the seeder load only the model it is
best suited for; mesh-llm serves every --model it can: the deviation and its reason are in the
docs.)"""
import os

from harness.node import model_path, wait_for
from harness.mesh import ENV, wait_converged

BIG = "stories260K"  # needs ~2.5 MB (weights and KV cache)
SMALL = "TinyStories-656K-Q8_0"  # needs ~1.0 MB


def catalog(node):
    return {m["name"]: m for m in node.status()["catalog"]}


def test_models_beyond_the_seeders_memory_wait_in_the_catalog(start_node, tmp_path):
    # 3 MB holds BIG (given first) but not SMALL beside it; two llm slots, so only memory limits
    a = start_node("--port", "0", "--max-vram", "0.003", "--max-loaded-models", "2",
                   "--model", model_path(BIG), "--model", model_path(SMALL), env=ENV)
    # the node starts (its ready line came) with BIG loaded and SMALL not
    local = {m["name"]: m["status"] for m in a.status()["models"]}
    assert local == {BIG: "ready", SMALL: "unloaded"}, local
    held = [h["model"] for h in a.status()["node"]["memory"]["held"]]
    assert held == [BIG], held
    # decided from the order, not by a race with the planner: SMALL was never started (queued,
    # it would have evicted BIG as soon as BIG loaded)
    assert f"{SMALL} needs" in a.stderr() and "does not fit beside" in a.stderr(), a.stderr()
    assert f"loading {SMALL}" not in a.stderr(), a.stderr()
    # SMALL is in the mesh catalog, waiting for capacity: no host; a holds its file
    cat = catalog(a)
    assert cat[BIG]["status"] == "ready" and cat[BIG]["hosts"] == [a.id], cat[BIG]
    assert cat[SMALL]["status"] == "waiting" and cat[SMALL]["hosts"] == [], cat[SMALL]
    assert a.id in cat[SMALL]["holders"], cat[SMALL]
    listed = {m["id"]: m["status"] for m in a.request("GET", "/v1/models").json()["data"]}
    assert listed == {BIG: "ready", SMALL: "waiting"}, listed
    assert a.complete(BIG).status == 200
    # a node that joins with SMALL's file on disk (no --model) and room for it serves it
    disk = tmp_path / "b-models"
    disk.mkdir()
    os.symlink(model_path(SMALL), disk / (SMALL + ".gguf"))
    b = start_node("--port", "0", "--models-dir", str(disk), "--join", a.token, env=ENV)
    wait_converged([a, b])
    wait_for(lambda: catalog(a)[SMALL]["status"] == "ready", timeout=60,
             what=f"{SMALL} ready in a's catalog")
    assert catalog(a)[SMALL]["hosts"] == [b.id], catalog(a)[SMALL]
    r = a.complete(SMALL)
    assert r.status == 200, r
    assert r.headers.get("x-mesh-node") == b.id, r.headers
    # the seeder still serves BIG itself
    r = a.complete(BIG)
    assert r.status == 200 and r.headers.get("x-mesh-node") == a.id, r.headers


def test_a_waiting_model_loads_when_memory_frees(start_node):
    # the same seeder alone: once BIG is unloaded (keep_alive 0), SMALL fits and loads by itself
    a = start_node("--port", "0", "--max-vram", "0.003", "--max-loaded-models", "2",
                   "--model", model_path(BIG), "--model", model_path(SMALL), env=ENV)
    local = {m["name"]: m["status"] for m in a.status()["models"]}
    assert local == {BIG: "ready", SMALL: "unloaded"}, local
    r = a.request("POST", "/api/generate", {"model": BIG, "keep_alive": 0})
    assert r.status == 200, r
    wait_for(lambda: {m["name"]: m["status"] for m in a.status()["models"]}
             == {BIG: "unloaded", SMALL: "ready"}, timeout=60, what=f"{SMALL} loaded in BIG's place")
    r = a.complete(SMALL)
    assert r.status == 200 and r.headers.get("x-mesh-node") == a.id, r

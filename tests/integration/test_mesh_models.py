"""Several models across the mesh: any node answers for any model (TUNNEL_HTTP)."""
import os

from harness.node import model_path, sse_events, wait_for
from harness.mesh import ENV, wait_converged

A_MODEL = "stories260K"
B_MODEL = "TinyStories-656K-Q8_0"


def models_status(node):
    r = node.request("GET", "/v1/models")
    assert r.status == 200, r
    return {m["id"]: m["status"] for m in r.json()["data"]}


def test_each_model_through_each_node(start_node):
    a = start_node("--port", "0", "--model", model_path(A_MODEL), env=ENV)
    b = start_node("--port", "0", "--model", model_path(B_MODEL), "--join", a.token, env=ENV)
    c = start_node("--port", "0", "--client", "--join", b.token, env=ENV)  # routes only
    wait_converged([a, b])  # c is a passive client: no gossip, routing tables only
    for n in (a, b, c):
        wait_for(lambda: models_status(n).get(A_MODEL) == "ready"
                 and models_status(n).get(B_MODEL) == "ready", timeout=30,
                 what="both models listed as ready on every node")
    # the same greedy completion, asked of every node, gives the host's own answer
    for model, host in ((A_MODEL, a), (B_MODEL, b)):
        ref = host.complete(model, max_tokens=12)
        assert ref.status == 200, ref
        want = ref.json()["choices"][0]["text"]
        for n in (a, b, c):
            r = n.complete(model, max_tokens=12)
            assert r.status == 200, (n.id[:8], model, r)
            assert r.json()["choices"][0]["text"] == want
    # the catalog in /api/status names the nodes: each model held and hosted by its node; the
    # client holds and lends nothing
    for n in (a, b, c):
        cat = {m["name"]: m for m in n.status()["catalog"]}
        assert cat[A_MODEL]["status"] == "ready" and cat[A_MODEL]["hosts"] == [a.id]
        assert cat[B_MODEL]["status"] == "ready" and cat[B_MODEL]["hosts"] == [b.id]
        assert c.id not in cat[A_MODEL]["holders"] + cat[B_MODEL]["holders"]
    st = c.status()["node"]
    assert st["role"] == "client" and st["vram_bytes"] == 0
    # streamed through the mesh: SSE chunks arrive and end with [DONE]
    r = c.request("POST", "/v1/chat/completions",
                  {"model": B_MODEL, "stream": True, "max_tokens": 8, "temperature": 0,
                   "messages": [{"role": "user", "content": "Once upon a time"}]})
    assert r.status == 200, r
    ev = sse_events(r.body)
    assert ev and ev[-1] == "[DONE]"
    # a model no node has: 404; a type mismatch across the mesh: 400
    r = c.complete("no-such-model")
    assert r.status == 404, r
    r = c.request("POST", "/v1/embeddings", {"model": A_MODEL, "input": "hi"})
    assert r.status == 400, r


def test_host_gone_gives_503_not_hang(start_node):
    a = start_node("--port", "0", "--model", model_path(A_MODEL), env=ENV)
    # c serves a model of its own: a gossip member that learns of A's leave (a node the mesh
    # gives nothing stands by passively instead: test_demand.py)
    c = start_node("--port", "0", "--model", model_path(B_MODEL), "--join", a.token, env=ENV)
    wait_converged([a, c])
    wait_for(lambda: models_status(c).get(A_MODEL) == "ready", timeout=30, what="ready via mesh")
    assert c.complete(A_MODEL).status == 200
    a.stop()
    # A left: its model is gone from the mesh (404: no node has it), never a hang
    wait_for(lambda: c.complete(A_MODEL).status == 404, timeout=10,
             what="the departed host's model to stop being routed")


def test_requested_model_in_catalog(start_node):
    """--model NAME with no file anywhere: the mesh lists it as requested (status unloaded,
    no holders); a request for it is a 503 naming it, from any node; it leaves the catalog
    with the node that asked for it."""
    a = start_node("--port", "0", "--model", model_path(A_MODEL), env=ENV)
    b = start_node("--port", "0", "--model", "Wanted-Model-7B", "--join", a.token, env=ENV)
    wait_converged([a, b])

    def listed(n):
        r = n.request("GET", "/v1/models")
        assert r.status == 200, r
        return {m["id"]: m for m in r.json()["data"]}

    for n in (a, b):
        wait_for(lambda: "Wanted-Model-7B" in listed(n), timeout=20,
                 what="the requested model in /v1/models")
        m = listed(n)["Wanted-Model-7B"]
        assert m["status"] == "unloaded" and m["requested"] is True, m
        assert m["nodes"] == 0 and m["hosts"] == [], m
        cat = {e["name"]: e for e in n.status()["catalog"]}
        assert cat["Wanted-Model-7B"]["requested"] is True
        assert cat["Wanted-Model-7B"]["holders"] == []
        r = n.complete("Wanted-Model-7B")
        assert r.status == 503, r
        err = r.json()["error"]
        assert "Wanted-Model-7B" in err["message"] and "requested" in err["message"], err
        # the rest of the mesh is unaffected: A's model answers through B too
        assert n.complete(A_MODEL).status == 200
    wait_for(lambda: "says where to download it" in b.stderr(), timeout=20,
             what="B to say why it stands by")
    b.stop()
    wait_for(lambda: "Wanted-Model-7B" not in listed(a), timeout=20,
             what="the request to leave the catalog with its node")
    assert a.complete("Wanted-Model-7B").status == 404
    # a name asked for without a mesh: a clear error, not a node
    r = start_node("--port", "0", "--model", "Wanted-Model-7B", env=ENV, wait_ready=False)
    assert r.proc.wait(timeout=10) != 0
    assert "--join" in r.stderr()

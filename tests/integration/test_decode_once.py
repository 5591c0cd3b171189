"""Each peer's announcement is decoded once per change (issue 30 S13): the mesh keeps the typed
view of every live peer (core/view_set.h) and the planner, route tables, listings, status and
/metrics borrow it, so routed requests and reads of /v1/models, /api/status and /metrics
decode nothing. stats.view_decodes in /api/status counts the decodes."""
from harness.node import model_path, wait_for
from harness.mesh import ENV, wait_converged

A_MODEL = "stories260K"
B_MODEL = "TinyStories-656K-Q8_0"
ROUNDS = 10


def decodes(node):
    return node.status()["stats"]["view_decodes"]


def listed_ready(node, model):
    r = node.request("GET", "/v1/models")
    return r.status == 200 and any(m["id"] == model and m["status"] == "ready"
                                   for m in r.json()["data"])


def test_requests_and_reads_decode_nothing(start_node):
    a = start_node("--port", "0", "--model", model_path(A_MODEL), env=ENV)
    b = start_node("--port", "0", "--model", model_path(B_MODEL), "--join", a.token, env=ENV)
    wait_converged([a, b])
    wait_for(lambda: listed_ready(a, B_MODEL), timeout=30, what=f"{B_MODEL} ready on a")
    wait_for(lambda: a.complete(B_MODEL, max_tokens=2).status == 200, timeout=30,
             what=f"a to route {B_MODEL}")
    # b joined and announced: at least one decode of it on a
    assert decodes(a) >= 1
    d0 = decodes(a)
    for _ in range(ROUNDS):
        r = a.complete(B_MODEL, max_tokens=2)
        assert r.status == 200, r
        assert r.headers.get("x-mesh-route") == f"tunnel:{b.id}", r.headers
        assert a.request("GET", "/v1/models").status == 200
        a.status()
        # /metrics lists b from gossip's peers (mesh_peer_states), with its state
        assert a.metric(f'mesh_llm_peer_state{{peer="{b.id}",state="alive"}}') == 1
    spent = decodes(a) - d0
    print("view_decodes on a: before", d0, "spent", spent)
    # b may re-announce a few times meanwhile (its request rates change): one decode each; the
    # old code decoded every peer on every listing, status, re-plan and route-table build
    assert spent <= 4, (d0, spent)

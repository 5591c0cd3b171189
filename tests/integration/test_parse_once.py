"""A request's body is parsed once on every node it passes (issue 30 S15): the entry node that
forwards it (active, and a passive --client) and the host that serves it behind the tunnel
each count one JSON parse of it in mesh_llm_request_parses_total, whatever reads the body on
the way (admission, the API's validation, the Anthropic check, images, the stickiness keys,
prefix affinity, the relay's stream mode and continuation check)."""
from harness.node import model_path, sse_events, wait_for
from harness.mesh import ENV, wait_converged

A_MODEL = "stories260K"
B_MODEL = "TinyStories-656K-Q8_0"
PARSES = "mesh_llm_request_parses_total"
SYSTEM = "You tell short stories to children. " * 20  # > 512 bytes: a prefix-affinity key
MSG = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Once upon a time"}]
# routed streamed requests: chat, chat with a stickiness key, Anthropic messages
REQUESTS = [
    ("/v1/chat/completions", {"model": B_MODEL, "stream": True, "max_tokens": 4,
                              "temperature": 0, "messages": MSG}),
    ("/v1/chat/completions", {"model": B_MODEL, "stream": True, "max_tokens": 4,
                              "temperature": 0, "messages": MSG, "user": "alice"}),
    ("/v1/messages", {"model": B_MODEL, "stream": True, "max_tokens": 4, "messages": MSG[1:],
                      "system": SYSTEM}),
]


def listed_ready(node, model):
    r = node.request("GET", "/v1/models")
    return r.status == 200 and any(m["id"] == model and m["status"] == "ready"
                                   for m in r.json()["data"])


def test_one_parse_per_request_on_each_node(start_node):
    a = start_node("--port", "0", "--model", model_path(A_MODEL), env=ENV)
    b = start_node("--port", "0", "--model", model_path(B_MODEL), "--join", a.token, env=ENV)
    c = start_node("--port", "0", "--client", "--join", b.token, env=ENV)  # passive
    wait_converged([a, b])
    for n in (a, c):
        wait_for(lambda: listed_ready(n, B_MODEL), timeout=30,
                 what=f"{B_MODEL} listed as ready on {n.id[:8]}")
    # a: an active entry node forwarding B_MODEL to its host b; c: a passive client
    for entry in (a, c):
        wait_for(lambda: entry.complete(B_MODEL, max_tokens=2).status == 200, timeout=30,
                 what=f"{entry.id[:8]} to route {B_MODEL}")
        e0, h0 = entry.metric(PARSES), b.metric(PARSES)
        for path, body in REQUESTS:
            r = entry.request("POST", path, body)
            assert r.status == 200, (entry.id[:8], path, r)
            assert r.headers.get("x-mesh-route") == f"tunnel:{b.id}", (path, r.headers)
            ev = sse_events(r.body)
            assert ev, (path, r)
        n = len(REQUESTS)
        assert entry.metric(PARSES) - e0 == n, (entry.id[:8], e0, entry.metric(PARSES))
        assert b.metric(PARSES) - h0 == n, (b.id[:8], h0, b.metric(PARSES))
    # a request the API refuses is parsed once too, and GETs are not parsed
    a0 = a.metric(PARSES)
    r = a.request("POST", "/v1/chat/completions", raw_body=b'{"model": "x", "model": "y"}')
    assert r.status == 400 and b"invalid_body" in r.body, r
    assert a.request("GET", "/v1/models").status == 200
    assert a.metric(PARSES) - a0 == 1

"""Every model endpoint of llama-server through the node, locally and through a tunnel (a
--client node), with the route table's answers: the same bodies as llama-server's for the
deterministic endpoints, X-Mesh-Node / X-Mesh-Route / Server-Timing headers, Anthropic-shaped
errors on /v1/messages*, and a tunnel that admits exactly these endpoints."""
import json
import os
import re
import socket
import subprocess

from harness.node import MESH_BIN, http, model_path, wait_for

S = "stories260K"
E = "TinyStories-656K-Q8_0"
ENV = {"MESH_LLM_ROUTE_REFRESH_MS": "200"}
TEST_PEER = os.path.join(os.path.dirname(MESH_BIN), "mesh-test-peer")
MSG = [{"role": "user", "content": "Once upon a time"}]

# path, body, expected status (llama-server's own), deterministic (same body every time)
ENDPOINTS = [
    ("/v1/chat/completions", {"model": S, "messages": MSG, "max_tokens": 4}, 200, False),
    ("/chat/completions", {"model": S, "messages": MSG, "max_tokens": 4}, 200, False),
    ("/v1/completions", {"model": S, "prompt": "Once", "max_tokens": 4}, 200, False),
    ("/completions", {"model": S, "prompt": "Once", "n_predict": 4}, 200, False),
    ("/completion", {"model": S, "prompt": "Once", "n_predict": 4}, 200, False),
    ("/v1/messages", {"model": S, "messages": MSG, "max_tokens": 4}, 200, False),
    ("/v1/messages/count_tokens", {"model": S, "messages": MSG}, 200, True),
    ("/v1/responses", {"model": S, "input": "Once", "max_output_tokens": 4}, 200, False),
    ("/v1/responses/input_tokens", {"model": S, "input": "Once"}, 200, True),
    ("/v1/chat/completions/input_tokens", {"model": S, "messages": MSG}, 200, True),
    ("/tokenize", {"model": S, "content": "Once upon a time"}, 200, True),
    ("/detokenize", {"model": S, "tokens": [281, 306, 414]}, 200, True),
    ("/apply-template", {"model": S, "messages": MSG}, 200, True),
    ("/infill", {"model": S, "input_prefix": "a", "input_suffix": "b"}, 501, True),
    ("/v1/embeddings", {"model": E, "input": "Once"}, 200, True),
    ("/embeddings", {"model": E, "input": "Once"}, 200, True),
    ("/embedding", {"model": E, "content": "Once"}, 200, True),
]


def raw_post(port, path, body, headers=None):
    """(status, [(name, value)] in order, body) of one request; duplicate headers kept."""
    data = json.dumps(body).encode()
    h = {"Host": "x", "Content-Type": "application/json", "Content-Length": str(len(data)),
         "Connection": "close"}
    h.update(headers or {})
    req = f"POST {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        s.sendall(req.encode() + data)
        out = b""
        while True:
            c = s.recv(65536)
            if not c:
                break
            out += c
    head, rest = out.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    hdrs = [tuple(x.strip() for x in l.split(":", 1)) for l in lines[1:]]
    return int(lines[0].split()[1]), hdrs, rest


def hget(hdrs, name):
    return [v for k, v in hdrs if k.lower() == name.lower()]


def body_json(raw, hdrs):
    if [v for v in hget(hdrs, "transfer-encoding") if "chunked" in v]:
        out, rest = b"", raw
        while rest:
            size, rest = rest.split(b"\r\n", 1)
            n = int(size, 16)
            if n == 0:
                break
            out, rest = out + rest[:n], rest[n + 2:]
        raw = out
    return json.loads(raw)


def start_pair(start_node):
    h = start_node("--port", "0", "--model", model_path(S), "--model",
                   model_path(E) + ":embedding", env=ENV)
    c = start_node("--port", "0", "--client", "--join", h.token, env=ENV)

    def ready():
        r = c.request("GET", "/v1/models")
        st = {m["id"]: m.get("status") for m in r.json()["data"]} if r.status == 200 else {}
        return st.get(S) == "ready" and st.get(E) == "ready"
    wait_for(ready, timeout=30, what="the client node to see both models ready")
    return h, c


def test_every_endpoint_local_and_through_a_tunnel(start_node):
    h, c = start_pair(start_node)
    for path, body, want, same in ENDPOINTS:
        st, hd, raw = raw_post(h.api_port, path, body)
        assert st == want, (path, st, raw[:300])
        assert hget(hd, "X-Mesh-Node") == [h.id], (path, hd)
        assert hget(hd, "X-Mesh-Route") == ["local"], (path, hd)
        timing = hget(hd, "Server-Timing")
        assert len(timing) == 1 and "queue;dur=" in timing[0] and "load;dur=" in timing[0] \
            and "fb;dur=" in timing[0] and 'hops;desc="0"' in timing[0], (path, timing)
        st2, hd2, raw2 = raw_post(c.api_port, path, body)
        assert st2 == want, (path, st2, raw2[:300])
        assert hget(hd2, "X-Mesh-Node") == [h.id], (path, hd2)
        assert hget(hd2, "X-Mesh-Route") == [f"tunnel:{h.id}"], (path, hd2)
        t2 = hget(hd2, "Server-Timing")
        assert any(t.startswith("tunnel;dur=") for t in t2) and \
            any('hops;desc="1"' in t for t in t2), (path, t2)
        if same:
            assert body_json(raw2, hd2) == body_json(raw, hd), path
    # without "model", the only model of the node (llama-server's own rule) and, on the client,
    # the mesh's only LLM is not guessed while the mesh has two models
    st, _, raw = raw_post(h.api_port, "/tokenize", {"content": "Once"})
    assert st == 400 and b"'model' is required" in raw
    st, _, raw = raw_post(c.api_port, "/tokenize", {"content": "Once"})
    assert st == 400 and b"'model' is required" in raw
    # the wrong model type for the endpoint
    st, _, raw = raw_post(h.api_port, "/tokenize", {"model": E, "content": "Once"})
    assert st == 200  # any model tokenizes
    st, _, raw = raw_post(h.api_port, "/v1/messages", {"model": E, "messages": MSG,
                                                          "max_tokens": 4})
    assert st == 400 and json.loads(raw)["error"]["type"] == "invalid_request_error"


def test_streams_through_a_tunnel_byte_for_byte(start_node):
    h, c = start_pair(start_node)
    body = {"model": S, "prompt": "Once", "max_tokens": 8, "temperature": 0, "stream": True}
    _, _, direct = raw_post(h.api_port, "/v1/completions", body)
    st, hd, routed = raw_post(c.api_port, "/v1/completions", body)
    assert st == 200 and hget(hd, "X-Mesh-Route") == [f"tunnel:{h.id}"]

    def texts(raw):
        out = []
        for line in raw.decode().split("\n"):
            if line.startswith("data: {"):
                out.append(json.loads(line[6:])["choices"][0]["text"])
        return out
    assert texts(routed) == texts(direct) and len(texts(direct)) >= 8
    assert b"data: [DONE]" in routed
    # Anthropic streaming events pass through unchanged
    m = {"model": S, "messages": MSG, "max_tokens": 4, "stream": True, "temperature": 0}
    st, _, raw = raw_post(c.api_port, "/v1/messages", m)
    assert st == 200 and b"event: message_start" in raw and b"event: message_stop" in raw


def test_anthropic_shaped_errors(start_node):
    h = start_node("--port", "0", "--model", model_path(S), "--api-key", "k3y", env=ENV)
    auth = {"x-api-key": "k3y"}

    def err(path, body, status, etype, headers=auth, raw=None):
        if raw is not None:
            r = http(h.api_port, "POST", path, raw_body=raw, headers=headers)
        else:
            r = http(h.api_port, "POST", path, body, headers=headers)
        assert r.status == status, r
        j = r.json()
        assert j["type"] == "error" and j["error"]["type"] == etype and j["error"]["message"], j
        assert set(j) == {"type", "error"} and set(j["error"]) == {"type", "message"}, j
        return j
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        err(path, {"model": "nope", "messages": MSG, "max_tokens": 4}, 404, "not_found_error")
        err(path, None, 400, "invalid_request_error", raw=b"{not json")
        err(path, {"model": S, "messages": MSG}, 401, "authentication_error",
            headers={"x-api-key": "wrong"})
    # the key in x-api-key (Anthropic clients) or as a bearer token both work
    r = http(h.api_port, "POST", "/v1/messages", {"model": S, "messages": MSG, "max_tokens": 2},
             headers=auth)
    assert r.status == 200, r
    r = http(h.api_port, "POST", "/v1/messages/count_tokens", {"model": S, "messages": MSG},
             headers={"Authorization": "Bearer k3y"})
    assert r.status == 200 and r.json()["input_tokens"] > 0, r
    # other endpoints keep the OpenAI shape
    r = http(h.api_port, "POST", "/v1/chat/completions", {"model": "nope", "messages": MSG},
             headers=auth)
    assert r.status == 404 and r.json()["error"]["code"] == "model_not_found", r


def test_tunnel_admits_exactly_the_model_endpoints(start_node, tmp_path):
    a = start_node("--port", "0", "--model", model_path(S))
    tok = json.dumps({"model": S, "content": "Once"}).encode()
    props = json.dumps({"n_threads": 1}).encode()

    def post(path, body, close=False):
        return (b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n%s\r\n" % (path.encode(), len(body),
                                                   b"Connection: close\r\n" if close else b"")
                + body)
    f = tmp_path / "req.http"
    f.write_bytes(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n" + post("/tokenize", tok) +
                  post("/props", props) + post("/v1/nothing", tok, close=True))
    r = subprocess.run([TEST_PEER, a.token, "tunnel", S, str(f)], capture_output=True, timeout=90)
    assert r.returncode == 0, r.stderr.decode()
    statuses = [int(x) for x in re.findall(rb"HTTP/1\.1 (\d{3}) ", r.stdout)]
    assert statuses == [200, 200, 403, 403], r.stdout[:1500]
    assert b'"tokens":[' in r.stdout
    # a first request line outside the table is refused before the API sees it
    f.write_bytes(post("/props", props, close=True))
    r = subprocess.run([TEST_PEER, a.token, "tunnel", S, str(f)], capture_output=True, timeout=90)
    assert b"HTTP/1.1 200" not in r.stdout, r.stdout[:500]
    assert "refused a tunnelled POST /props" in a.stderr()

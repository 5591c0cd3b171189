"""Ollama's API on the inference port (src/app/api_ollama*.c, src/core/ollama.c): the official
`ollama` JavaScript client (tests/js/ollama.mjs) against a solo node and through a --client node
for models served elsewhere — list, show, chat and generate (streamed and not), format "json" and
a JSON schema (llama-server's grammar holds even the tiny model to them), tools (a synthesized
model whose fixed reply is a tool call in its template's format: llama-server parses it only when
the tools reached it), embed, ps — and the protocol at the byte level: NDJSON framing, the done
line's counts, Ollama-shaped errors, GET and HEAD /, Ollama's own metrics labels and request-log
paths, and that a mesh member's tunnel cannot reach Ollama's paths."""
import http.client as http_client
import json
import os
import re
import shutil
import signal
import socket
import subprocess

import pytest

from harness.node import MESH_BIN, ROOT, http, model_path, wait_for
from harness.split import SYNTH_BIN

LLM = "stories260K"
EMB = "TinyStories-656K-Q8_0"
JS = os.path.join(ROOT, "tests", "js")
ENV = {"MESH_LLM_ROUTE_REFRESH_MS": "200"}
TEST_PEER = os.path.join(os.path.dirname(MESH_BIN), "mesh-test-peer")
GREEDY = {"temperature": 0, "top_k": 1, "seed": 1, "num_predict": 8}
# room for the grammar's whitespace: a constrained answer ends itself well before
CONSTRAINED = dict(GREEDY, num_predict=200)
MOOD = {"type": "object", "properties": {"mood": {"type": "string", "enum": ["happy", "sad"]}},
        "required": ["mood"]}
CACHE = os.environ.get("MESH_LLM_CACHE") or os.path.expanduser("~/.cache/mesh-llm")


def host_args():
    return ("--port", "0", "--model", model_path(LLM), "--model", model_path(EMB) + ":embedding")


def ndjson(body):
    lines = body.decode().split("\n")
    assert lines[-1] == "", f"the stream does not end with a newline: {body[-200:]!r}"
    return [json.loads(l) for l in lines[:-1]]


def openai_text(node, prompt):
    r = node.request("POST", "/v1/chat/completions", {
        "model": LLM, "messages": [{"role": "user", "content": prompt}], "max_tokens": 8,
        "temperature": 0, "top_k": 1, "seed": 1})
    assert r.status == 200, r
    return r.json()["choices"][0]["message"]["content"]


def follows(schema, v):
    """v holds to MOOD-like schema: an object with its required keys, each value in its enum."""
    props = schema["properties"]
    return (isinstance(v, dict) and set(schema["required"]) <= set(v) <= set(props) and
            all(v[k] in props[k]["enum"] for k in v))


def not_json(text):
    try:
        json.loads(text)
        return False
    except ValueError:
        return True


def check_root(port):
    """GET / and HEAD /: Ollama's "Ollama is running" (its clients and Claude Code probe it)."""
    r = http(port, "GET", "/")
    assert r.status == 200 and r.body == b"Ollama is running", r
    assert r.headers["content-type"].startswith("text/plain"), r.headers
    c = http_client.HTTPConnection("127.0.0.1", port, timeout=30)  # a HEAD has no body
    try:
        c.request("HEAD", "/")
        h = c.getresponse()
        assert h.status == 200 and h.read() == b"", h.status
        assert h.getheader("content-length") == str(len("Ollama is running")), h.getheaders()
    finally:
        c.close()
    r = http(port, "POST", "/", {})
    assert r.status == 405 and r.headers["allow"].startswith("GET"), r


def check_protocol(node):
    """NDJSON framing, the done line, whole answers and errors, at the byte level."""
    v = node.request("GET", "/api/version")
    assert v.status == 200 and isinstance(v.json()["version"], str)
    check_root(node.api_port)
    # the console's / is its own listener: the web console, as before
    c = http(node.console_port, "GET", "/")
    assert c.status == 200 and c.headers["content-type"].startswith("text/html"), c

    want = openai_text(node, "Once upon a time")
    body = {"model": LLM, "messages": [{"role": "user", "content": "Once upon a time"}],
            "options": GREEDY}
    r = node.request("POST", "/api/chat", body)
    assert r.status == 200, r
    assert r.headers["content-type"] == "application/x-ndjson"
    assert r.headers["x-mesh-node"] == node.id and r.headers["x-mesh-route"] == "local", r.headers
    assert r.headers.get("transfer-encoding") == "chunked"
    lines = ndjson(r.body)
    assert all(l["model"] == LLM and l["created_at"] for l in lines)
    assert [l["done"] for l in lines] == [False] * (len(lines) - 1) + [True]
    last = lines[-1]
    assert last["done_reason"] == "length" and last["eval_count"] == 8, last
    assert last["prompt_eval_count"] > 0 and last["total_duration"] > 0
    assert "".join(l["message"]["content"] for l in lines) == want

    r = node.request("POST", "/api/chat", dict(body, stream=False))
    assert r.status == 200 and r.headers["content-type"].startswith("application/json"), r
    assert r.headers["x-mesh-node"] == node.id and "server-timing" in r.headers, r.headers
    o = r.json()
    assert o["done"] is True and o["message"]["role"] == "assistant"
    assert o["message"]["content"] == want and o["eval_count"] == 8

    g = node.request("POST", "/api/generate", {"model": LLM, "prompt": "Once upon a time",
                                                "stream": False, "options": GREEDY})
    assert g.status == 200, g
    assert g.json()["response"] == want and g.json()["done"] is True

    # Ollama-shaped errors: an unknown model (routed: the node's 404 translated), a bad body,
    # an endpoint the node does not serve, the wrong method
    r = node.request("POST", "/api/chat", {"model": "no-such-model", "messages": []})
    assert r.status == 404 and r.json() == {"error": "model 'no-such-model' not found"}, r
    r = node.request("POST", "/api/generate", {"model": LLM})  # a load call: nothing to do
    assert r.status == 200 and r.json()["done_reason"] == "load", r
    r = node.request("POST", "/api/chat", {"model": "no-such-model",
                                           "messages": [{"role": "user", "content": "hi"}]})
    assert r.status == 404 and "no-such-model" in r.json()["error"], r
    r = node.request("POST", "/api/generate", {"model": LLM, "prompt": "x", "options": 3})
    assert r.status == 400 and r.json() == {"error": "options must be an object"}, r
    r = node.request("POST", "/api/copy", {"source": LLM, "destination": "x"})
    assert r.status == 404 and "/api/copy" in r.json()["error"], r
    r = node.request("GET", "/api/chat")
    assert r.status == 405 and isinstance(r.json()["error"], str), r
    r = node.request("POST", "/api/chat", raw_body=b"{not json")
    assert r.status == 400 and isinstance(r.json()["error"], str), r

    # format: the grammar makes even the tiny model's answer JSON (its greedy text is not)
    plain = node.request("POST", "/api/chat", dict(body, stream=False, options=CONSTRAINED))
    assert plain.status == 200 and not_json(plain.json()["message"]["content"]), plain
    r = node.request("POST", "/api/chat", dict(body, stream=False, options=CONSTRAINED,
                                               format="json"))
    assert r.status == 200 and r.json()["done_reason"] == "stop", r
    assert isinstance(json.loads(r.json()["message"]["content"]), dict), r
    # a raw generate (/v1/completions, which has no response_format): the same, by json_schema
    for fmt, ok in (("json", lambda v: isinstance(v, dict)), (MOOD, lambda v: follows(MOOD, v))):
        g = node.request("POST", "/api/generate", {
            "model": LLM, "prompt": "Once upon a time", "raw": True, "stream": False,
            "format": fmt, "options": CONSTRAINED})
        assert g.status == 200 and g.json()["done_reason"] == "stop", g
        assert ok(json.loads(g.json()["response"])), g


def requests_by_label(node):
    """{(endpoint, code, route): count} of mesh_llm_requests_total."""
    r = http(node.console_port, "GET", "/metrics")
    assert r.status == 200, r
    return {(m[0], m[1], m[2]): float(m[3]) for m in re.findall(
        r'^mesh_llm_requests_total\{model="[^"]*",endpoint="([^"]+)",code="(\d+)",'
        r'route="([^"]+)"\} (\S+)$', r.body.decode(), re.M)}


def test_ollama_protocol_solo(start_node):
    n = start_node(*host_args(), env=ENV)
    check_protocol(n)
    # Ollama's requests count under their own labels, not the OpenAI ones they became; the
    # request log shows the path the client called
    want = {("ollama_chat", "200", "local"): 4, ("ollama_generate", "200", "local"): 3,
            ("ollama_chat", "404", "local"): 1, ("chat", "200", "local"): 1}
    wait_for(lambda: all(requests_by_label(n).get(k, 0) == v for k, v in want.items()),
             timeout=30, what=f"the metrics {want}")
    assert not any(e.startswith("ollama_") and e not in ("ollama_chat", "ollama_generate")
                   for e, _, _ in requests_by_label(n)), requests_by_label(n)
    paths = [q["path"] for q in n.status()["requests"]]
    assert paths.count("/api/chat") == 5 and paths.count("/api/generate") == 3, paths
    assert paths.count("/v1/chat/completions") == 1, paths
    tags = n.request("GET", "/api/tags").json()["models"]
    by = {m["name"]: m for m in tags}
    assert set(by) >= {LLM, EMB}
    assert by[EMB]["details"]["quantization_level"] == "Q8_0"
    assert by[LLM]["details"]["family"] == "llama" and by[LLM]["size"] > 0


def state_of(node, model):
    return {m["name"]: m["status"] for m in node.status()["models"]}.get(model)


def test_keep_alive_zero_unloads(start_node):
    """keep_alive 0 (a local management action: this client is on loopback) unloads the model
    once the answer is out; a load call with keep_alive 0 unloads at once."""
    n = start_node(*host_args(), env=ENV)
    wait_for(lambda: state_of(n, LLM) == "ready", timeout=60, what="the model to load")
    r = n.request("POST", "/api/generate", {"model": LLM, "prompt": "Once", "stream": False,
                                            "keep_alive": 0, "options": GREEDY})
    assert r.status == 200 and r.json()["done"] is True, r
    wait_for(lambda: state_of(n, LLM) == "unloaded", timeout=60, what="the model to unload")
    assert "keep_alive 0: unloading stories260K after the request" in n.stderr()
    # /v1/models agrees with the node's state (it loads on the next request; not "loading")
    rows = {m["id"]: m["status"] for m in n.request("GET", "/v1/models").json()["data"]}
    assert rows[LLM] == "unloaded", rows
    ps = [m["name"] for m in n.request("GET", "/api/ps").json()["models"]]
    assert ps == [EMB], ps
    # the next request loads it again; an explicit unload call (no prompt) unloads it at once
    r = n.request("POST", "/api/chat", {"model": LLM, "stream": False, "options": GREEDY,
                                        "messages": [{"role": "user", "content": "x"}]})
    assert r.status == 200, r
    r = n.request("POST", "/api/generate", {"model": LLM, "keep_alive": "0s"})
    assert r.status == 200 and r.json()["done_reason"] == "unload", r
    wait_for(lambda: state_of(n, LLM) == "unloaded", timeout=60, what="the model to unload")


def ps_expiry(node, model):
    """/api/ps's expires_at of model, as seconds from now (None: not listed)."""
    import datetime
    for m in node.request("GET", "/api/ps").json()["models"]:
        if m["name"] == model:
            at = datetime.datetime.fromisoformat(m["expires_at"].replace("Z", "+00:00"))
            return (at - datetime.datetime.now(datetime.timezone.utc)).total_seconds()
    return None


def test_keep_alive_duration_unloads_when_idle(start_node):
    """keep_alive DURATION (local management): the model stays loaded that long idle after the
    request, then is unloaded (/api/ps says when); -1 keeps it until evicted (the default);
    a value that is no duration is a 400."""
    n = start_node(*host_args(), env=ENV)
    wait_for(lambda: state_of(n, LLM) == "ready", timeout=60, what="the model to load")
    assert ps_expiry(n, LLM) > 100 * 365 * 86400  # no keep_alive yet: "forever", as Ollama's -1
    r = n.request("POST", "/api/chat", {"model": LLM, "stream": False, "options": GREEDY,
                                        "keep_alive": "10m",
                                        "messages": [{"role": "user", "content": "x"}]})
    assert r.status == 200, r
    left = ps_expiry(n, LLM)
    assert 9 * 60 < left <= 10 * 60 + 5, left
    assert "keep_alive: stories260K is unloaded after 600.0 s idle" in n.stderr()
    # a load call (no prompt) with keep_alive -1: back to no limit
    r = n.request("POST", "/api/generate", {"model": LLM, "keep_alive": -1})
    assert r.status == 200 and r.json()["done_reason"] == "load", r
    assert ps_expiry(n, LLM) > 100 * 365 * 86400
    # a short one: unloaded once idle that long
    r = n.request("POST", "/api/generate", {"model": LLM, "prompt": "Once", "stream": False,
                                            "keep_alive": "1s", "options": GREEDY})
    assert r.status == 200 and r.json()["done"] is True, r
    wait_for(lambda: state_of(n, LLM) == "unloaded", timeout=30,
             what="the model to unload once idle 1 s")
    # the log line comes once its llama-server has exited
    wait_for(lambda: "model stories260K unloaded" in n.stderr(), timeout=30,
             what="the unload logged")
    assert state_of(n, EMB) == "ready"  # the other model had none
    # the unload ended it: the next request loads the model again, with no limit
    r = n.request("POST", "/api/generate", {"model": LLM, "prompt": "Once", "stream": False,
                                            "options": GREEDY})
    assert r.status == 200, r
    assert ps_expiry(n, LLM) > 100 * 365 * 86400
    r = n.request("POST", "/api/chat", {"model": LLM, "keep_alive": "soon",
                                        "messages": [{"role": "user", "content": "x"}]})
    assert r.status == 400 and "keep_alive" in r.json()["error"], r


def test_ollama_paths_refused_through_the_tunnel(start_node, tmp_path):
    """A mesh member reaches only the inference API: / and Ollama's paths (pull and delete among
    them: local management) answer 403 (Ollama's in Ollama's shape), on every pipelined request
    of a tunnel; the entry node translates, so hosts only ever see OpenAI requests."""
    a = start_node("--port", "0", "--model", model_path(LLM))
    pull = json.dumps({"model": "x/y:Q4_0"}).encode()
    chat = json.dumps({"model": LLM, "messages": [{"role": "user", "content": "hi"}]}).encode()
    # (the first request of a tunnel must be an inference one: its line is checked first)
    req = (b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
           b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
           b"POST /api/pull HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"Content-Length: %d\r\n\r\n" % len(pull) + pull +
           b"POST /api/chat HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"Content-Length: %d\r\n\r\n" % len(chat) + chat +
           b"DELETE /api/delete HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(pull) + pull)
    f = tmp_path / "req.http"
    f.write_bytes(req)
    r = subprocess.run([TEST_PEER, a.token, "tunnel", LLM, str(f)], capture_output=True,
                       timeout=90)
    assert r.returncode == 0, r.stderr.decode()
    out = r.stdout
    assert out.startswith(b"HTTP/1.1 200 OK\r\n"), out[:300]
    assert out.count(b"HTTP/1.1 403 Forbidden\r\n") == 4, out[:1200]
    bodies = [json.loads(part.split(b"\r\n\r\n", 1)[1].split(b"HTTP/1.1 ")[0])
              for part in out.split(b"HTTP/1.1 403")[1:]]
    # / (the API port's "Ollama is running") is not part of what a member may reach either
    assert isinstance(bodies[0]["error"]["message"], str), bodies
    assert all(isinstance(b["error"], str) for b in bodies[1:]), bodies
    assert "/api/pull" in bodies[1]["error"]
    assert "refused a tunnelled POST /api/pull" in a.stderr()


def run_client(port):
    r = subprocess.run(["node", os.path.join(JS, "ollama.mjs"), f"http://127.0.0.1:{port}", LLM,
                        EMB], capture_output=True, text=True, timeout=300, cwd=JS)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def check_client(out, want):
    """The protocol as the official client sees it; want: /v1/chat/completions' greedy text."""
    problems = [f"{k}: {v['error']}" for k, v in out.items()
                if isinstance(v, dict) and "error" in v and not isinstance(v.get("status"), int)]
    assert not problems, "\n".join(problems)
    assert isinstance(out["version"]["version"], str)
    names = {m["name"]: m for m in out["list"]}
    assert LLM in names and EMB in names, out["list"]
    assert names[EMB]["details"]["quantization_level"] == "Q8_0"
    assert "completion" in out["show"]["capabilities"]
    c = out["chat"]
    assert c["text"] == want and c["role"] == "assistant" and c["done"] is True
    assert c["done_reason"] == "length" and c["eval_count"] == 8 and c["prompt_eval_count"] > 0
    s = out["chat_stream"]
    assert s["text"] == want and s["n"] >= 2 and s["dones"][-1] is True
    assert not any(s["dones"][:-1]) and s["eval_count"] == 8
    assert out["generate"]["text"] == want and out["generate"]["done"] is True
    assert out["generate_stream"]["text"] == want and out["generate_stream"]["done"] is True
    j = out["chat_json"]
    assert j["done_reason"] == "stop" and isinstance(json.loads(j["text"]), dict), j
    g = out["generate_schema_stream"]
    assert g["done"] is True and follows(g["schema"], json.loads(g["text"])), g
    e = out["embed"]
    assert e["n"] == 2 and e["dim"] == 128 and e["prompt_eval_count"] > 0  # TinyStories-656K
    assert out["embeddings"]["dim"] == 128
    assert LLM in out["ps"] and EMB in out["ps"], out["ps"]
    u = out["unknown_model"]
    assert u["status"] == 404 and "no-such-model" in u["message"], u
    i = out["image_to_text_model"]
    assert i["status"] == 400 and "image" in i["message"], i


needs_client = pytest.mark.skipif(
    not shutil.which("node") or not os.path.isdir(os.path.join(JS, "node_modules", "ollama")),
    reason="needs node and tests/js/node_modules (scripts/deps.sh test)")


@needs_client
def test_official_ollama_client_solo(start_node):
    n = start_node(*host_args(), env=ENV)
    want = openai_text(n, "Once upon a time")
    check_client(run_client(n.api_port), want)


@pytest.fixture(scope="module")
def tool_model():
    """The coding agents' synthesized model (a chat template that takes tools) whose fixed reply
    is a tool call in its template's format (scripts/agent-model.sh tool-call)."""
    r = subprocess.run(["sh", os.path.join(ROOT, "scripts", "agent-model.sh"), SYNTH_BIN,
                        os.path.join(CACHE, "agents"), "tool-call"],
                       check=True, timeout=300, capture_output=True, text=True)
    return r.stdout.strip()


@needs_client
def test_official_ollama_client_tools(start_node, tool_model):
    """tools reach llama-server and its tool call comes back in Ollama's shape, arguments an
    object: whole, streamed (in one line before the last), and the call with its result sent
    back; without tools the same reply is plain text (llama-server parses it only for tools)."""
    n = start_node("--port", "0", "--model", tool_model, env=ENV)
    name = os.path.basename(tool_model)[:-len(".gguf")]
    r = subprocess.run(["node", os.path.join(JS, "ollama.mjs"), f"http://127.0.0.1:{n.api_port}",
                        "tools", name], capture_output=True, text=True, timeout=300, cwd=JS)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    call = [{"function": {"name": "weather", "arguments": {"city": "Paris"}}}]
    w = out["whole"]
    assert w["tool_calls"] == call and w["content"] == "" and w["done_reason"] == "stop", w
    s = out["stream"]
    assert s["tool_calls"] == call and s["dones"][-1] is True and not any(s["dones"][:-1]), s
    a = out["after"]  # the assistant's call and the tool's result went into the prompt
    assert a["tool_calls"] == call and a["prompt_eval_count"] > w["prompt_eval_count"], (a, w)
    p = out["plain"]
    assert p["tool_calls"] is None and p["content"] == (
        '<tool_call>{"name":"weather","arguments":{"city":"Paris"}}</tool_call>'), p
    want = {("ollama_chat", "200", "local"): 4}
    wait_for(lambda: all(requests_by_label(n).get(k, 0) == v for k, v in want.items()),
             timeout=30, what=f"the metrics {want}")


@needs_client
def test_official_ollama_client_through_client_node(start_node):
    """A --client node serves nothing: every Ollama call is routed to the host, and its
    listings show the host's models."""
    h = start_node(*host_args(), env=ENV)
    c = start_node("--port", "0", "--client", "--join", h.token, env=ENV)

    def both_ready():
        r = c.request("GET", "/v1/models")
        st = {m["id"]: m.get("status") for m in r.json()["data"]} if r.status == 200 else {}
        return st.get(LLM) == "ready" and st.get(EMB) == "ready"
    h.request("POST", "/v1/embeddings", {"model": EMB, "input": "x"})  # load it
    openai_text(h, "x")
    wait_for(both_ready, timeout=60, what="the client node to see both models ready")
    want = openai_text(h, "Once upon a time")
    check_client(run_client(c.api_port), want)
    # the host answered, through the mesh; the host saw an OpenAI request
    r = c.request("POST", "/api/generate", {"model": LLM, "prompt": "Once upon a time",
                                            "options": GREEDY})
    assert r.status == 200 and "".join(l["response"] for l in ndjson(r.body)) == want, r
    assert r.headers["x-mesh-node"] == h.id, r.headers
    assert r.headers["x-mesh-route"].startswith("tunnel:"), r.headers
    # the entry node counts its Ollama requests as such; the host saw OpenAI's
    wait_for(lambda: requests_by_label(c).get(("ollama_generate", "200", "tunnel"), 0) >= 3,
             timeout=30, what="the client node's ollama_generate count")
    assert requests_by_label(c).get(("ollama_embed", "200", "tunnel"), 0) >= 1
    assert not any(e.startswith("ollama_") for e, _, _ in requests_by_label(h)), \
        requests_by_label(h)
    assert requests_by_label(h).get(("chat", "200", "local"), 0) >= 3
    assert "/api/generate" in [q["path"] for q in c.status()["requests"]]


def test_ollama_port(start_node):
    """--ollama-port serves the same API on a second port (here any free one), bound like
    --port (127.0.0.1); off by default."""
    n = start_node("--port", "0", "--ollama-port", "0", "--model", model_path(LLM), env=ENV)
    port = int(n.ready["ollama"])
    assert port != n.api_port
    r = http(port, "GET", "/api/tags")
    assert r.status == 200 and [m["name"] for m in r.json()["models"]] == [LLM], r
    r = http(port, "POST", "/api/chat", {"model": LLM, "stream": False, "options": GREEDY,
                                         "messages": [{"role": "user", "content": "Once"}]})
    assert r.status == 200 and r.json()["done"] is True, r
    assert http(port, "GET", "/v1/models").status == 200
    check_root(port)
    assert "ollama=" not in " ".join(start_node("--port", "0", "--model", model_path(LLM))
                                     .stdout_lines)
    assert "also on 127.0.0.1:%d (--ollama-port)" % port in n.stderr()


@needs_client
def test_official_ollama_client_pull(start_node, hub, tmp_path):
    """POST /api/pull runs the node's downloader (from the hub stand-in): streamed progress
    ending in success; the model is then listed (and served); a second pull has nothing to do.
    A bad reference is an Ollama-shaped 400, and only a local client may pull."""
    models = tmp_path / "models"
    models.mkdir()
    env = dict(ENV, HF_ENDPOINT=hub.url, MESH_LLM_DL_BACKOFF_MS="50")
    n = start_node("--port", "0", "--model", model_path(EMB) + ":embedding", "--models-dir",
                   str(models), env=env)
    ref = "hf://org/tiny-GGUF/stories260K.gguf"
    r = subprocess.run(["node", os.path.join(JS, "ollama.mjs"), f"http://127.0.0.1:{n.api_port}",
                        "pull", ref], capture_output=True, text=True, timeout=300, cwd=JS)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    parts = out["parts"]
    assert parts[0]["status"] == "pulling manifest" and parts[-1]["status"] == "success", parts
    for p in parts[1:-1]:
        assert p["status"] == "downloading stories260K" and p["completed"] <= p["total"], p
    assert out["again"]["status"] == "success"
    assert LLM in out["tags"], out["tags"]
    assert (models / "stories260K.gguf").exists()
    g = n.request("POST", "/api/generate", {"model": LLM, "prompt": "Once", "stream": False,
                                            "options": GREEDY})
    assert g.status == 200 and g.json()["done"] is True, g
    b = n.request("POST", "/api/pull", {"model": "hf://org"})
    assert b.status == 400 and isinstance(b.json()["error"], str), b


def pull_http(node, ref):
    r = node.request("POST", "/api/pull", {"model": ref, "stream": False}, timeout=300)
    assert r.status == 200 and r.json() == {"status": "success"}, r


def listed(node):
    tags = {m["name"] for m in node.request("GET", "/api/tags").json()["models"]}
    v1 = {m["id"] for m in node.request("GET", "/v1/models").json()["data"]}
    return tags, v1


def test_delete_a_pulled_model(start_node, hub, tmp_path):
    """DELETE /api/delete removes a model the node downloaded: its files leave the models
    directory, it is unloaded and gone from /api/tags, /v1/models and the status at once, a chat
    for it is a 404, a second delete a 404 in Ollama's words; a --model file outside the models
    directory is refused (403) and left intact; a pull brings the deleted model back."""
    models = tmp_path / "models"
    models.mkdir()
    own = tmp_path / "own"
    own.mkdir()
    shutil.copy(model_path(EMB), own / "mine.gguf")
    env = dict(ENV, HF_ENDPOINT=hub.url, MESH_LLM_DL_BACKOFF_MS="50")
    n = start_node("--port", "0", "--model", str(own / "mine.gguf") + ":embedding",
                   "--models-dir", str(models), env=env)
    ref = "hf://org/tiny-GGUF/stories260K.gguf"
    pull_http(n, ref)
    assert (models / "stories260K.gguf").exists() and (models / "stories260K.gguf.source").exists()
    g = n.request("POST", "/api/generate", {"model": LLM, "prompt": "Once", "stream": False,
                                            "options": GREEDY})
    assert g.status == 200 and g.json()["done"] is True, g
    assert n.child_for(LLM) is not None and state_of(n, LLM) == "ready"

    r = n.request("DELETE", "/api/delete", {"model": LLM})
    assert r.status == 200 and r.body == b"", r
    assert sorted(os.listdir(models)) == [], os.listdir(models)
    tags, v1 = listed(n)
    assert LLM not in tags and LLM not in v1 and "mine" in tags, (tags, v1)
    assert state_of(n, LLM) is None
    c = n.request("POST", "/api/chat", {"model": LLM, "stream": False,
                                        "messages": [{"role": "user", "content": "hi"}]})
    assert c.status == 404 and f"model '{LLM}' not found" in c.json()["error"], c
    wait_for(lambda: n.child_for(LLM) is None, timeout=30, what="the model's server to stop")
    r = n.request("DELETE", "/api/delete", {"name": LLM})  # the older field
    assert r.status == 404 and r.json() == {"error": f"model '{LLM}' not found"}, r
    assert n.request("DELETE", "/api/delete", {}).status == 400
    assert n.request("POST", "/api/delete", {"model": LLM}).status == 405

    # the user's own file, given with --model: refused, kept, still served
    r = n.request("DELETE", "/api/delete", {"model": "mine"})
    assert r.status == 403 and "outside this node's models directory" in r.json()["error"], r
    assert (own / "mine.gguf").stat().st_size == os.path.getsize(model_path(EMB))
    assert "mine" in listed(n)[0]

    # a download again brings it back, served
    pull_http(n, ref)
    tags, v1 = listed(n)
    assert LLM in tags and LLM in v1, (tags, v1)
    g = n.request("POST", "/api/generate", {"model": LLM, "prompt": "Once", "stream": False,
                                            "options": GREEDY})
    assert g.status == 200 and g.json()["done"] is True, g
    # and by the reference it was pulled by
    r = n.request("DELETE", "/api/delete", {"model": ref})
    assert r.status == 200 and not (models / "stories260K.gguf").exists(), r
    assert LLM not in listed(n)[0]


@needs_client
def test_official_ollama_client_delete(start_node, hub, tmp_path):
    """The official client's ollama.delete: success, the model gone from ollama.list, and a
    second delete an error with status 404."""
    models = tmp_path / "models"
    models.mkdir()
    env = dict(ENV, HF_ENDPOINT=hub.url, MESH_LLM_DL_BACKOFF_MS="50")
    n = start_node("--port", "0", "--model", model_path(EMB) + ":embedding", "--models-dir",
                   str(models), env=env)
    pull_http(n, "hf://org/tiny-GGUF/stories260K.gguf")
    r = subprocess.run(["node", os.path.join(JS, "ollama.mjs"), f"http://127.0.0.1:{n.api_port}",
                        "delete", LLM], capture_output=True, text=True, timeout=300, cwd=JS)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["first"] == {"status": "success"}, out
    assert LLM not in out["tags"] and EMB in out["tags"], out
    assert out["again"]["status"] == 404 and "not found" in out["again"]["message"], out
    assert not (models / "stories260K.gguf").exists()


def test_delete_refused_from_the_network(start_node, netns, tmp_path):
    """DELETE /api/delete is local management: a client on the network without the node's API
    key is refused (403) and the model stays; the same call from this machine deletes it."""
    ns, addr = netns
    models = tmp_path / "models"
    models.mkdir()
    shutil.copy(model_path(LLM), models / "copy.gguf")
    n = start_node("--port", "0", "--listen-all", "--models-dir", str(models), env=ENV)
    assert "copy" in listed(n)[0]
    r = http(n.api_port, "DELETE", "/api/delete", {"model": "copy"}, host=addr, ns=ns)
    assert r.status == 403 and "local management" in r.json()["error"], r
    assert (models / "copy.gguf").exists() and "copy" in listed(n)[0]
    r = n.request("DELETE", "/api/delete", {"model": "copy"})
    assert r.status == 200 and not (models / "copy.gguf").exists(), r


def test_broken_stream_ends_with_an_error_line(start_node):
    """The model server dies in the middle of a streamed chat: the client's NDJSON stream ends
    with an {"error": …} line (and its last chunk), never a silent cut."""
    n = start_node("--port", "0", "--model", model_path(LLM), env=ENV)
    wait_for(lambda: state_of(n, LLM) == "ready", timeout=60, what="the model to load")
    pid = n.child_for(LLM)[0]
    body = json.dumps({"model": LLM, "messages": [{"role": "user", "content": "Once"}],
                       "options": {"num_predict": 100000, "temperature": 0}}).encode()
    with socket.create_connection(("127.0.0.1", n.api_port), timeout=60) as s:
        s.sendall(b"POST /api/chat HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body) + body)
        got = b""
        while got.count(b'"done":false') < 3:  # the stream is under way
            c = s.recv(65536)
            assert c, got
            got += c
        os.kill(pid, signal.SIGKILL)
        while not got.endswith(b"0\r\n\r\n"):
            c = s.recv(65536)
            assert c, f"cut without its last chunk: {got[-300:]!r}"
            got += c
    assert got.startswith(b"HTTP/1.1 200 OK\r\n") and b"application/x-ndjson" in got
    # the chunks' payloads: NDJSON lines, the last one an error
    lines = [l for l in got.split(b"\n") if l.startswith(b"{")]
    last = json.loads(lines[-1])
    assert set(last) == {"error"} and isinstance(last["error"], str), last
    assert all(json.loads(l).get("done") is False for l in lines[:-1])

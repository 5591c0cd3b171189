"""Solo node: the OpenAI API proxied to real llama-server children (issue 2, item 4)."""
import json
import os
import re
import signal
import socket
import threading
import time

import pytest

from harness.node import (MESH_BIN, Node, Pushback, children_of, cmdline, http, model_path, pid_alive,
                      read_response, sse_events, wait_for)

S = "stories260K"
T = "TinyStories-656K-Q8_0"


@pytest.fixture
def two_models(start_node):
    return start_node("--port", "0", "--model", model_path(S), "--model", model_path(T),
                      "--max-loaded-models", "2")


def assert_serving(node, model=S):
    r = node.complete(model)
    assert r.status == 200, r
    assert r.json()["choices"][0]["text"], r


def streamed(node, path, body, timeout=60):
    body = dict(body, stream=True)
    r = node.request("POST", path, body, timeout=timeout)
    assert r.status == 200, r
    assert r.headers["content-type"].startswith("text/event-stream")
    ev = sse_events(r.body)
    assert ev and ev[-1] == "[DONE]", ev[-3:]
    return [json.loads(e) for e in ev[:-1]]


@pytest.mark.asan_smoke
def test_ready_line_and_models(two_models):
    n = two_models
    assert set(n.ready) >= {"api", "console", "quic", "id", "token"}
    assert n.api_port > 0 and n.api_port != 9337
    r = n.request("GET", "/v1/models")
    assert r.status == 200
    data = r.json()["data"]
    assert {m["id"]: m["status"] for m in data} == {S: "ready", T: "ready"}
    assert n.request("GET", "/health").json()["status"] == "ok"
    # children bind loopback only, on their own ports
    kids = n.llama_children()
    assert len(kids) == 2
    for argv in kids.values():
        assert argv[argv.index("--host") + 1] == "127.0.0.1"


@pytest.mark.asan_smoke
def test_chat_and_completions_stream_and_not(two_models):
    n = two_models
    msgs = [{"role": "user", "content": "Tell me a story"}]
    r = n.request("POST", "/v1/chat/completions", {"model": S, "messages": msgs, "max_tokens": 24})
    assert r.status == 200, r
    text = r.json()["choices"][0]["message"]["content"]
    assert len(text.strip()) > 0
    r = n.complete(S, max_tokens=24)
    assert r.json()["choices"][0]["text"].strip()

    chunks = streamed(n, "/v1/chat/completions", {"model": S, "messages": msgs, "max_tokens": 24})
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert len(chunks) > 5 and content.strip()
    chunks = streamed(n, "/v1/completions", {"model": T, "prompt": "Once", "max_tokens": 24})
    assert len(chunks) > 5 and "".join(c["choices"][0]["text"] for c in chunks).strip()


def test_greedy_output_identical_to_direct(two_models):
    """Byte-for-byte proxying: the same greedy request gives the same text directly and via us."""
    n = two_models
    _, port, _ = n.child_for(S)
    body = {"model": S, "prompt": "Once upon a time", "max_tokens": 40, "temperature": 0,
            "seed": 1}
    direct = http(port, "POST", "/v1/completions", body).json()["choices"][0]["text"]
    proxied = n.request("POST", "/v1/completions", body).json()["choices"][0]["text"]
    assert direct == proxied and len(direct) > 20


def test_two_models_routed_by_name(two_models):
    n = two_models
    for m in (S, T, S, T):
        r = n.complete(m)
        assert r.status == 200, r
        assert r.json()["model"] == m
    # with two models, a missing model is an error, not a guess
    r = n.request("POST", "/v1/completions", {"prompt": "x"})
    assert r.status == 400 and "model" in r.json()["error"]["message"]


def test_single_model_default(start_node):
    n = start_node("--port", "0", "--model", model_path(S))
    r = n.request("POST", "/v1/completions", {"prompt": "Once", "max_tokens": 4})
    assert r.status == 200 and r.json()["model"] == S


def slot_busy(port):
    slots = http(port, "GET", "/slots").json()
    return any(s["is_processing"] for s in slots)


def test_stream_not_buffered_and_disconnect_cancels_upstream(start_node):
    n = start_node("--port", "0", "--model", model_path(S))
    _, port, _ = n.child_for(S)
    body = json.dumps({"model": S, "prompt": "Once upon a time", "max_tokens": 1900,
                       "ignore_eos": True, "stream": True}).encode()
    s = socket.create_connection(("127.0.0.1", n.api_port), timeout=30)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    got = b""
    while b"data: " not in got:
        c = s.recv(4096)
        assert c, "closed before the first event"
        got += c
    # First event is here while llama-server is still generating: nothing was buffered whole.
    assert slot_busy(port), "generation already over when the first chunk arrived"
    s.close()
    # The client went away: the upstream connection is closed and llama-server stops early.
    wait_for(lambda: not slot_busy(port), timeout=20, what="llama-server to stop generating")
    assert_serving(n)


def raw(port, data, timeout=30):
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        return read_response(s, timeout)


@pytest.mark.asan_smoke
def test_error_statuses_and_node_keeps_serving(start_node):
    n = start_node("--port", "0", "--model", model_path(S), "--model", model_path(T),
                   "--max-body-size", "64K", "--max-loaded-models", "2")
    p = n.api_port

    def err(r, status):
        assert r.status == status, r
        e = r.json()["error"]
        assert e["message"] and e["type"] and "code" in e
        assert_serving(n)

    err(n.request("POST", "/v1/chat/completions", raw_body=b'{"model": "stories260K",'), 400)
    err(n.request("POST", "/v1/chat/completions", raw_body=b"[1,2]"), 400)
    err(n.request("POST", "/v1/chat/completions", {"model": 5}), 400)
    err(n.request("POST", "/v1/chat/completions", {"model": "nope", "messages": []}), 404)
    assert "nope" in n.request("POST", "/v1/completions", {"model": "nope"}).body.decode()
    r = n.request("GET", "/v1/chat/completions")
    err(r, 405)
    assert r.headers["allow"] == "POST"
    err(n.request("DELETE", "/v1/models", {}), 405)  # (JSON: else 415 first)
    err(n.request("GET", "/v1/nothing-here"), 404)
    big_header = b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (70 * 1024) + b"\r\n\r\n"
    err(raw(p, big_header), 431)
    body = json.dumps({"model": S, "prompt": "a" * (65 * 1024)}).encode()
    err(n.request("POST", "/v1/completions", raw_body=body), 413)
    # declared too large up front: refused before the body is read
    r = raw(p, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999\r\n\r\n")
    err(r, 413)
    err(raw(p, b"GARBAGE\r\n\r\n"), 400)
    # chunked request bodies are accepted and forwarded with a length
    body = json.dumps({"model": S, "prompt": "Once", "max_tokens": 3}).encode()
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    r = raw(p, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
               b"Content-Type: application/json\r\nConnection: close\r\n\r\n" + chunked)
    assert r.status == 200 and r.json()["model"] == S


def test_default_body_limit_is_8mib(start_node):
    n = start_node("--port", "0", "--model", model_path(S))
    body = b'{"model":"stories260K","prompt":"' + b"a" * (8 * 1024 * 1024 + 10) + b'"}'
    r = n.request("POST", "/v1/completions", raw_body=body)
    assert r.status == 413, r
    assert_serving(n)


def test_api_key(start_node):
    n = start_node("--port", "0", "--model", model_path(S), "--api-key", "s3cret")
    body = {"model": S, "prompt": "Once", "max_tokens": 3}
    assert n.request("POST", "/v1/completions", body).status == 401
    r = n.request("POST", "/v1/completions", body, headers={"Authorization": "Bearer wrong"})
    assert r.status == 401 and r.json()["error"]["code"] == "invalid_api_key"
    assert n.request("GET", "/v1/models").status == 401
    r = n.request("POST", "/v1/completions", body, headers={"Authorization": "Bearer s3cret"})
    assert r.status == 200, r


def test_slow_and_idle_clients_timed_out(start_node):
    n = start_node("--port", "0", "--model", model_path(S),
                   env={"MESH_LLM_HTTP_READ_MS": "400", "MESH_LLM_HTTP_IDLE_MS": "400"})
    # slowloris: a header that never ends gets 408 and the connection closes
    s = socket.create_connection(("127.0.0.1", n.api_port), timeout=10)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
    r = read_response(s, timeout=10)
    assert r.status == 408
    s.close()
    # an idle keep-alive connection is closed by the server
    s = socket.create_connection(("127.0.0.1", n.api_port), timeout=10)
    assert s.recv(1) == b""
    s.close()
    assert_serving(n)


def test_keep_alive_and_pipelining(start_node):
    n = start_node("--port", "0", "--model", model_path(S))
    body = json.dumps({"model": S, "prompt": "Once", "max_tokens": 3}).encode()
    one = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"Content-Length: %d\r\n\r\n" % len(body) + body)
    with socket.create_connection(("127.0.0.1", n.api_port), timeout=30) as s:
        s.sendall(one + one)  # two pipelined requests: both answers may come in one read
        ps = Pushback(s)
        for _ in range(2):
            r = read_response(ps)
            assert r.status == 200 and r.headers["connection"] == "keep-alive"
        s.sendall(one)  # and a third on the same connection
        assert read_response(ps).status == 200


def test_100_concurrent_streams(start_node):
    n = start_node("--port", "0", "--model", model_path(S))
    results = [None] * 100

    def run(i):
        try:
            r = n.request("POST", "/v1/completions",
                          {"model": S, "prompt": "Once upon a time", "max_tokens": 16,
                           "stream": True}, timeout=120)
            ev = sse_events(r.body)
            results[i] = (r.status, ev[-1] if ev else None, len(ev))
        except Exception as e:  # noqa: BLE001 - reported below
            results[i] = ("exc", repr(e), 0)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(100)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=180)
    bad = [r for r in results if r is None or r[0] != 200 or r[1] != "[DONE]" or r[2] < 3]
    assert not bad, bad[:5]
    assert_serving(n)


def test_child_killed_503_then_recovery(start_node):
    n = start_node("--port", "0", "--model", model_path(S), "--model", model_path(T),
                   "--max-loaded-models", "2")
    pid, _, _ = n.child_for(S)
    os.kill(pid, signal.SIGKILL)
    seen = []

    def got_503():
        r = n.complete(S, max_tokens=2)
        seen.append(r.status)
        return r.status == 503 and r

    r = wait_for(got_503, timeout=10, what="503 while the child restarts")
    assert "stories260K" in r.json()["error"]["message"]
    assert set(seen) <= {502, 503}, seen
    # the other model is unaffected
    assert_serving(n, T)
    wait_for(lambda: n.complete(S, max_tokens=2).status == 200, timeout=30, what="recovery")
    assert "killed by signal 9" in n.stderr()
    new = n.child_for(S)
    assert new and new[0] != pid


def test_bad_model_file_reports_why(start_node, tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    n = start_node("--port", "0", "--model", str(bad), "--model", model_path(S),
                   "--max-loaded-models", "2", wait_ready=False)
    # a file named with --model that llama.cpp cannot read (GGUF version 0) stops the start
    # (issue 26; test_first_hour.py), before any llama-server is started
    assert n.proc.wait(timeout=60) == 1
    err = n.stderr()
    assert str(bad) in err and "GGUF version 0" in err, err
    assert "llama-server for model broken" not in err


@pytest.mark.asan_smoke
def test_sigterm_stops_children_and_exits_0(start_node):
    n = start_node("--port", "0", "--model", model_path(S), "--model", model_path(T),
                   "--max-loaded-models", "2")
    kids = list(n.llama_children())
    assert len(kids) == 2
    assert n.stop(signal.SIGTERM) == 0
    for k in kids:
        wait_for(lambda: not pid_alive(k), timeout=10, what=f"child {k} to exit")


def test_sigint_exits_0(start_node):
    n = start_node("--port", "0", "--model", model_path(S))
    kids = list(n.llama_children())
    assert n.stop(signal.SIGINT) == 0
    for k in kids:
        wait_for(lambda: not pid_alive(k), timeout=10, what=f"child {k} to exit")


def test_sigkill_of_node_leaves_no_children(start_node):
    n = start_node("--port", "0", "--model", model_path(S), "--model", model_path(T),
                   "--max-loaded-models", "2")
    kids = list(n.llama_children())
    assert len(kids) == 2
    n.stop(signal.SIGKILL)
    for k in kids:
        wait_for(lambda: not pid_alive(k), timeout=10, what=f"orphan {k} to die")


def test_embeddings(start_node):
    n = start_node("--port", "0", "--model", model_path(S) + ":embedding", "--model",
                   model_path(T))
    r = n.request("POST", "/v1/chat/completions",
                  {"model": S, "messages": [{"role": "user", "content": "hi"}]})
    assert r.status == 400 and "embedding" in r.json()["error"]["message"]
    r = n.request("POST", "/v1/embeddings", {"model": S, "input": "hello world"})
    assert r.status == 200, r
    vec = r.json()["data"][0]["embedding"]
    assert len(vec) == 64 and any(abs(x) > 0 for x in vec)
    r = n.request("POST", "/v1/embeddings", {"model": T, "input": "hello"})
    assert r.status == 400 and "embedding" in r.json()["error"]["message"]
    _, _, argv = n.child_for(S)
    assert "--embeddings" in argv and argv[argv.index("--pooling") + 1] == "mean"


def test_ctx_size_and_llamacpp_args_reach_child(start_node):
    """--ctx-size is each slot's context; a -np among the llamacpp_args is the slot count (the
    node gives llama-server the total, slots x context)."""
    n = start_node("--port", "0", "--model", model_path(S), "--ctx-size", "512",
                   "--llamacpp-args", "--parallel 2 --temp 0.5")
    _, port, argv = n.child_for(S)
    assert argv[argv.index("--ctx-size") + 1] == "1024"
    assert argv[argv.index("--parallel") + 1] == "2"
    assert [s["n_ctx"] for s in http(port, "GET", "/slots").json()] == [512, 512]


def test_llamacpp_args_context_is_llama_cpps(start_node):
    """A -c among the llamacpp_args sets llama-server's total context itself: the node then
    leaves the slots to llama.cpp (its automatic 4 sharing that context) and passes no -np."""
    n = start_node("--port", "0", "--model", model_path(S), "--llamacpp-args", "-c 256")
    _, port, argv = n.child_for(S)
    assert "-np" not in argv and argv[argv.index("-c") + 1] == "256", argv
    slots = http(port, "GET", "/slots").json()
    assert len(slots) == 4 and {s["n_ctx"] for s in slots} == {256}, slots


def test_json_logs(start_node):
    n = start_node("--port", "0", "--model", model_path(S), "--log-format", "json")
    lines = [l for l in n.stderr().splitlines() if l.strip()]
    assert lines
    for l in lines:
        o = json.loads(l)
        assert {"ts", "level", "module", "msg"} <= set(o)


def test_verbose_shows_child_output(start_node):
    n = start_node("--port", "0", "--model", model_path(S), "-v")
    assert "[stories260K]" in n.stderr() and "DEBUG" in n.stderr()


def run_cli(*args, timeout=10, home=None):
    """The binary run as a user would; home: its own MESH_LLM_HOME (a node that starts), so that
    another node on this machine (a benchmark's, holding ~/.mesh-llm) does not meet it."""
    import subprocess
    env = None
    if home is not None:
        env = dict(os.environ, MESH_LLM_HOME=str(home), MESH_LLM_PORTMAP="0")
    return subprocess.run([MESH_BIN, *args], capture_output=True, text=True, timeout=timeout,
                          env=env)


def test_cli_help_version_and_errors(tmp_path):
    r = run_cli("--help")
    assert r.returncode == 0 and "--model" in r.stdout and "--api-key" in r.stdout
    r = run_cli("--version")
    assert r.returncode == 0 and re.match(r"mesh-llm \d+\.\d+\.\d+", r.stdout)
    r = run_cli("--port", "abc")
    assert r.returncode == 2 and "--port" in r.stderr
    r = run_cli("--model", str(tmp_path / "missing.gguf"))
    assert r.returncode == 2 and "missing.gguf" in r.stderr
    r = run_cli("--bogus")
    assert r.returncode == 2 and "--bogus" in r.stderr


def test_port_in_use_is_a_clear_error(start_node, tmp_path):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    port = s.getsockname()[1]
    try:
        r = run_cli("--port", str(port), "--model", model_path(S), "--console", "0",
                    "--bind-port", "0", home=tmp_path / "home")
        assert r.returncode == 1 and "in use" in r.stderr, r.stderr
    finally:
        s.close()

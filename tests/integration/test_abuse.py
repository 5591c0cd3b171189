"""What a hostile or careless API client can do to a node: bodies the node must refuse in the
shape of its API, arguments that would take memory behind the ledger's back, model files that
must not cost the node its loaded model.

Real mesh-llm processes, real llama-server children, models from ../shared/models."""
import json
import os
import socket
import time

import pytest

from harness.node import http, model_path, wait_for

S = "stories260K"
T = "TinyStories-656K-Q8_0"


def models_dir(tmp_path, *names):
    d = tmp_path / "models"
    d.mkdir(exist_ok=True)
    for name in names:
        os.symlink(model_path(name), d / f"{name}.gguf")
    return d


def ready(n, name):
    return any(m["name"] == name and m["status"] == "ready" for m in n.status()["models"])


def anthropic_error(r, status=400):
    assert r.status == status, r
    body = r.json()
    assert body["type"] == "error", body
    assert body["error"]["type"] == "invalid_request_error" and body["error"]["message"], body
    return body["error"]["message"]


def test_messages_invalid_body_is_anthropic_400(start_node, tmp_path):
    n = start_node("--port", "0", "--models-dir", str(models_dir(tmp_path, S)))
    for body, says in (({}, "messages"), ({"model": S}, "messages"),
                       ({"model": S, "messages": []}, "messages"),
                       ({"model": S, "messages": "hi"}, "messages"),
                       ({"model": S, "messages": [{"content": "hi"}]}, "messages.0"),
                       ({"model": S, "max_tokens": "lots",
                         "messages": [{"role": "user", "content": "hi"}]}, "max_tokens")):
        for path in ("/v1/messages", "/v1/messages/count_tokens"):
            if path.endswith("count_tokens") and "max_tokens" in body:
                continue
            assert says in anthropic_error(n.request("POST", path, body)), (path, body)
    # a valid body still reaches the model
    r = n.request("POST", "/v1/messages", {"model": S, "max_tokens": 4,
                                           "messages": [{"role": "user", "content": "Once"}]})
    assert r.status == 200 and r.json()["type"] == "message", r


def chat(n, model, path="/v1/chat/completions"):
    return n.request("POST", path, {"model": model, "max_tokens": 4,
                                    "messages": [{"role": "user", "content": "Once"}]})


def test_unusable_gguf_evicts_nothing(start_node, tmp_path):
    """A 0-byte, truncated or bad-header GGUF fails at once, on its first request too, and the
    model that was loaded stays loaded (its llama-server is the same process)."""
    d = models_dir(tmp_path, S)
    good = open(model_path(S), "rb").read()
    (d / "empty.gguf").write_bytes(b"")
    (d / "truncated.gguf").write_bytes(good[:len(good) // 2])
    (d / "badheader.gguf").write_bytes(b"GGUF" + b"\xff" * 60)
    n = start_node("--port", "0", "--models-dir", str(d), "--max-loaded-models", "1")
    assert chat(n, S).status == 200
    pid = n.child_for(S)[0]
    offered = {m["id"] for m in n.request("GET", "/v1/models").json()["data"]}
    assert {"empty", "truncated", "badheader"} <= offered, offered
    for bad in ("empty", "truncated", "badheader"):
        for path in ("/v1/chat/completions", "/v1/messages"):
            r = chat(n, bad, path)
            assert ready(n, S) and n.child_for(S)[0] == pid, (bad, "evicted", r)
            assert r.status == 500 and b"unusable" in r.body, (bad, r)
        assert f"starting llama-server for model {bad} " not in n.stderr()
    r = n.request("POST", "/api/v1/load", {"model_name": "truncated"})
    assert r.status == 500 and b"unusable" in r.body, r
    assert ready(n, S) and n.child_for(S)[0] == pid
    assert chat(n, S).status == 200


def test_llamacpp_args_memory_counted_by_the_ledger(start_node, tmp_path):
    """--max-vram 0.05 (50 MB): what ctx_size cannot load, llamacpp_args cannot load either;
    KV cache types and the micro-batch count too; absurd numbers are refused outright."""
    n = start_node("--port", "0", "--max-vram", "0.05", "--models-dir",
                   str(models_dir(tmp_path, S)))

    def load(**body):
        return n.request("POST", "/api/v1/load", dict(model_name=S, **body))

    r = load(ctx_size=400000)
    assert r.status == 503 and r.json()["error"]["code"] == "insufficient_memory", r
    # 400000 tokens of F32 K and V: 512 MB for stories260K (it used to load a 539 MB child)
    for args in ("-c 400000 -ctk f32 -ctv f32", "--ctx_size=400000",
                 "-c 16384 -b 8192 -ub 8192"):  # 4 GB of attention scores per micro-batch
        r = load(llamacpp_args=args)
        assert r.status == 503 and r.json()["error"]["code"] == "insufficient_memory", (args, r)
        assert n.llama_children() == {}, args
    for args, flag in (("-c 1000000000", "-c"), ("--parallel 100000", "--parallel"),
                       ("-cram -1", "-cram"), ("-b 1000000", "-b")):
        r = load(llamacpp_args=args)
        assert r.status == 400 and r.json()["error"]["code"] == "invalid_llamacpp_args", (args, r)
        assert f"{flag} takes" in r.json()["error"]["message"], r
    assert n.llama_children() == {}
    # within the offer it loads, and the ledger holds the context it was given
    r = load(llamacpp_args="-c 256 -ctk f32")
    assert r.status == 200, r
    argv = n.child_for(S)[2]
    assert argv[argv.index("-c") + 1] == "256" and "f32" in argv
    held = n.status()["node"]["memory"]["held"]
    assert [h["model"] for h in held] == [S] and held[0]["bytes"] < 5e6, held


TPM_CASES = {  # path, body: each generates more than 10 tokens (or 10 in one go at most)
    "chat_stream": ("/v1/chat/completions", {"stream": True, "max_tokens": 12,
                                             "messages": [{"role": "user", "content": "Once"}]}),
    "chat_n4": ("/v1/chat/completions", {"n": 4, "max_tokens": 3,
                                         "messages": [{"role": "user", "content": "Once"}]}),
    "messages": ("/v1/messages", {"max_tokens": 12, "messages": [{"role": "user",
                                                                    "content": "Once"}]}),
    "messages_stream": ("/v1/messages", {"stream": True, "max_tokens": 12,
                                         "messages": [{"role": "user", "content": "Once"}]}),
    "responses_stream": ("/v1/responses", {"stream": True, "max_output_tokens": 12,
                                           "input": "Once"}),
    "completion": ("/completion", {"n_predict": 12, "prompt": "Once"}),
    "completions_stream": ("/completions", {"stream": True, "max_tokens": 12,
                                            "prompt": "Once"}),
}


@pytest.mark.parametrize("case", list(TPM_CASES) + ["disconnect"])
def test_tokens_per_minute_counted_on_every_path(start_node, tmp_path, case):
    """A key limited to 10 tokens a minute: whatever path, streamed or not, n > 1 or a client
    that leaves mid-stream, the tokens generated count and its next request is a 429."""
    kf = tmp_path / "keys"
    kf.write_text("tier tiny tokens_per_minute=10\nkey k tiny sk-k-0123456789\n")
    os.chmod(kf, 0o600)
    n = start_node("--port", "0", "--models-dir", str(models_dir(tmp_path, S)),
                   "--api-keys", str(kf))
    auth = {"Authorization": "Bearer sk-k-0123456789"}

    def used():
        st = http(n.console_port, "GET", "/api/status", headers=auth).json()
        return st["admission"]["keys"]["k"]["tokens_last_minute"]

    if case == "disconnect":
        # a streaming client that goes away after a few events: what was generated counts
        req = json.dumps({"model": S, "stream": True, "max_tokens": 400, "ignore_eos": True,
                          "messages": [{"role": "user", "content": "Once"}]}).encode()
        with socket.create_connection(("127.0.0.1", n.api_port), timeout=30) as s:
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      b"Authorization: Bearer sk-k-0123456789\r\nContent-Type: "
                      b"application/json\r\nContent-Length: %d\r\n\r\n" % len(req) + req)
            got = b""
            deadline = time.monotonic() + 30
            while got.count(b"data: ") < 12 and time.monotonic() < deadline:
                got += s.recv(4096)
    else:
        path, b = TPM_CASES[case]
        r = http(n.api_port, "POST", path, dict(b, model=S, ignore_eos=True), headers=auth)
        assert r.status == 200, r
    wait_for(lambda: used() >= 10, timeout=10, what=f"{case}'s tokens to count")
    r = http(n.api_port, "POST", "/v1/completions", {"model": S, "prompt": "x", "max_tokens": 1},
             headers=auth)
    assert r.status == 429 and r.json()["error"]["code"] == "tokens_per_minute_exceeded", r


AGENT_STREAMS = {
    "messages": ("/v1/messages", {"max_tokens": 1500, "messages": [{"role": "user",
                                                                      "content": "Once"}]},
                 "content_block_delta", "error"),
    "responses": ("/v1/responses", {"max_output_tokens": 1500, "input": "Once"},
                  "response.output_text.delta", "response.failed"),
}


@pytest.mark.parametrize("case", list(AGENT_STREAMS))
def test_host_death_ends_agent_stream_in_its_own_shape(start_node, case):
    """A routed /v1/messages or /v1/responses stream whose host dies mid-stream ends with its
    protocol's error event (Anthropic "error", Responses "response.failed") and a proper end of
    the chunked body, not a silent cut."""
    import signal
    from harness.failover import MODEL, three_nodes
    from harness.streams import Stream
    path, body, delta, end = AGENT_STREAMS[case]
    hosts, c = three_nodes(start_node, replicas=1)
    # a stream the host finishes still ends as the host ended it
    short = dict(body, model=MODEL, stream=True)
    short["max_tokens" if case == "messages" else "max_output_tokens"] = 4
    st = Stream(c.api_port, path, short)
    whole = [json.loads(ev) for ev in st.events()]
    st.close()
    assert st.ended_properly and whole[-1]["type"] in ("message_stop", "response.completed"), \
        whole[-2:]
    st = Stream(c.api_port, path, dict(body, model=MODEL, stream=True, ignore_eos=True,
                                       temperature=0))
    assert st.status == 200, (st.status, st.buf)
    evs, killed = [], False
    for ev in st.events():
        evs.append(json.loads(ev))
        if not killed and evs[-1].get("type") == delta:
            pid, _, _ = hosts[0].child_for(MODEL)
            os.kill(pid, signal.SIGSTOP)  # frozen at the first token, then the host dies
            hosts[0].proc.send_signal(signal.SIGKILL)
            killed = True
    st.close()
    assert killed and st.ended_properly, evs[-3:]
    last = evs[-1]
    assert last["type"] == end, evs[-3:]
    err = last["error"] if case == "messages" else last["response"]["error"]
    assert "failed in the middle of the stream" in err["message"], last


@pytest.mark.parametrize("case", list(AGENT_STREAMS))
def test_local_child_death_ends_agent_stream_in_its_own_shape(start_node, tmp_path, case):
    """The same when the node's own llama-server dies in the middle of the stream."""
    import signal
    from harness.streams import Stream
    path, body, delta, end = AGENT_STREAMS[case]
    n = start_node("--port", "0", "--models-dir", str(models_dir(tmp_path, S)))
    st = Stream(n.api_port, path, dict(body, model=S, stream=True, ignore_eos=True))
    assert st.status == 200 and st.chunked, (st.status, st.headers)
    evs, killed = [], False
    for ev in st.events():
        evs.append(json.loads(ev))
        if not killed and evs[-1].get("type") == delta:
            pid, _, _ = n.child_for(S)
            os.kill(pid, signal.SIGSTOP)  # stopped between two events, then killed
            os.kill(pid, signal.SIGKILL)
            killed = True
    st.close()
    assert killed and st.ended_properly, evs[-3:]
    assert evs[-1]["type"] == end, evs[-3:]

"""Admission control (issue 17 item 2, issue 27 item 4): a per-model cap and a bounded FIFO queue
whose requests wait as long as a client would (10 min by default), 429 with Retry-After over the
limits (a key's tier, a full queue), 503 with Retry-After for a queue that cannot drain, API keys
with tiers, a queued client that leaves, anti-thrash switching and --pin.

Determinism on a busy machine: the model's llama-server is stopped (SIGSTOP) while the test
fills the queue, so nothing admitted can finish before every request has arrived; requests are
sent one at a time and the test waits (bounded polling of /api/status) until the node has
counted each before sending the next, so the arrival order is the sending order."""
import json
import os
import re
import signal
import socket
import threading

import pytest

from harness.node import http, model_path, wait_for

S = "stories260K"
T = "TinyStories-656K-Q8_0"
R = "llama-2-tiny-random"
ENV = {"MESH_LLM_QUEUE_WAIT_MS": "300000", "MESH_LLM_HANG_TIMEOUT_MS": "300000"}


def status(n):
    r = http(n.console_port, "GET", "/api/status", headers=getattr(n, "hdr", None), timeout=10)
    assert r.status == 200, r
    return r.json()


def adm(n, model):
    return status(n)["admission"]["models"][model]


def body(model, max_tokens=8, **kw):
    b = {"model": model, "prompt": "Once upon a time", "max_tokens": max_tokens,
         "temperature": 0}
    b.update(kw)
    return b


class Sender:
    """Requests on threads; results[i] = Response (or the exception)."""

    def __init__(self, n):
        self.n = n
        self.results = {}
        self.done_order = []
        self.lock = threading.Lock()
        self.threads = []

    def send(self, i, b, headers=None):
        def run():
            try:
                r = http(self.n.api_port, "POST", "/v1/completions", b, headers=headers,
                         timeout=300)
            except Exception as e:  # noqa: BLE001 - reported by the asserts
                r = e
            with self.lock:
                self.results[i] = r
                self.done_order.append(i)
        t = threading.Thread(target=run, daemon=True)
        t.start()
        self.threads.append(t)

    def join(self, timeout=300):
        for t in self.threads:
            t.join(timeout)
        assert all(not t.is_alive() for t in self.threads), "requests did not finish"


def llama_pid(n, model):
    c = n.child_for(model)
    assert c, f"no llama-server for {model}"
    return c[0]


def counted(n, model):
    a = adm(n, model)
    return a["in_flight"] + a["queued"] + a["rejected"]


def send_counted(n, snd, i, b, model, headers=None):
    """Send request i and wait until the node has counted it (admitted, queued or rejected)."""
    before = counted(n, model)
    snd.send(i, b, headers)
    wait_for(lambda: counted(n, model) >= before + 1, timeout=60, what=f"request {i} counted")


def started_ids(n, model):
    return [int(m.group(1)) for m in
            re.finditer(r"start (\d+) model %s key" % re.escape(model), n.stderr())]


def test_cap_queue_429_fifo(start_node):
    """Cap 2 (-np 2), queue 50: with both slots held, 100 more requests → exactly 50 queued and
    50 rejected (429, Retry-After, rate_limit_error/queue_full); once the server runs again every
    admitted request completes, started in arrival order."""
    n = start_node("--port", "0", "--model", model_path(S), "--llamacpp-args", "-np 2",
                   "--queue-len", "50", "-v", env=ENV)
    assert n.complete(S).status == 200
    pid = llama_pid(n, S)
    snd = Sender(n)
    os.kill(pid, signal.SIGSTOP)
    try:
        for g in ("g0", "g1"):
            send_counted(n, snd, g, body(S), S)
        assert adm(n, S)["in_flight"] == 2
        for i in range(100):
            send_counted(n, snd, i, body(S, max_tokens=4), S)
        a = adm(n, S)
        assert (a["in_flight"], a["queued"], a["rejected"]) == (2, 50, 50), a
        assert n.metric(f'mesh_llm_queue_depth{{model="{S}"}}') == 50
        assert n.metric(f'mesh_llm_queue_rejected_total{{model="{S}"}}') == 50
        assert n.metric('mesh_llm_key_rejected_total{key="anonymous",tier="default",'
                        'reason="queue_full"}') == 50
        wait_for(lambda: len(snd.results) == 50, timeout=60, what="the 50 rejections")
        rejected = sorted(snd.results)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert rejected == list(range(50, 100))  # the first 50 queued, the rest refused
    for i in rejected:
        r = snd.results[i]
        assert r.status == 429, r
        assert int(r.headers["retry-after"]) >= 1
        err = r.json()["error"]
        assert err["type"] == "rate_limit_error" and err["code"] == "queue_full", err
    snd.join()
    for i in ["g0", "g1"] + list(range(50)):
        assert snd.results[i].status == 200, (i, snd.results[i])
    # FIFO: the queued requests started in their arrival order (ids grow with arrival; the
    # node logs each start at debug level)
    ids = started_ids(n, S)
    assert len(ids) == 53, ids  # warm-up, 2 gates, 50 queued
    assert ids[3:] == sorted(ids[3:]) and ids[3] > max(ids[:3]), ids
    # (the clients' own completion order is not checked: their threads report it with
    # scheduling jitter; the node's start order is what FIFO means)
    a = adm(n, S)
    assert (a["in_flight"], a["queued"], a["admitted"]) == (0, 0, 53), a
    # every admitted request's wait is observed (at once: 0 s), the 50 queued ones waited
    assert n.metric(f'mesh_llm_queue_wait_seconds_count{{model="{S}"}}') == 53
    assert n.metric(f'mesh_llm_queue_wait_seconds_bucket{{model="{S}",le="0.001"}}') == 3
    assert n.metric(f'mesh_llm_queue_depth{{model="{S}"}}') == 0


def test_queued_client_leaves(start_node):
    """A queued request whose client disconnects leaves the queue at once."""
    n = start_node("--port", "0", "--model", model_path(S), "--llamacpp-args", "-np 1",
                   env=ENV)
    assert n.complete(S).status == 200
    pid = llama_pid(n, S)
    snd = Sender(n)
    socks = []
    os.kill(pid, signal.SIGSTOP)
    try:
        send_counted(n, snd, "gate", body(S), S)
        raw = json.dumps(body(S)).encode()
        for _ in range(3):
            s = socket.create_connection(("127.0.0.1", n.api_port), timeout=30)
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                      b"application/json\r\nContent-Length: %d\r\n\r\n" % len(raw) + raw)
            socks.append(s)
        wait_for(lambda: adm(n, S)["queued"] == 3, timeout=30, what="3 queued")
        socks[1].close()
        wait_for(lambda: adm(n, S)["queued"] == 2, timeout=10, what="the queue shrinks")
        assert adm(n, S)["cancelled"] == 1
    finally:
        os.kill(pid, signal.SIGCONT)
    snd.join()
    assert snd.results["gate"].status == 200
    for s in (socks[0], socks[2]):
        s.settimeout(120)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(65536)
            assert chunk, "connection closed without a response"
            data += chunk
        assert data.startswith(b"HTTP/1.1 200"), data[:200]
        s.close()
    wait_for(lambda: adm(n, S)["in_flight"] == 0, timeout=30, what="all done")
    assert adm(n, S)["admitted"] == 4  # warm-up, gate, and the two that stayed


def test_64_concurrent_outlast_a_stall(start_node):
    """64 concurrent requests at 2 slots (-np 2), with the default queue wait: the model's
    server stalls (SIGSTOP) until the oldest queued request has waited past the old 30 s
    bound; none is refused, and once it runs again all 64 complete."""
    n = start_node("--port", "0", "--model", model_path(S), "--llamacpp-args", "-np 2",
                   env={"MESH_LLM_HANG_TIMEOUT_MS": "300000"})  # no MESH_LLM_QUEUE_WAIT_MS
    assert n.complete(S).status == 200
    pid = llama_pid(n, S)
    snd = Sender(n)
    os.kill(pid, signal.SIGSTOP)
    try:
        for i in range(64):
            snd.send(i, body(S, max_tokens=16))
        wait_for(lambda: (lambda a: (a["in_flight"], a["queued"]) == (2, 62))(adm(n, S)),
                 timeout=60, what="2 in flight and 62 queued")
        # (the old 30 s bound emptied the queue with 429s: then the queue shrinks)
        wait_for(lambda: (lambda a: a.get("oldest_wait_ms", 0) > 31000 or a["queued"] < 62)(
            adm(n, S)), timeout=90, what="the queue's oldest request waiting longer than 30 s")
        a = adm(n, S)
        assert (a["queued"], a["rejected"], a["expired"]) == (62, 0, 0), a
    finally:
        os.kill(pid, signal.SIGCONT)
    snd.join()
    bad = {i: r for i, r in snd.results.items() if getattr(r, "status", None) != 200}
    assert not bad and len(snd.results) == 64, bad
    a = adm(n, S)
    assert (a["in_flight"], a["queued"], a["admitted"], a["rejected"]) == (0, 0, 65, 0), a


def queued_on_b(start_node, hold_ms, a_env=None):
    """16 requests enter node A and queue on node B, the only host (-np 1, its slot held by a
    request sent to B itself while B's llama-server is stopped), until the oldest has waited
    hold_ms; then B's server runs again. Returns A's routing counters and the answers."""
    from harness.mesh import wait_converged
    b = start_node("--port", "0", "--model", model_path(S), "--llamacpp-args", "-np 1",
                   env={"MESH_LLM_HANG_TIMEOUT_MS": "300000"})  # default queue wait
    a = start_node("--port", "0", "--join", b.token, "--max-vram", "0.0001",  # hosts nothing
                   env=a_env)
    wait_converged([a, b])
    wait_for(lambda: a.complete(S).status == 200, timeout=60, what="A routing to B")
    assert b.child_for(S) and not a.child_for(S)
    pid = llama_pid(b, S)
    gate, snd = Sender(b), Sender(a)
    os.kill(pid, signal.SIGSTOP)
    try:
        gate.send("gate", body(S))  # B's own client: no first-byte deadline; holds the slot
        wait_for(lambda: adm(b, S)["in_flight"] == 1, timeout=60, what="the gate in flight")
        for i in range(16):
            snd.send(i, body(S, prompt=f"Once upon a time {i}"))
        wait_for(lambda: adm(b, S)["queued"] == 16, timeout=60, what="16 queued on B")
        # the old code gave each up at A's first-byte deadline: then B's queue empties
        wait_for(lambda: (lambda m: m.get("oldest_wait_ms", 0) > hold_ms or m["queued"] < 16)(
            adm(b, S)), timeout=hold_ms / 1000 + 90, what="B's queue holding them")
        m = adm(b, S)
        assert (m["queued"], m["expired"], m["cancelled"]) == (16, 0, 0), m
        assert not snd.results, snd.results
    finally:
        os.kill(pid, signal.SIGCONT)
    gate.join()
    snd.join()
    assert getattr(gate.results["gate"], "status", None) == 200, gate.results
    bad = {i: r for i, r in snd.results.items() if getattr(r, "status", None) != 200}
    assert not bad and len(snd.results) == 16, bad
    return a.status()["routing"]


def test_queued_on_another_node_outlasts_the_first_byte_deadline(start_node):
    """Queued on B past A's default first-byte deadline (30 s): B tells A they are queued (the
    tunnel's queued signal), so A keeps waiting instead of giving them up with 503; once B's
    server runs again all complete."""
    assert queued_on_b(start_node, 34000)["first_byte_timeouts"] == 0


def test_queued_signal_outlasts_a_short_first_byte_deadline(start_node):
    """With A's first-byte deadline (2 s) shorter than B's signal interval (5 s), a signal still
    holds the request for 3 intervals: 12 s in B's queue, all complete."""
    r = queued_on_b(start_node, 12000, {"MESH_LLM_FIRST_BYTE_MS": "2000",
                                        "MESH_LLM_FIRST_BYTE_MS_PER_KB": "0"})
    assert r["first_byte_timeouts"] == 0


def test_queue_that_cannot_drain_is_503(start_node):
    """A request whose wait runs out (MESH_LLM_QUEUE_WAIT_MS) is not over a limit of its own:
    503 with Retry-After ("unavailable"/"queue_timeout"), not 429; the request in its slot
    still completes."""
    n = start_node("--port", "0", "--model", model_path(S), "--llamacpp-args", "-np 1",
                   env={"MESH_LLM_QUEUE_WAIT_MS": "1500", "MESH_LLM_HANG_TIMEOUT_MS": "300000"})
    assert n.complete(S).status == 200
    pid = llama_pid(n, S)
    snd = Sender(n)
    os.kill(pid, signal.SIGSTOP)
    try:
        send_counted(n, snd, "gate", body(S), S)
        send_counted(n, snd, "late", body(S), S)
        wait_for(lambda: "late" in snd.results, timeout=60, what="the queued request answered")
    finally:
        os.kill(pid, signal.SIGCONT)
    snd.join()
    r = snd.results["late"]
    assert r.status == 503, r
    assert int(r.headers["retry-after"]) >= 1
    err = r.json()["error"]
    assert err["type"] == "unavailable" and err["code"] == "queue_timeout", err
    assert snd.results["gate"].status == 200
    assert adm(n, S)["expired"] == 1


KEYS = """# tiers: name and limits
tier gold max_concurrent=0 queue_share=80
tier bronze queue_share=20
tier tiny tokens_per_minute=10
key alice gold sk-alice-0123456789
key bob bronze sk-bob-0123456789
key carol tiny sk-carol-0123456789
"""


def auth(k):
    return {"Authorization": f"Bearer sk-{k}-0123456789"}


def test_key_tiers(start_node, tmp_path):
    """Keys of two tiers get their share of a queue of 10 (gold 80 %, bronze 20 %); a key over
    its tokens per minute gets 429 + Retry-After; an unknown key is refused."""
    kf = tmp_path / "keys"
    kf.write_text(KEYS)
    os.chmod(kf, 0o600)
    n = start_node("--port", "0", "--model", model_path(S), "--llamacpp-args", "-np 1",
                   "--queue-len", "10", "--api-keys", str(kf), env=ENV)
    assert http(n.api_port, "POST", "/v1/completions", body(S)).status == 401
    assert http(n.api_port, "POST", "/v1/completions", body(S),
                headers={"Authorization": "Bearer sk-nobody-0123456789"}).status == 401
    assert http(n.api_port, "POST", "/v1/completions", body(S), headers=auth("alice")).status == 200
    n.hdr = auth("alice")
    pid = llama_pid(n, S)
    snd = Sender(n)
    os.kill(pid, signal.SIGSTOP)
    try:
        send_counted(n, snd, "gate", body(S), S, auth("alice"))
        for i in range(10):
            send_counted(n, snd, ("bob", i), body(S), S, auth("bob"))
            send_counted(n, snd, ("alice", i), body(S), S, auth("alice"))
        keys = status(n)["admission"]["keys"]
        assert (keys["bob"]["queued"], keys["bob"]["rejected"]) == (2, 8), keys["bob"]
        assert (keys["alice"]["queued"], keys["alice"]["rejected"]) == (8, 2), keys["alice"]
        assert keys["bob"]["tier"] == "bronze" and keys["alice"]["tier"] == "gold"
        wait_for(lambda: len(snd.results) == 10, timeout=60, what="the rejections")
    finally:
        os.kill(pid, signal.SIGCONT)
    snd.join()
    codes = {k: r.json()["error"]["code"] for k, r in snd.results.items() if r.status == 429}
    assert sorted(codes) == sorted([("bob", i) for i in range(2, 10)] +
                                   [("alice", 8), ("alice", 9)])
    assert {codes[("bob", i)] for i in range(2, 10)} == {"key_queue_share_exceeded"}
    # alice holds her 8 places (80 % of 10): her own share says no first
    assert {codes[("alice", 8)], codes[("alice", 9)]} == {"key_queue_share_exceeded"}
    assert all(r.status == 200 for k, r in snd.results.items() if k not in codes)
    # tokens per minute: carol's tier allows 10; a 16-token answer uses them up
    r = http(n.api_port, "POST", "/v1/completions", body(S, max_tokens=16, ignore_eos=True),
             headers=auth("carol"))
    assert r.status == 200 and r.json()["usage"]["completion_tokens"] == 16
    r = http(n.api_port, "POST", "/v1/completions", body(S), headers=auth("carol"))
    assert r.status == 429, r
    assert r.json()["error"]["code"] == "tokens_per_minute_exceeded"
    assert 1 <= int(r.headers["retry-after"]) <= 60
    # a body that names no model ("model": null, or none) is the node's one model to the API,
    # and to admission too: it was let through unadmitted, past the key's limits
    for named in ({"model": None}, {}):
        b = {k: v for k, v in body(S).items() if k != "model"}
        b.update(named)
        r = http(n.api_port, "POST", "/v1/completions", b, headers=auth("carol"))
        assert r.status == 429, (named, r)
        assert r.json()["error"]["code"] == "tokens_per_minute_exceeded"
    # the 429s by key, tier and reason in /metrics
    rej = 'mesh_llm_key_rejected_total{{key="{}",tier="{}",reason="{}"}}'
    a = auth("alice")  # /metrics asks for a key too
    assert n.metric(rej.format("bob", "bronze", "key_queue_share_exceeded"), a) == 8
    assert n.metric(rej.format("alice", "gold", "key_queue_share_exceeded"), a) == 2
    assert n.metric(rej.format("carol", "tiny", "tokens_per_minute_exceeded"), a) == 3
    n.check_metrics_with_promtool(a)
    assert "sk-" not in n.stderr()  # secrets are never logged


@pytest.mark.parametrize("role", [["--max-vram", "0.0001"], ["--client"]],
                         ids=["active", "passive"])
def test_key_limits_hold_for_routed_requests(start_node, tmp_path, role):
    """A routed request (to another node, from an active node that hosts nothing or a passive
    client) counts its tokens against the entry node's key, named model or none (a body that
    names none goes to the mesh's one model)."""
    kf = tmp_path / "keys"
    kf.write_text(KEYS)
    os.chmod(kf, 0o600)
    host = start_node("--port", "0", "--model", model_path(S))
    entry = start_node("--port", "0", "--join", host.token, *role, "--api-keys", str(kf))
    wait_for(lambda: http(entry.api_port, "POST", "/v1/completions", body(S),
                          headers=auth("alice")).status == 200,
             timeout=60, what="the entry node routing to the host")
    assert host.child_for(S) and not entry.child_for(S)
    # carol's tier allows 10 tokens a minute; a 16-token answer uses them up
    r = http(entry.api_port, "POST", "/v1/completions",
             body(S, max_tokens=16, ignore_eos=True), headers=auth("carol"))
    assert r.status == 200 and r.json()["usage"]["completion_tokens"] == 16, r
    for named in ({"model": S}, {"model": None}, {}):
        b = {k: v for k, v in body(S).items() if k != "model"}
        b.update(named)
        r = http(entry.api_port, "POST", "/v1/completions", b, headers=auth("carol"))
        assert r.status == 429, (named, r)
        assert r.json()["error"]["code"] == "tokens_per_minute_exceeded"


def test_keys_file_checks(start_node, tmp_path):
    kf = tmp_path / "keys"
    kf.write_text(KEYS)
    os.chmod(kf, 0o644)
    n = start_node("--port", "0", "--model", model_path(S), "--api-keys", str(kf),
                   wait_ready=False)
    assert n.proc.wait(timeout=30) != 0
    assert "chmod 600" in n.stderr()
    os.chmod(kf, 0o600)
    kf.write_text("key x nosuchtier sk-0123456789\n")
    n = start_node("--port", "0", "--model", model_path(S), "--api-keys", str(kf),
                   wait_ready=False)
    assert n.proc.wait(timeout=30) != 0
    assert "unknown tier 'nosuchtier'" in n.stderr()


@pytest.fixture
def models_dir(tmp_path):
    d = tmp_path / "models"
    d.mkdir()
    for m in (S, T, R):
        os.symlink(model_path(m), d / f"{m}.gguf")
    return d


def test_interleaved_two_switches(start_node, models_dir):
    """One llm slot, one request in flight per model: A (in flight, held) then B C A B C A
    queued → each model loads once: 2 switches (without anti-thrash: 5+)."""
    n = start_node("--port", "0", "--models-dir", str(models_dir), "--max-loaded-models", "1",
                   "--llamacpp-args", "-np 1", env=dict(ENV, MESH_LLM_SWITCH_FAIR_MS="300000"))
    assert n.complete(S).status == 200
    assert status(n)["admission"]["model_switches"] == 0
    pid = llama_pid(n, S)
    snd = Sender(n)
    os.kill(pid, signal.SIGSTOP)
    try:
        send_counted(n, snd, "gate", body(S), S)
        for i, m in enumerate([T, R, S, T, R, S]):
            send_counted(n, snd, i, body(m), m)
    finally:
        os.kill(pid, signal.SIGCONT)
    snd.join()
    assert all(r.status == 200 for r in snd.results.values()), snd.results
    assert status(n)["admission"]["model_switches"] == 2


def test_pin(start_node, models_dir):
    """--pin keeps a model loaded: with 2 slots and S pinned, T and R take turns in the other;
    pinning more models than slots is refused."""
    n = start_node("--port", "0", "--models-dir", str(models_dir), "--max-loaded-models", "2",
                   "--pin", S)
    wait_for(lambda: n.child_for(S) is not None, timeout=60, what="the pinned model loads")
    for m in (T, R, T, R):
        assert n.complete(m).status == 200
    assert n.child_for(S) is not None  # the least recently used, yet still loaded
    assert n.complete(S).status == 200
    bad = start_node("--port", "0", "--models-dir", str(models_dir), "--max-loaded-models", "1",
                     "--pin", S, "--pin", T, wait_ready=False)
    assert bad.proc.wait(timeout=30) != 0
    assert "pinned" in bad.stderr()

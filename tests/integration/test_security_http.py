"""The HTTP front door: what mesh members, web pages and network clients can and cannot do.

Real mesh-llm processes, real llama-server children; the hostile member is tests/tools/
mesh-test-peer (an admitted peer made from the project's modules)."""
import base64
import json
import os
import socket
import subprocess
import time

import pytest

from harness.node import MESH_BIN, Node, cmdline, http, model_path, read_response, sh, wait_for

S = "stories260K"
T = "TinyStories-656K-Q8_0"
TEST_PEER = os.path.join(os.path.dirname(MESH_BIN), "mesh-test-peer")
EVIL = "http://evil.example"


def raw(port, data, timeout=30, host="127.0.0.1"):
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(data)
        return read_response(s, timeout)


def post_raw(port, path, body, headers, timeout=60):
    """POST with exactly the given headers (no Content-Type unless given)."""
    h = {"Host": f"127.0.0.1:{port}", "Connection": "close", "Content-Length": str(len(body))}
    h.update(headers)
    req = f"POST {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n"
    return raw(port, req.encode() + body, timeout)


def error_of(r, status, code=None):
    assert r.status == status, r
    e = r.json()["error"]
    assert e["message"] and e["type"], r
    if code:
        assert e["code"] == code, r
    return e


def loaded(n):
    return {m["name"] for m in n.status()["models"] if m["status"] == "ready"}


@pytest.fixture
def models_dir(tmp_path):
    d = tmp_path / "models"
    d.mkdir()
    os.symlink(model_path(T), d / f"{T}.gguf")
    return d


# ---------------------------------------------------------------------------------------------
# 1. A mesh member's tunnel reaches the inference API only, on every pipelined request
# ---------------------------------------------------------------------------------------------

def test_tunnel_pipelined_admin_request_refused(start_node, models_dir, tmp_path):
    a = start_node("--port", "0", "--model", model_path(S), "--models-dir", str(models_dir))
    pid_before = a.child_for(S)[0]
    assert loaded(a) == {S}
    load = json.dumps({"model_name": T}).encode()
    req = (b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
           b"POST /api/v1/load HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(load) + load)
    f = tmp_path / "req.http"
    f.write_bytes(req)
    r = subprocess.run([TEST_PEER, a.token, "tunnel", S, str(f)], capture_output=True,
                       timeout=90)
    assert r.returncode == 0, r.stderr.decode()
    out = r.stdout
    assert out.startswith(b"HTTP/1.1 200 OK\r\n"), out[:300]
    assert b'"object":"list"' in out  # /v1/models answered
    second = out[out.index(b"HTTP/1.1 ", 10):]
    assert second.startswith(b"HTTP/1.1 403 Forbidden\r\n"), second[:300]
    body = json.loads(second.split(b"\r\n\r\n", 1)[1])
    assert "/api/v1/load" in body["error"]["message"]
    # nothing was loaded or unloaded
    assert loaded(a) == {S}
    assert a.child_for(T) is None
    assert a.child_for(S)[0] == pid_before
    assert "refused a tunnelled POST /api/v1/load" in a.stderr()
    # inference through the tunnel still works, pipelined too, with no API key
    body = json.dumps({"model": S, "prompt": "Once", "max_tokens": 4}).encode()
    f.write_bytes(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
                  b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
    r = subprocess.run([TEST_PEER, a.token, "tunnel", S, str(f)], capture_output=True,
                       timeout=90)
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.count(b"HTTP/1.1 200 OK\r\n") == 2, r.stdout[:600]
    assert b'"text_completion"' in r.stdout


# ---------------------------------------------------------------------------------------------
# 2. Web pages: cross-site requests, content types, CORS, on both ports
# ---------------------------------------------------------------------------------------------

def test_allow_origin_warns_that_the_origin_gets_the_mesh_secret():
    """Issue 33 item 13: an allowed origin can read the invite token (the mesh secret), call
    /api/join and unload; the flag's help and the security model must say so."""
    out = subprocess.run([MESH_BIN, "--help"], capture_output=True, text=True, timeout=20).stdout
    para = out[out.index("--allow-origin"):]
    para = " ".join(para[:para.index("\n  --", 1)].split())  # the help wraps its lines
    assert "invite token" in para and "mesh" in para and "secret" in para, para
    root = os.path.join(os.path.dirname(__file__), "..", "..")
    with open(os.path.join(root, "docs", "operations.md")) as f:
        sec = f.read()
    sec = sec[sec.index("`--allow-origin ORIGIN` lets one origin in"):][:1200]
    for what in ("invite token", "mesh secret", "/api/join", "unload"):
        assert what in sec, what


def test_cross_site_and_content_type_on_api_port(start_node, models_dir):
    n = start_node("--port", "0", "--model", model_path(S), "--models-dir", str(models_dir))
    p = n.api_port
    load = json.dumps({"model_name": T}).encode()
    # the issue: a form-like text/plain POST from another site
    e = error_of(post_raw(p, "/api/v1/load", load, {"Content-Type": "text/plain", "Origin": EVIL}),
                 403, "cross_site_request")
    assert EVIL in e["message"] and "--allow-origin" in e["message"]
    error_of(post_raw(p, "/api/v1/load", load,
                      {"Content-Type": "application/json", "Origin": EVIL}), 403)
    error_of(post_raw(p, "/api/v1/unload", b"{}",
                      {"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site"}), 403)
    # no origin, wrong type: 415
    error_of(post_raw(p, "/api/v1/load", load, {"Content-Type": "text/plain"}), 415,
             "unsupported_media_type")
    error_of(post_raw(p, "/api/v1/unload", b"", {}), 415)
    comp = json.dumps({"model": S, "prompt": "Once", "max_tokens": 2}).encode()
    error_of(post_raw(p, "/v1/completions", comp,
                      {"Content-Type": "application/x-www-form-urlencoded"}), 415)
    error_of(post_raw(p, "/v1/completions", comp,
                      {"Content-Type": "application/json", "Origin": EVIL}), 403)
    # none of it changed anything
    assert loaded(n) == {S}
    assert n.child_for(T) is None
    # same origin (this server, by a loopback name) is fine
    r = post_raw(p, "/v1/completions", comp,
                 {"Content-Type": "application/json; charset=utf-8",
                  "Origin": f"http://127.0.0.1:{p}"})
    assert r.status == 200, r
    # reading from another site is not refused, but gets no CORS header (llama-server's own
    # reflected Access-Control-Allow-Origin is dropped too)
    r = http(p, "GET", "/v1/models", headers={"Origin": EVIL})
    assert r.status == 200 and "access-control-allow-origin" not in r.headers
    r = http(p, "POST", "/v1/completions", {"model": S, "prompt": "Once", "max_tokens": 2},
             headers={"Origin": f"http://localhost:{p}"})
    assert r.status == 200 and "access-control-allow-origin" not in r.headers
    # preflight from another site
    r = raw(p, b"OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: x\r\nOrigin: " + EVIL.encode() +
            b"\r\nAccess-Control-Request-Method: POST\r\nConnection: close\r\n\r\n")
    error_of(r, 403)
    assert "access-control-allow-origin" not in r.headers


def test_allowed_origin_gets_cors(start_node):
    app = "http://localhost:5173"
    n = start_node("--port", "0", "--model", model_path(S), "--allow-origin", app,
                   "--allow-origin", "https://app.example.com")
    for port in (n.api_port, n.console_port):
        r = raw(port, b"OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: x\r\nOrigin: " +
                app.encode() + b"\r\nAccess-Control-Request-Method: POST\r\n"
                b"Access-Control-Request-Headers: content-type, authorization\r\n"
                b"Connection: close\r\n\r\n")
        assert r.status == 204, r
        assert r.headers["access-control-allow-origin"] == app
        assert "POST" in r.headers["access-control-allow-methods"]
        assert r.headers["access-control-allow-headers"] == "content-type, authorization"
    # the request itself, proxied to llama-server: exactly our CORS header
    body = json.dumps({"model": S, "prompt": "Once", "max_tokens": 3}).encode()
    req = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nOrigin: " + app.encode() +
           b"\r\nSec-Fetch-Site: cross-site\r\nContent-Type: application/json\r\n"
           b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
    with socket.create_connection(("127.0.0.1", n.api_port), timeout=60) as s:
        s.sendall(req)
        data = b""
        while True:
            c = s.recv(65536)
            if not c:
                break
            data += c
    head = data.split(b"\r\n\r\n", 1)[0].decode().lower()
    assert head.startswith("http/1.1 200"), head
    assert head.count("access-control-allow-origin:") == 1, head
    assert f"access-control-allow-origin: {app}" in head
    r = http(n.console_port, "GET", "/api/status", headers={"Origin": app})
    assert r.status == 200 and r.headers["access-control-allow-origin"] == app
    # still JSON only
    error_of(post_raw(n.api_port, "/v1/completions", body,
                      {"Content-Type": "text/plain", "Origin": app}), 415)


def test_cross_site_on_console_port(start_node):
    n = start_node("--port", "0", "--own-mesh")
    p = n.console_port
    error_of(post_raw(p, "/api/status", b"{}", {"Content-Type": "text/plain", "Origin": EVIL}),
             403, "cross_site_request")
    error_of(post_raw(p, "/api/status", b"{}", {"Content-Type": "text/plain"}), 415)
    r = raw(p, b"OPTIONS /api/status HTTP/1.1\r\nHost: x\r\nOrigin: " + EVIL.encode() +
            b"\r\nAccess-Control-Request-Method: POST\r\nConnection: close\r\n\r\n")
    error_of(r, 403)
    r = http(p, "GET", "/api/status", headers={"Origin": EVIL})
    assert r.status == 200 and "access-control-allow-origin" not in r.headers
    # a JSON POST from no web page reaches the handler (which only serves GET)
    assert post_raw(p, "/api/status", b"{}", {"Content-Type": "application/json"}).status == 405


def test_allow_origin_validated(tmp_path):
    for bad in ("evil.example", "http://a/b", "ftp://x"):
        r = subprocess.run([MESH_BIN, "--allow-origin", bad], capture_output=True, timeout=10)
        assert r.returncode == 2 and b"--allow-origin needs an origin" in r.stderr, r


# ---------------------------------------------------------------------------------------------
# 3. --listen-all: a loud warning; the invite token only for loopback clients
# ---------------------------------------------------------------------------------------------

FETCH = """
import json, sys, urllib.request
req = urllib.request.Request(sys.argv[1], headers=json.loads(sys.argv[2]))
try:
    with urllib.request.urlopen(req, timeout=20) as r:
        print(r.status); print(r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code); print(e.read().decode())
"""


def fetch_from(ns, url, headers=None):
    r = sh("ip", "netns", "exec", ns, "python3", "-c", FETCH, url, json.dumps(headers or {}))
    status, body = r.stdout.decode().split("\n", 1)
    return int(status), body


def test_listen_all_warns_and_hides_the_token_from_the_network(start_node, netns):
    ns, addr = netns
    n = start_node("--port", "0", "--own-mesh", "--listen-all")
    err = n.stderr()
    assert "--listen-all without an API key" in err and "NETWORK" in err
    local = n.status()["node"]
    assert local["token"] == n.token  # loopback client: shown
    status, body = fetch_from(ns, f"http://{addr}:{n.console_port}/api/status")
    assert status == 200, body
    st = json.loads(body)
    assert st["node"]["id"] == n.id
    assert st["node"]["token"] is None
    t = n.token
    secret = json.loads(base64.urlsafe_b64decode(t + "=" * (-len(t) % 4)))["secret"]
    assert secret not in body and n.token not in body
    # a loopback client naming us by another name (DNS rebinding) gets no token either
    r = http(n.console_port, "GET", "/api/status", headers={"Host": f"evil.example:{n.console_port}"})
    assert r.status == 200 and r.json()["node"]["token"] is None
    # the API answers the network too (that is what --listen-all is for), guarded the same way
    status, _ = fetch_from(ns, f"http://{addr}:{n.api_port}/health")
    assert status == 200


def test_no_warning_with_api_key_from_env(start_node, tmp_path):
    n = start_node("--port", "0", "--own-mesh", "--listen-all",
                   env={"MESH_LLM_API_KEY": "k3y-from-env"})
    assert "--listen-all without an API key" not in n.stderr()
    assert "k3y-from-env" not in " ".join(cmdline(n.pid))
    assert n.request("GET", "/v1/models").status == 401
    r = n.request("GET", "/v1/models", headers={"Authorization": "Bearer k3y-from-env"})
    assert r.status == 200


# ---------------------------------------------------------------------------------------------
# 4. Secrets out of argv: --join @FILE, --api-key-file
# ---------------------------------------------------------------------------------------------

def test_join_and_api_key_from_files(start_node, tmp_path):
    a = start_node("--port", "0", "--own-mesh")
    tok = tmp_path / "token"
    tok.write_text(a.token + "\n")
    key = tmp_path / "key"
    key.write_text("file-key\n")
    b = start_node("--port", "0", "--client", "--join", f"@{tok}", "--api-key-file", str(key))
    argv = " ".join(cmdline(b.pid))
    assert a.token not in argv and "file-key" not in argv
    auth = {"Authorization": "Bearer file-key"}
    # b is a passive client: it joins a's mesh by checking in with a (no gossip)
    wait_for(lambda: (http(b.console_port, "GET", "/api/status", headers=auth).json()
                      .get("route", {}).get("checkin")) == a.id,
             timeout=30, what="b to join a's mesh")
    assert b.request("GET", "/v1/models").status == 401
    r = b.request("GET", "/v1/models", headers={"Authorization": "Bearer file-key"})
    assert r.status == 200
    # a --client node is not told to add --model
    err = b.stderr()
    assert "add --model" not in err and "client node" in err
    assert "command line" not in err  # no argv-secret warning: nothing secret was in argv


# ---------------------------------------------------------------------------------------------
# 5. Memory bounds and header limits
# ---------------------------------------------------------------------------------------------

def test_big_header_answered_by_the_node(start_node):
    n = start_node("--port", "0", "--model", model_path(S))
    body = json.dumps({"model": S, "prompt": "Once", "max_tokens": 2})
    for size in (9000, 20000, 60000):
        r = n.request("POST", "/v1/completions", body, headers={"Cookie": "c" * size})
        e = error_of(r, 431, "header_too_large")
        assert "Cookie" in e["message"] and "8192" in e["message"]
    # llama-server's URI limit (32 KiB)
    r = n.request("POST", "/v1/completions?" + "q" * 33000, body)
    error_of(r, 414, "uri_too_long")
    # Connection: close is honoured on the error; keep-alive keeps the connection usable
    with socket.create_connection(("127.0.0.1", n.api_port), timeout=30) as s:
        b = body.encode()
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Big: " + b"x" * 10000 +
                  b"\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(b) +
                  b + b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = b""
        while True:
            c = s.recv(65536)
            if not c:
                break
            data += c
    assert data.startswith(b"HTTP/1.1 431 "), data[:200]
    assert b"Connection: keep-alive" in data.split(b"\r\n\r\n", 1)[0]
    assert b"HTTP/1.1 200 OK" in data  # the next request on the connection was served
    assert n.complete(S).status == 200


def test_global_buffer_cap(start_node):
    n = start_node("--port", "0", "--model", model_path(S),
                   env={"MESH_LLM_HTTP_MAX_BUFFERED": str(3 << 20)})
    p = n.api_port
    big = 2 << 20
    a = socket.create_connection(("127.0.0.1", p), timeout=30)
    a.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % big + b" " * (big - 4096))
    # wait (bounded) until the node holds a's bytes
    wait_for(lambda: n.status()["http"]["buffered_bytes"] >= big - 4096, timeout=30,
             what="a's body buffered")
    r = raw(p, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Content-Length: %d\r\n\r\n" % big + b" " * big)
    e = error_of(r, 503, "server_busy")
    assert "retry" in e["message"]
    a.close()
    # the node keeps serving
    wait_for(lambda: n.complete(S).status == 200, timeout=30, what="the node to serve again")
    assert "requests buffered" in n.stderr()


# ---------------------------------------------------------------------------------------------
# 6. Clients that never read their stream do not hold the model
# ---------------------------------------------------------------------------------------------

TCP_CLOSE = 7


def tcp_state(s):
    return s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)[0]


def slot_busy(port):
    return any(s["is_processing"] for s in http(port, "GET", "/slots").json())


def test_stalled_stream_clients_cut_off(start_node):
    n = start_node("--port", "0", "--model", model_path(S),
                   env={"MESH_LLM_HTTP_WRITE_MS": "1500"})
    _, lport, _ = n.child_for(S)
    body = json.dumps({"model": S, "prompt": "Once upon a time", "max_tokens": 2000,
                       "ignore_eos": True, "stream": True}).encode()
    stalled = []
    for _ in range(6):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # never read: fills at once
        s.settimeout(30)
        s.connect(("127.0.0.1", n.api_port))
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body) + body)
        stalled.append(s)
    try:
        # the node cuts them off (RST: the unread response is dropped)...
        wait_for(lambda: all(tcp_state(s) == TCP_CLOSE for s in stalled), timeout=90,
                 what="the stalled clients to be cut off")
        # ...llama-server stops generating for them, and others are served
        wait_for(lambda: not slot_busy(lport), timeout=30, what="llama-server's slots to free")
        t0 = time.monotonic()
        r = n.complete(S, max_tokens=16)
        assert r.status == 200, r
        print(f"normal request after the cut: {time.monotonic() - t0:.2f}s")
        assert "has taken none of its response" in n.stderr()
    finally:
        for s in stalled:
            s.close()


# ---------------------------------------------------------------------------------------------
# 7. Messages: ctx_size, the fd limit
# ---------------------------------------------------------------------------------------------

def test_ctx_size_rule(start_node, tmp_path):
    d = tmp_path / "sdir"
    d.mkdir()
    os.symlink(model_path(S), d / f"{S}.gguf")
    n = start_node("--port", "0", "--models-dir", str(d))
    for bad in (-1, 0, 1 << 25):
        r = n.request("POST", "/api/v1/load", {"model_name": S, "ctx_size": bad})
        e = error_of(r, 400, "invalid_ctx_size")
        assert "from 1 to 16777216" in e["message"] and str(bad) in e["message"]
    assert n.child_for(S) is None
    r = n.request("POST", "/api/v1/load", {"model_name": S, "ctx_size": 512})
    assert r.status == 200, r
    argv = n.child_for(S)[2]
    # ctx_size is each slot's context: llama-server gets slots x 512 tokens
    slots = int(argv[argv.index("-np") + 1])
    assert argv[argv.index("--ctx-size") + 1] == str(512 * slots)
    m = next(x for x in n.request("GET", "/api/v1/models").json()["data"] if x["model_name"] == S)
    assert m["ctx_per_slot"] == 512 and m["slots"] == slots


def test_fd_limit_logged_once(start_node):
    limit = 64
    n = start_node("--port", "0", "--own-mesh", prefix=["prlimit", f"--nofile={limit}:{limit}"])
    socks = []
    try:
        refused = None
        for _ in range(limit + 20):
            s = socket.create_connection(("127.0.0.1", n.api_port), timeout=10)
            socks.append(s)
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            r = read_response(s, 10)
            if r.status == 503:
                refused = r
                break
            assert r.status == 200, r
        assert refused is not None, "the fd limit was never reached"
        error_of(refused, 503, "too_many_open_files")
        wait_for(lambda: "cannot accept connections" in n.stderr(), timeout=10,
                 what="the EMFILE log line")
        # more refusals within the minute: still one line
        for _ in range(5):
            with socket.create_connection(("127.0.0.1", n.api_port), timeout=10) as s:
                s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
                assert read_response(s, 10).status == 503
        line = [l for l in n.stderr().splitlines() if "cannot accept connections" in l]
        assert len(line) == 1, line
        assert f"limit {limit} open files" in line[0] and "Too many open files" in line[0]
    finally:
        for s in socks:
            s.close()
    # the node serves again once descriptors are free
    wait_for(lambda: http(n.api_port, "GET", "/health").status == 200, timeout=30,
             what="the node to serve again")

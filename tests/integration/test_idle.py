"""Idle mode and joining at runtime: a node started with no mesh arguments runs its management API
only, answers 503 on /v1 until POST /api/join (or `mesh-llm join`) puts it in a mesh through the
same connect → assign → serve flow as --join; POST /api/chat, GET /api/discover, `mesh-llm status`."""
import base64
import json
import os
import socket
import subprocess

from harness.idle import start_idle
from harness.mesh import ENV
from harness.node import BIN_DIR, MESH_BIN, http, model_path, sse_events, wait_for
from harness.split import SMALL, SMALL_CTX, SMALL_SIZE, env_for, gb, plan_of


def join(n, token, headers=None):
    return http(n.console_port, "POST", "/api/join", {"token": token}, headers=headers)


def make_token(**fields):
    raw = json.dumps(fields).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def token_fields(token):
    return json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))


def cli(*args, timeout=90):
    return subprocess.run([MESH_BIN, *args], capture_output=True, text=True, timeout=timeout)


def test_idle_node_answers_503_until_joined(start_node):
    n = start_idle(start_node)
    want = f"not in a mesh yet: join one at http://127.0.0.1:{n.console_port}"
    for path in ("/v1/chat/completions", "/v1/completions", "/v1/embeddings"):
        r = n.request("POST", path, {"model": SMALL, "prompt": "x",
                                     "messages": [{"role": "user", "content": "x"}]})
        assert r.status == 503, (path, r)
        assert r.json()["error"] == {"message": want, "type": "unavailable",
                                     "code": "not_in_mesh"}, r
    r = n.request("GET", "/v1/models")
    assert r.status == 200 and r.json() == {"object": "list", "data": []}, r
    # the console's chat goes the same way
    r = http(n.console_port, "POST", "/api/chat",
             {"model": SMALL, "messages": [{"role": "user", "content": "x"}]})
    assert r.status == 503 and r.json()["error"]["message"] == want, r
    st = n.status()
    assert st["node"]["state"] == "idle" and st["node"]["id"] == n.id, st
    assert st["node"]["mesh_id"] is None and st["node"]["token"] is None, st
    assert st["peers"] == [] and st["catalog"] == [] and st["plan"] == [], st
    r = http(n.console_port, "GET", "/api/discover")
    assert r.status == 200, r
    assert r.json() == {"meshes": [], "searching": False,
                        "reason": "no Nostr relays configured: start the node with "
                                  "--nostr-relay URL"}, r.json()
    err = n.stderr()
    assert "idle: not in a mesh yet" in err and "mesh-llm join TOKEN" in err, err
    assert n.llama_children() == {}
    assert n.stop() == 0  # SIGTERM while idle: a clean exit


def test_headless_idle_refused():
    args = ["--headless", "--port", "0"] + (["--bin-dir", BIN_DIR] if BIN_DIR else [])
    r = cli(*args, timeout=20)
    assert r.returncode == 2, r
    assert "--headless" in r.stderr and "idle" in r.stderr and "/api/join" in r.stderr, r.stderr


def test_join_refuses_bad_input_and_stays_idle(start_node):
    n = start_idle(start_node)
    own = n.id
    good = dict(v=1, id="ab" * 32, addrs=["127.0.0.1:9"], mesh="cd" * 16, secret="ef" * 32)

    def refused(status, code, needle, body=None, raw=None, headers=None):
        r = http(n.console_port, "POST", "/api/join", body, raw_body=raw, headers=headers)
        assert r.status == status, r
        e = r.json()["error"]
        assert e["code"] == code and needle in e["message"], e

    refused(400, "invalid_body", "not valid JSON", raw=b'{"token": ')
    refused(400, "token_required", "'token' is required", body={"tok": "x"})
    refused(400, "token_required", "'token' is required", body=["x"])
    refused(400, "token_required", "'token' is required", body={"token": 7})
    refused(400, "invalid_token", "invalid invite token", body={"token": "%%%not-base64%%%"})
    bad_secret = dict(good, secret="12")
    refused(400, "invalid_token", "secret", body={"token": make_token(**bad_secret)})
    no_id = {k: v for k, v in good.items() if k != "id"}
    refused(400, "invalid_token", "id", body={"token": make_token(**no_id)})
    refused(400, "invalid_token", "own invite token",
            body={"token": make_token(**dict(good, id=own))})
    refused(413, "body_too_large", "at most 16384", body={"token": "x" * 20000})
    r = http(n.console_port, "POST", "/api/join", raw_body=b"{" + b" " * (2 << 20) + b"}")
    assert r.status == 413, r
    r = http(n.console_port, "GET", "/api/join")
    assert r.status == 405, r
    # a page that rebinds its DNS name to 127.0.0.1 cannot move the node
    refused(403, "forbidden", "only a client on this machine",
            body={"token": make_token(**good)},
            headers={"Host": f"evil.example:{n.console_port}"})
    st = n.status()["node"]
    assert st["state"] == "idle", st
    assert n.request("POST", "/v1/completions", {"model": SMALL}).status == 503


def test_join_through_the_api_gets_a_model_and_serves(start_node, tmp_path):
    """A holds SMALL but offers too little memory to run it alone; B starts idle and joins via
    POST /api/join: the mesh gives B its part (allocation: split worker), and B's inference port
    answers a completion served by the split's host."""
    # neither fits alone, together they do; A offers more, so A (which has the file) is the
    # split's host whatever the node ids (equal offers are decided by id)
    a = start_node("--port", "0", "--model", model_path(SMALL), *SMALL_CTX,
                   "--max-vram", gb(0.65 * SMALL_SIZE), env=env_for(tmp_path, "a"))
    b = start_idle(start_node, "--max-vram", gb(0.55 * SMALL_SIZE), *SMALL_CTX,
                   env=env_for(tmp_path, "b"))
    r = join(b, a.token)
    assert r.status == 202, r
    body = r.json()
    assert body["status"] == "joining" and body["mesh_id"] == token_fields(a.token)["mesh"], body
    assert body["via"] == a.id, body
    b.wait_ready(timeout=30)  # the ready line, now with B's own invite token
    assert token_fields(b.token)["mesh"] == token_fields(a.token)["mesh"]
    wait_for(lambda: b.status()["node"]["state"] == "member", timeout=20, what="B a member")
    wait_for(lambda: (plan_of(b, SMALL) or {}).get("role") == "worker", timeout=60,
             what="B given its part of SMALL")
    asg = b.status()["node"]["assignment"]
    assert asg["model"] == SMALL, asg
    wait_for(lambda: b.request("GET", "/v1/models").json()["data"] and
             {m["id"]: m["status"] for m in b.request("GET", "/v1/models").json()["data"]}
             .get(SMALL) == "ready", timeout=90, what="the split ready")
    r = b.complete(SMALL)
    assert r.status == 200, r
    assert r.json()["choices"][0]["text"], r
    assert r.headers["x-mesh-node"] == a.id, r.headers  # the split's host served it
    # POST /api/chat on the console port: the same, streamed, proxied through the mesh
    r = http(b.console_port, "POST", "/api/chat",
             {"model": SMALL, "stream": True, "max_tokens": 4,
              "messages": [{"role": "user", "content": "Once"}]})
    assert r.status == 200, r
    assert r.headers["content-type"].startswith("text/event-stream"), r.headers
    assert r.headers["x-mesh-node"] == a.id, r.headers
    events = sse_events(r.body)
    assert events[-1] == "[DONE]" and len(events) >= 2, events
    # again with the same mesh: nothing to do
    r = join(b, a.token)
    assert r.status == 200 and r.json()["status"] == "already_in_mesh", r


def test_a_join_that_reaches_no_one_ends_in_an_error_and_a_new_token_replaces_it(start_node):
    """Issue 33 item 3: a token whose address was edited to an unreachable one left the node
    `joining` for ever, and the correct token then got 200 already_in_mesh: only a restart
    recovered. Now the attempt ends with an error in /api/status and the log, and a new token
    (the same mesh, or another) replaces the failing one."""
    a = start_node("--port", "0", "--own-mesh", env=ENV)
    b = start_idle(start_node)
    f = token_fields(a.token)
    dead = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # a bound port nobody answers on
    dead.bind(("127.0.0.1", 0))
    try:
        bad = make_token(**dict(f, addrs=[f"127.0.0.1:{dead.getsockname()[1]}"]))
        r = join(b, bad)
        assert r.status == 202, r
        wait_for(lambda: b.status()["node"].get("join_error"), timeout=30,
                 what="the failed join attempt reported")
        st = b.status()["node"]
        assert st["state"] == "joining" and a.id[:12] in st["join_error"], st
        assert "/api/join" in st["join_error"], st
        wait_for(lambda: "POST /api/join with another token" in b.stderr(), timeout=10,
                 what="the log says it")
        r = join(b, a.token)  # the correct token: replaces the failing one
        assert r.status == 202 and r.json()["status"] == "joining", r
        wait_for(lambda: b.status()["node"]["state"] == "member", timeout=30,
                 what="B a member through the new token")
        assert b.status()["node"]["join_error"] == ""
        assert b.status()["node"]["mesh_id"] == f["mesh"]
    finally:
        dead.close()


def test_token_with_a_forged_mesh_id_is_refused(start_node):
    """Issue 33 item 8: a token with the mesh's valid secret but an altered mesh id was
    admitted, and the joiner reported, saved in last-mesh and handed out the wrong id. Now the
    admitted node's own mesh id (sent with its admission proof) is checked: the join is refused
    with a clear error, and the genuine token then works."""
    a = start_node("--port", "0", "--own-mesh", env=ENV)
    b = start_idle(start_node)
    f = token_fields(a.token)
    forged_id = "f" * len(f["mesh"])
    assert forged_id != f["mesh"]
    r = join(b, make_token(**dict(f, mesh=forged_id)))
    assert r.status == 202, r
    wait_for(lambda: "altered" in b.status()["node"].get("join_error", ""), timeout=30,
             what="the forged mesh id refused")
    st = b.status()["node"]
    assert st["state"] == "joining" and f["mesh"] in st["join_error"], st
    assert forged_id in st["join_error"], st
    assert "join refused" in b.stderr() and "altered" in b.stderr()
    assert b.id not in a.peer_states()  # no gossip under the wrong id
    last = os.path.join(b.env["MESH_LLM_HOME"], "last-mesh")
    assert not os.path.exists(last) or forged_id not in open(last).read()
    r = join(b, a.token)  # the genuine token replaces it
    assert r.status == 202, r
    wait_for(lambda: b.status()["node"]["state"] == "member", timeout=30, what="B a member")
    assert b.status()["node"]["mesh_id"] == f["mesh"]
    assert token_fields(b.status()["node"]["token"])["mesh"] == f["mesh"]
    wait_for(lambda: os.path.exists(last) and open(last).read().strip() == f["mesh"],
             timeout=10, what="last-mesh: the genuine id")


def test_join_other_mesh_is_a_conflict(start_node):
    a = start_node("--port", "0", "--own-mesh", env=ENV)
    c = start_node("--port", "0", "--own-mesh", env=ENV)
    b = start_idle(start_node)
    assert join(b, a.token).status == 202
    wait_for(lambda: b.status()["node"]["state"] == "member", timeout=20, what="B a member")
    r = join(b, c.token)
    assert r.status == 409, r
    e = r.json()["error"]
    assert e["code"] == "already_in_mesh", e
    assert token_fields(a.token)["mesh"] in e["message"] and "restart" in e["message"], e
    assert b.status()["node"]["mesh_id"] == token_fields(a.token)["mesh"]


def test_join_needs_the_api_key_when_the_node_has_one(start_node):
    """With an API key, /api/join needs it (like every /api/ path); the key opens the join."""
    a = start_node("--port", "0", "--own-mesh", env=ENV)
    b = start_idle(start_node, env=dict(ENV, MESH_LLM_API_KEY="s3cret"))
    r = join(b, a.token)
    assert r.status == 401, r
    r = join(b, a.token, headers={"Authorization": "Bearer s3cret"})
    assert r.status == 202, r


POST = """
import json, sys, urllib.request
req = urllib.request.Request(sys.argv[1], data=sys.argv[2].encode(), method="POST",
                             headers={"Content-Type": "application/json"})
try:
    with urllib.request.urlopen(req, timeout=20) as r:
        print(r.status); print(r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code); print(e.read().decode())
"""


def test_join_from_another_host_refused_without_api_key(start_node, netns):
    """--listen-all without an API key: a stranger on the network cannot move this node into
    their mesh (403); the same request from this machine joins."""
    ns, addr = netns
    a = start_node("--port", "0", "--own-mesh", env=ENV)
    b = start_idle(start_node, "--listen-all")
    r = subprocess.run(["ip", "netns", "exec", ns, "python3", "-c", POST,
                        f"http://{addr}:{b.console_port}/api/join",
                        json.dumps({"token": a.token})], capture_output=True, timeout=30)
    status, body = r.stdout.decode().split("\n", 1)
    assert int(status) == 403, body
    assert "only a client on this machine" in json.loads(body)["error"]["message"], body
    assert b.status()["node"]["state"] == "idle"
    assert join(b, a.token).status == 202


def test_cli_status_and_join(start_node):
    console = ["--console"]
    r = cli("status", "--console", "1", timeout=20)
    assert r.returncode == 1 and "no mesh-llm node is running" in r.stderr, r
    a = start_node("--port", "0", "--model", model_path(SMALL), env=ENV)
    b = start_idle(start_node)
    r = cli("status", *console, str(b.console_port), timeout=20)
    assert r.returncode == 0, r
    assert f"node {b.id}  idle" in r.stdout and "mesh-llm join TOKEN" in r.stdout, r.stdout
    r = cli("join", "not-a-token", *console, str(b.console_port), timeout=20)
    assert r.returncode == 1 and "invalid invite token" in r.stderr, r
    r = cli("join", a.token, *console, str(b.console_port), "--timeout", "60")
    assert r.returncode == 0, r
    mesh = token_fields(a.token)["mesh"]
    assert f"in mesh {mesh}" in r.stdout, r.stdout
    # the mesh has nothing for B (no model on its disk, A's fits A alone): B stands by
    # passively, out of gossip, its routing table from A (test_demand.py)
    wait_for(lambda: (lambda st: st["node"]["state"] == "passive" and
                      st.get("route", {}).get("checkin") == a.id)(b.status()),
             timeout=30, what="B a passive standby checking in with A")
    r = cli("status", *console, str(b.console_port), timeout=20)
    assert r.returncode == 0, r
    out = r.stdout
    assert f"node {b.id}  passive" in out and f"mesh {mesh}" in out, out
    assert f"passive standby: no gossip; routing table from {a.id[:12]}" in out, out
    models = out.split("models (")[1]
    assert SMALL in models and "ready" in models and a.id[:12] in models, out
    assert b.complete(SMALL).status == 200
    # status of a node with a model: its llama-server among the processes
    r = cli("status", *console, str(a.console_port), timeout=20)
    assert r.returncode == 0 and "llama-server" in r.stdout.split("processes (")[1], r.stdout


def test_join_that_cannot_connect_is_told_and_bounded(start_node):
    """A valid token whose node is gone: the join is accepted (202), /api/status says why it
    has not worked yet, and `mesh-llm join` gives up after its --timeout with that reason."""
    a = start_node("--port", "0", "--own-mesh", env=ENV)
    token = a.token
    assert a.stop() == 0
    b = start_idle(start_node)
    r = cli("join", token, "--console", str(b.console_port), "--timeout", "10", timeout=60)
    assert r.returncode == 1, r
    assert "not in the mesh after 10 s" in r.stderr, r.stderr
    st = wait_for(lambda: (lambda n: n if n["join_error"] else None)(b.status()["node"]),
                  timeout=20, what="the join error in the status")
    assert st["state"] == "joining", st
    assert "join attempt failed: " in r.stdout, r.stdout  # the CLI told why as it went

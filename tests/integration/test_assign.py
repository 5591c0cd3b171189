"""The mesh-level switch (seed 000, issue 34 item 7): `mesh-llm assign MODEL` moves a model to the
node it runs on, unloading what must go; `mesh-llm unassign` gives it back to the mesh's rules.
Only the node's own operator can do it: a client that is not on its machine (by name) without
the key is refused, and a mesh member's tunnel never reaches the endpoint."""
import json
import os
import subprocess

from harness.mesh import ENV, wait_converged
from harness.node import MESH_BIN, http, model_path, wait_for

S = "stories260K"
T = "TinyStories-656K-Q8_0"
TEST_PEER = os.path.join(os.path.dirname(MESH_BIN), "mesh-test-peer")


def cli(node, *args, timeout=120):
    env = dict(os.environ)
    env.pop("MESH_LLM_API_KEY", None)
    return subprocess.run([MESH_BIN, *args, "--console", str(node.console_port)],
                          capture_output=True, text=True, timeout=timeout, env=env)


def assignments(node):
    return {a["model"]: a for a in node.status()["assignments"]}


def hosts(node, model):
    r = node.request("GET", "/v1/models")
    assert r.status == 200, r
    for m in r.json()["data"]:
        if m["id"] == model:
            return m
    return None


def test_assign_moves_a_model_and_unassign_gives_it_back(start_node, tmp_path):
    models = tmp_path / "models"
    models.mkdir()
    for m in (S, T):
        os.symlink(model_path(m), models / f"{m}.gguf")
    a = start_node("--port", "0", "--model", model_path(S), env=ENV)
    # B serves T (--model) with one llm slot, and has S's file too
    b = start_node("--port", "0", "--model", str(models / f"{T}.gguf"), "--models-dir", str(models),
                   "--max-loaded-models", "1", "--join", a.token, env=ENV)
    wait_converged([a, b])
    wait_for(lambda: b.child_for(T) is not None, timeout=60, what="T serving on B")
    assert assignments(b) == {}

    # assigning on another node's behalf: refused, with the command to run there
    r = cli(b, "assign", S, "--node", a.id)
    assert r.returncode == 1, r
    assert f"mesh-llm assign {S}" in r.stderr and "never from a peer" in r.stderr

    # on B: S moves to B (it waits until S serves), T had to go (its only slot)
    r = cli(b, "assign", S, "--node", b.id[:12])
    assert r.returncode == 0, (r.stdout, r.stderr, b.stderr()[-3000:])
    assert "assigned to this node" in r.stdout and T in r.stdout
    assert f"{S} serves on this node" in r.stdout
    asg = assignments(b)
    assert asg[S]["state"] == "ready" and asg[S]["pending"] is False, asg
    wait_for(lambda: b.child_for(T) is None, timeout=30, what="T unloaded on B")
    assert b.child_for(S) is not None
    plan = {p["model"]: p for p in b.status()["plan"]}
    assert plan[S]["rule"] == "assigned" and T not in plan, plan
    # the mesh sees B as a host of S (an announcement, no remote control)
    wait_for(lambda: b.id in (hosts(a, S) or {}).get("hosts", []), timeout=30,
             what="A lists B as a host of S")
    assert b.complete(S).status == 200
    r = cli(b, "status")
    assert r.returncode == 0 and f"assigned here: {S} (ready)" in r.stdout, r.stdout
    # again: nothing changes
    r = cli(b, "assign", S, "--no-wait")
    assert r.returncode == 0 and "already" in r.stdout, r
    # a model that is nowhere: a clear 404
    r = cli(b, "assign", "no-such-model")
    assert r.returncode == 1 and "not on this node's disk" in r.stderr, r

    # unassign: S goes back to the mesh's rules and T, which the assignment pushed out, is
    # planned again (it takes the only slot back)
    r = cli(b, "unassign", S)
    assert r.returncode == 0 and "no longer assigned" in r.stdout, r
    assert assignments(b) == {}
    wait_for(lambda: b.child_for(T) is not None, timeout=60, what="T back on B")
    plan = {p["model"]: p for p in b.status()["plan"]}
    assert plan[T]["rule"] == "explicit" and S not in plan, plan
    r = cli(b, "unassign", S)
    assert r.returncode == 1 and "not assigned" in r.stderr, r


def test_only_the_operator_assigns(start_node, tmp_path):
    a = start_node("--port", "0", "--model", model_path(S), "--own-mesh")
    wait_for(lambda: (hosts(a, S) or {}).get("status") == "ready", timeout=60, what="S ready")
    body = json.dumps({"model": S}).encode()
    # a client naming the node by another name (DNS rebinding, or not this machine): refused
    r = http(a.console_port, "POST", "/api/assign", raw_body=body,
             headers={"Host": f"evil.example:{a.console_port}",
                      "Content-Type": "application/json"})
    assert r.status == 403, r
    assert "a peer never can" in r.json()["error"]["message"]
    assert assignments(a) == {}
    # bad bodies
    r = http(a.console_port, "POST", "/api/assign", raw_body=b"{}",
             headers={"Content-Type": "application/json"})
    assert r.status == 400, r
    r = http(a.console_port, "GET", "/api/assign")
    assert r.status == 405, r
    # a mesh member's tunnel ends at the inference API: /api/assign is not part of it
    f = tmp_path / "req.http"
    # (pipelined behind an inference request, as in test_security_http.py: the answers show)
    f.write_bytes(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
                  b"POST /api/assign HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
    r = subprocess.run([TEST_PEER, a.token, "tunnel", S, str(f)], capture_output=True,
                       timeout=90)
    assert r.returncode == 0, r.stderr.decode()
    out = r.stdout
    assert out.startswith(b"HTTP/1.1 200 OK\r\n"), out[:300]
    second = out[out.index(b"HTTP/1.1 ", 10):]
    assert second.startswith(b"HTTP/1.1 403 Forbidden\r\n"), second[:300]
    assert "refused a tunnelled POST /api/assign" in a.stderr()
    assert assignments(a) == {}
    # from this machine, by its loopback name: assigned (its own --model becomes assigned)
    r = http(a.console_port, "POST", "/api/assign", raw_body=body,
             headers={"Content-Type": "application/json"})
    assert r.status == 200 and r.json()["status"] == "assigned", r
    assert S in assignments(a)
    plan = {p["model"]: p for p in a.status()["plan"]}
    assert plan[S]["rule"] == "assigned"
    r = http(a.console_port, "POST", "/api/unassign", raw_body=body,
             headers={"Content-Type": "application/json"})
    assert r.status == 200, r
    plan = {p["model"]: p for p in a.status()["plan"]}
    assert plan[S]["rule"] == "explicit"


def test_assign_with_an_api_key(start_node, tmp_path):
    key = tmp_path / "key"
    key.write_text("sekrit-key-123\n")
    a = start_node("--port", "0", "--model", model_path(S), "--own-mesh",
                   "--api-key-file", str(key))
    body = json.dumps({"model": S}).encode()
    r = http(a.console_port, "POST", "/api/assign", raw_body=body,
             headers={"Content-Type": "application/json"})
    assert r.status == 401, r
    env = dict(os.environ, MESH_LLM_API_KEY="sekrit-key-123")
    r = subprocess.run([MESH_BIN, "assign", S, "--console", str(a.console_port)],
                       capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, (r.stdout, r.stderr)
    r = http(a.console_port, "GET", "/api/status",
             headers={"Authorization": "Bearer sekrit-key-123"})
    assert [x["model"] for x in r.json()["assignments"]] == [S]

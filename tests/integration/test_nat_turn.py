"""--stun and --turn in the node, end to end, in a NatNet (harness/nat.py): real nftables NATs in
network namespaces and Debian's coturn on a public host.

  * --stun: a node behind a home router announces the router's public address (and, the router
    keeping the source port, its own QUIC port: the binding went out of the QUIC socket) as a
    reflexive candidate before it has any peer.
  * --turn: two nodes behind symmetric NATs (hole punching cannot work there) and no --relay
    node: they still connect, through A's TURN allocation; both show path "turn", a completion
    asked of B for the model only A serves is answered by A with the greedy text A gives itself,
    and coturn's log shows the permission, the channel and the relayed traffic.
  * a wrong TURN password: a clear error line, no relay candidate, the node keeps running.

Everything stays inside the test's namespaces (11.0.0.0/24 and the sites' LANs)."""
import os
import re
import shutil

import pytest

from harness.coturn import coturn_factory  # noqa: F401 (a fixture)
from harness.mesh import ENV, wait_converged
from harness.node import model_path, wait_for

pytestmark = pytest.mark.skipif(not shutil.which("turnserver"),
                                reason="coturn (turnserver) is not installed: scripts/deps.sh test")

USER, PASSWORD, REALM = "meshuser", "turn-s3cret-pw", "mesh.test"
MODEL_A = "stories260K"          # served by A only
MODEL_B = "TinyStories-656K-Q8_0"  # B serves something else (an active, gossiping member)


def nat_status(node):
    return node.status()["node"]["nat"]


def candidates(node, kind):
    return [c["addr"] for c in nat_status(node)["candidates"] if c["kind"] == kind]


def password_file(tmp_path, text):
    p = tmp_path / "turn-password"
    p.write_text(text + "\n")
    os.chmod(p, 0o600)
    return str(p)


def peer_entry(node, peer_id):
    for p in node.status()["peers"]:
        if p["id"] == peer_id:
            return p
    return None


def test_stun_announces_the_routers_public_address(natnet, start_node):
    net = natnet()
    pub = net.public_host("turn")
    turn = net.coturn(pub, USER, PASSWORD, REALM)
    site = net.site("a", kind="home")
    a1 = site.host("a1")
    a = start_node("--port", "0", "--own-mesh", "--stun", f"{turn.addr}:{turn.port}", env=ENV,
                   ns=a1.ns)
    refl = wait_for(lambda: candidates(a, "reflexive"), timeout=30,
                    what="a reflexive candidate from the STUN server")
    host, port = refl[0].rsplit(":", 1)
    assert host == site.public_addr, refl
    # a home router keeps the source port: the mapping is the QUIC socket's
    assert int(port) == a.quic_port, (refl, a.quic_port)
    st = a.status()
    assert st["peers"] == [], st["peers"]  # learned from the server, not from a peer
    stun = st["node"]["nat"]["stun"]
    assert stun[0]["state"] == "done" and stun[0]["mapped"] == refl[0], stun
    assert f"sees this node at {refl[0]}" in a.stderr(), a.stderr()[-2000:]


def test_stun_server_by_name(coturn_factory, start_node):  # noqa: F811
    """A --stun name is resolved (uv_getaddrinfo: "localhost" from /etc/hosts, no DNS) and the
    binding goes out of the QUIC socket: coturn on 127.0.0.1 reports the node's QUIC port. (On
    loopback the answer is one of the node's own addresses, so it is no extra candidate.)"""
    srv = coturn_factory()
    a = start_node("--port", "0", "--own-mesh", "--stun", f"localhost:{srv.port}", env=ENV)
    stun = wait_for(lambda: (lambda s: s[0]["state"] == "done" and s)(nat_status(a)["stun"]),
                    timeout=30, what="the STUN answer")
    assert stun[0]["server"] == f"localhost:{srv.port}"
    assert stun[0]["mapped"] == f"127.0.0.1:{a.quic_port}", stun
    assert candidates(a, "reflexive") == []


def test_wrong_turn_password_is_reported_and_the_node_keeps_running(natnet, start_node, tmp_path):
    net = natnet()
    pub = net.public_host("turn")
    turn = net.coturn(pub, USER, PASSWORD, REALM)
    site = net.site("a", kind="symmetric")
    a1 = site.host("a1")
    wrong = "not-the-password"
    a = start_node("--port", "0", "--own-mesh", "--turn", f"turn:{turn.addr}:{turn.port}",
                   "--turn-user", USER, "--turn-password-file", password_file(tmp_path, wrong),
                   env=ENV, ns=a1.ns)
    line = wait_for(lambda: next((l for l in a.stderr().splitlines()
                                  if "TURN server" in l and "401" in l), None),
                    timeout=30, what="the TURN error line")
    assert "wrong username or password" in line, line
    assert wrong not in a.stderr() and wrong not in " ".join(a.args)
    turn_st = nat_status(a)["turn"]
    assert turn_st["state"] == "failed" and "401" in turn_st["error"], turn_st
    assert candidates(a, "relay") == []
    assert a.proc.poll() is None
    assert a.status()["node"]["state"]  # the API still answers


def test_turn_password_from_the_config_file_or_the_environment(natnet, start_node, tmp_path):
    net = natnet()
    pub = net.public_host("turn")
    turn = net.coturn(pub, USER, PASSWORD, REALM)
    h1, h2 = net.public_host("n1"), net.public_host("n2")
    conf = tmp_path / "mesh.conf"
    # the STUN server is the TURN server's address too: both clients share its datagrams
    conf.write_text(f'mesh = {{ turn = "turn:{turn.addr}:{turn.port}"; turn_user = "{USER}"; '
                    f'turn_password = "{PASSWORD}"; stun = ["{turn.addr}:{turn.port}"]; }};\n')
    os.chmod(conf, 0o600)
    n1 = start_node("--port", "0", "--own-mesh", "--config", str(conf), env=ENV, ns=h1.ns)
    n2 = start_node("--port", "0", "--own-mesh", "--turn", f"turn:{turn.addr}:{turn.port}",
                    "--turn-user", USER, env=dict(ENV, MESH_LLM_TURN_PASSWORD=PASSWORD),
                    ns=h2.ns)
    for n in (n1, n2):
        relay = wait_for(lambda: candidates(n, "relay"), timeout=30, what="a relay candidate")
        assert relay[0].split(":")[0] == turn.addr, relay
        assert PASSWORD not in " ".join(n.args) and PASSWORD not in n.stderr()
    stun = wait_for(lambda: (lambda x: x[0]["state"] == "done" and x)(nat_status(n1)["stun"]),
                    timeout=30, what="n1's STUN answer")
    assert stun[0]["mapped"] == f"{h1.addr}:{n1.quic_port}", stun  # a public host: itself


def test_two_symmetric_nats_connect_over_turn(natnet, start_node, tmp_path):
    net = natnet()
    pub = net.public_host("turn")
    turn = net.coturn(pub, USER, PASSWORD, REALM, extra=("verbose",))  # sessions in its log
    seed_host = net.public_host("seed")
    sa, sb = net.site("a", kind="symmetric"), net.site("b", kind="symmetric")
    a1, b1 = sa.host("a1"), sb.host("b1")
    env = lambda name: dict(ENV, LLAMA_CACHE=str(tmp_path / f"cache-{name}"))
    seed = start_node("--port", "0", "--own-mesh", "--max-vram", "0.000001", env=env("seed"),
                      ns=seed_host.ns)
    a = start_node("--port", "0", "--model", model_path(MODEL_A), "--join", seed.token,
                   "--turn", f"turn:{turn.addr}:{turn.port}", "--turn-user", USER,
                   "--turn-password-file", password_file(tmp_path, PASSWORD), env=env("a"),
                   ns=a1.ns)
    assert PASSWORD not in " ".join(a.args)
    relay = wait_for(lambda: candidates(a, "relay"), timeout=30, what="a's relay candidate")
    assert relay[0].split(":")[0] == turn.addr, relay
    b = start_node("--port", "0", "--model", model_path(MODEL_B), "--join", seed.token,
                   env=env("b"), ns=b1.ns)
    wait_converged([seed, a, b], timeout=60)

    def turn_path():
        pa, pb = peer_entry(a, b.id), peer_entry(b, a.id)
        return pa and pb and pa.get("path") == "turn" and pb.get("path") == "turn" and (pa, pb)

    pa, pb = wait_for(turn_path, timeout=90, what="a and b connected over TURN")
    assert pb.get("addr") == relay[0], pb  # b reaches a at a's relayed address
    assert pa.get("addr", "").split(":")[0] == sb.public_addr, pa  # a sees b's router
    assert nat_status(a)["turn"]["packets_in"] > 0 and nat_status(a)["turn"]["packets_out"] > 0

    prompt = "Once upon a time " * 200  # a request of several full-sized packets over TURN
    want = a.complete(MODEL_A, prompt=prompt, max_tokens=16)
    assert want.status == 200, want
    text = want.json()["choices"][0]["text"]
    assert len(text) > 10, want
    wait_for(lambda: a.id in next((m["hosts"] for m in b.status()["catalog"]
                                   if m["name"] == MODEL_A), []),
             timeout=60, what=f"b to see a hosting {MODEL_A}")
    r = b.complete(MODEL_A, prompt=prompt, max_tokens=16)
    assert r.status == 200, r
    assert r.headers.get("x-mesh-node") == a.id, r.headers
    assert r.headers.get("x-mesh-route") == f"tunnel:{a.id}", r.headers
    assert r.json()["choices"][0]["text"] == text
    # still over TURN after the request (no other path appeared)
    assert peer_entry(b, a.id)["path"] == "turn"
    log = turn.log()
    assert re.search(r"CREATE_PERMISSION processed, success", log), log[-3000:]
    assert re.search(r"CHANNEL_BIND processed, success", log), log[-3000:]
    assert PASSWORD not in a.stderr()
    # a's stop deletes the allocation: coturn closes the session and logs what it relayed
    assert a.stop() == 0
    closed = wait_for(lambda: re.search(r"session (\d+): closed", turn.log()), timeout=20,
                      what="coturn to close a's session")
    usage = re.search(rf"session {closed.group(1)}: peer usage: .*rp=(\d+), rb=(\d+), sp=(\d+), "
                      rf"sb=(\d+)", turn.log())
    assert usage, turn.log()[-3000:]
    rp, rb, sp, sb = map(int, usage.groups())
    assert rp > 0 and rb > 0 and sp > 0 and sb > 0, usage.group(0)  # relayed both ways

"""Nodes behind real Linux NATs (tests/harness/nat.py: namespaces, nftables, miniupnpd) form one
mesh through a public seed (docs/nat.md): every pair connects (direct, through a router's port
mapping, by a hole punch the seed coordinates, or through the seed as a relay, which forwards
their QUIC packets and cannot read them), never "unreachable"; every pair serves a routed stream
with the solo greedy text; a split whose worker is behind a NAT answers with the solo text.

The path of each pair is written down before the test (PATHS), from the NAT kinds:
  * two usual home routers (endpoint-independent mapping, port-restricted filtering): punched;
  * a symmetric NAT (a new port per destination) with a home NAT or another symmetric NAT:
    relayed (the port the seed saw is not the one the peer's packets come from);
  * a UPnP/NAT-PMP router: its host is reachable at its mapping: mapped, from everyone;
  * two homes behind the same carrier-grade NAT: relayed, because the carrier does not hairpin
    (each one's public address is the carrier's, which it does not forward back inside:
    test_nat_harness measured it);
  * the public seed with anyone: direct (or mapped, for the UPnP host, whose outgoing packets
    leave from its mapped port).
"""
import json
import os
import socket
import threading

import pytest

from harness.mesh import ENV
from harness.nat import _in_ns
from harness.node import MESH_BIN, model_path, wait_for

MODEL = "stories260K"
PROMPT = "Once upon a time"

NAMES = ["seed", "a1", "b1", "s1", "s2", "u1", "c1", "c2"]
HOME = {"a1", "b1", "c1", "c2"}
SYM = {"s1", "s2"}


def expected(x, y):
    """The path written before the test, for the pair {x, y}."""
    pair = {x, y}
    if "u1" in pair:
        return "mapped"
    if "seed" in pair:
        return "direct"
    if pair == {"c1", "c2"}:
        return "relayed"  # the same carrier: no hairpinning
    if pair & SYM:
        return "relayed"
    assert pair <= HOME
    return "punched"


PATHS = {(x, y): expected(x, y) for i, x in enumerate(NAMES) for y in NAMES[i + 1:]}


def own_model(tmp_path, name):
    """A model file named after its node (the same weights): a request for it goes to that node."""
    d = tmp_path / f"models-{name}"
    d.mkdir()
    p = d / f"m-{name}.gguf"
    os.symlink(model_path(MODEL), p)
    return str(p)


def chat(node, model, stream):
    body = {"model": model, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 12,
            "temperature": 0, "stream": stream}
    r = node.request("POST", "/v1/chat/completions", body, timeout=120)
    assert r.status == 200, (getattr(node, "name", node.id[:8]), model, r)
    if not stream:
        return r.json()["choices"][0]["message"]["content"], r.headers.get("x-mesh-node")
    text, done = "", False
    for line in r.body.decode().splitlines():
        if not line.startswith("data: "):
            continue
        if line == "data: [DONE]":
            done = True
            continue
        for ch in json.loads(line[6:]).get("choices", []):
            text += ch.get("delta", {}).get("content") or ""
    assert done, f"stream at {node.name} for {model} not finished: {r.body[-200:]!r}"
    return text, r.headers.get("x-mesh-node")


class Sniffer:
    """Every IPv4 packet seen in a namespace (AF_PACKET), kept until stop()."""

    def __init__(self, ns):
        self.sock = _in_ns(ns, lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW,
                                                      socket.htons(0x0003)))
        self.sock.bind(("eth0", 0))  # the wire, not lo (the seed's own API and children)
        self.sock.settimeout(0.2)
        self.data = bytearray()
        self.udp = 0
        self.running = True
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        while self.running and len(self.data) < 64 << 20:
            try:
                pkt = self.sock.recv(65536)
            except socket.timeout:
                continue
            if len(pkt) > 23 and pkt[12:14] == b"\x08\x00" and pkt[23] == 17:  # IPv4 UDP
                self.udp += 1
            self.data += pkt

    def stop(self):
        self.running = False
        self.t.join(5)
        self.sock.close()
        return bytes(self.data)


def test_nat_matrix(natnet, start_node, tmp_path):
    net = natnet()
    hosts = {"seed": net.public_host("seed")}
    hosts["a1"] = net.site("a", kind="home").host("a1")
    hosts["b1"] = net.site("b", kind="home").host("b1")
    hosts["s1"] = net.site("s", kind="symmetric").host("s1")
    hosts["s2"] = net.site("t", kind="symmetric").host("s2")
    hosts["u1"] = net.site("u", kind="upnp").host("u1")
    isp = net.cgnat("isp")
    hosts["c1"] = net.site("c", kind="home", behind=isp).host("c1")
    hosts["c2"] = net.site("d", kind="home", behind=isp).host("c2")

    nodes = {}
    env = dict(ENV, MESH_LLM_PORTMAP="0")
    nodes["seed"] = start_node("--port", "0", "--relay", "--model", own_model(tmp_path, "seed"),
                               env=env, ns=hosts["seed"].ns)
    token = nodes["seed"].token
    for name in NAMES[1:]:
        # default settings, but for the port mapping: only the UPnP site's router answers it
        e = dict(env, MESH_LLM_PORTMAP="1") if name == "u1" else env
        nodes[name] = start_node("--port", "0", "--join", token, "--model",
                                 own_model(tmp_path, name), env=e, ns=hosts[name].ns)
    for n, node in nodes.items():
        node.name = n
    ids = {n: node.id for n, node in nodes.items()}
    names = {v: k for k, v in ids.items()}

    # u1's router mapped its port, and u1 announces the mapping
    wait_for(lambda: any(c["kind"] == "mapped" for c in
                         nodes["u1"].status()["node"]["nat"]["candidates"]),
             timeout=30, what="u1's port mapping")

    def paths():
        out = {}
        for n, node in nodes.items():
            for p in node.status()["peers"]:
                if p["id"] in names and p.get("connected"):
                    out[(n, names[p["id"]])] = p.get("path")
        return out

    def all_connected():
        got = paths()
        return all((x, y) in got and (y, x) in got for (x, y) in PATHS)

    # every pair connects (gossip dials every member): wait, then compare with the table
    wait_for(all_connected, timeout=150, interval=1.0,
             what="every pair of nodes connected: " + repr(
                 sorted(set((x, y) for (x, y) in PATHS) - set(paths()))))
    got = paths()
    print("PATHS", sorted(got.items()))
    wrong = {(x, y): (got[(x, y)], got[(y, x)], want) for (x, y), want in PATHS.items()
             if got[(x, y)] != want or got[(y, x)] != want}
    assert not wrong, f"paths (x's view, y's view, expected): {wrong}"
    # what each node found out about its own NAT
    mapping = {n: node.status()["node"]["nat"]["mapping"] for n, node in nodes.items()}
    assert mapping == {"seed": "none seen", "a1": "endpoint-independent",
                       "b1": "endpoint-independent", "s1": "symmetric", "s2": "symmetric",
                       "u1": "none seen", "c1": "endpoint-independent",
                       "c2": "endpoint-independent"}, mapping
    # /metrics counts the paths; `mesh-llm status` shows them
    want_a1 = {"direct": 1, "mapped": 1, "punched": 3, "relayed": 2}  # from PATHS, a1's row
    assert {k: nodes["a1"].metric(f'mesh_llm_peers_by_path{{path="{k}"}}') for k in want_a1} \
        == want_a1
    out = net.run(hosts["s1"], [MESH_BIN, "status", "--console", str(nodes["s1"].console_port)])
    assert out.returncode == 0, out.stderr
    assert f"relayed via {ids['seed'][:12]}" in out.stdout and "punched" not in out.stdout, \
        out.stdout
    for (x, y), want in PATHS.items():
        if want == "relayed":
            peer = next(p for p in nodes[x].status()["peers"] if p["id"] == ids[y])
            assert peer["via"] == ids["seed"], peer

    # every pair serves a routed stream with the solo text; the relay's traffic meanwhile carries
    # none of it in the clear
    solo, who = chat(nodes["seed"], "m-seed", stream=False)
    assert who == ids["seed"] and solo.strip(), (who, solo)
    sniff = Sniffer(hosts["seed"].ns)
    try:
        for (x, y) in PATHS:
            for a, b in ((x, y), (y, x)):
                text, who = chat(nodes[a], f"m-{b}", stream=True)
                assert who == ids[b], (a, b, who)
                assert text == solo, (a, b, text, solo)
    finally:
        seen = sniff.stop()
    assert sniff.udp > 100, sniff.udp  # the capture saw the relayed traffic
    assert solo.encode() not in seen and PROMPT.encode() not in seen
    relay = nodes["seed"].status()["node"]["nat"]
    print("RELAY", relay, "udp packets seen", sniff.udp, "bytes", len(seen))
    for n, node in nodes.items():
        print("NAT", n, node.status()["node"]["nat"])
    assert relay["relay_forwarded"] > 0 and relay["relay_sessions"] >= 1, relay


def test_split_across_nats_through_the_relay(natnet, start_node, tmp_path):
    """A split whose host is behind a home NAT and whose worker is behind a symmetric NAT: they
    reach each other only through the seed's relay, and the split answers like a solo node."""
    from harness.split import SMALL, SMALL_CTX, SMALL_SIZE, env_for, gb, greedy, models_dir, \
        models_status, plan_of, text
    net = natnet()
    seed_h = net.public_host("seed")
    host_h = net.site("a", kind="home").host("a1")
    worker_h = net.site("s", kind="symmetric").host("s1")
    vram = gb(0.6 * SMALL_SIZE)  # neither fits alone, together they do
    seed = start_node("--port", "0", "--own-mesh", "--relay", env=dict(env_for(tmp_path, "seed")),
                      ns=seed_h.ns)
    a = start_node("--port", "0", "--model", model_path(SMALL), *SMALL_CTX, "--max-vram", vram,
                   "--join", seed.token, env=env_for(tmp_path, "a"), ns=host_h.ns)
    b = start_node("--port", "0", "--models-dir", models_dir(tmp_path, "b", SMALL), *SMALL_CTX,
                   "--max-vram", vram, "--join", seed.token, env=env_for(tmp_path, "b"),
                   ns=worker_h.ns)
    for n in (a, b):
        try:
            wait_for(lambda: models_status(n).get(SMALL) == "ready", timeout=120,
                     what=f"the split model ready on {n.id[:8]}")
        except BaseException:  # what the three nodes said, for the failure's report
            for who, x in (("seed", seed), ("host a1", a), ("worker s1", b)):
                print(f"---- {who} ----\n" + "\n".join(x.stderr().splitlines()[-60:]))
            raise
    plans = {n.id: plan_of(n, SMALL) for n in (a, b)}
    host, worker = (a, b) if plans[a.id]["role"] == "host" else (b, a)
    assert plans[host.id]["mode"] == "split" and plans[worker.id]["host"] == host.id, plans
    peer = next(p for p in host.status()["peers"] if p["id"] == worker.id)
    assert peer["path"] == "relayed" and peer["via"] == seed.id, peer
    solo = start_node("--port", "0", "--model", model_path(SMALL), env=env_for(tmp_path, "solo"))
    want = text(greedy(solo, SMALL))
    assert len(want) > 20
    for n in (a, b, seed):
        assert text(greedy(n, SMALL)) == want, n.id[:8]
    assert worker.status()["rpc_tunnel"]["worker_rx"] > 0
    assert seed.status()["node"]["nat"]["relay_forwarded"] > 0


def test_the_relay_serves_members_only(natnet, start_node, tmp_path):
    """A relay frame captured on the wire and sent again from another address (a stranger on the
    public network) is dropped by the relay: sessions are bound to their members' addresses."""
    net = natnet()
    seed_h = net.public_host("seed")
    stranger = net.public_host("stranger")
    s1 = net.site("s", kind="symmetric").host("s1")
    s2 = net.site("t", kind="symmetric").host("s2")
    env = dict(ENV, MESH_LLM_PORTMAP="0")
    seed = start_node("--port", "0", "--own-mesh", "--relay", env=env, ns=seed_h.ns)
    sniff = Sniffer(seed_h.ns)
    try:
        n1 = start_node("--port", "0", "--join", seed.token, "--model", own_model(tmp_path, "s1"),
                        env=env, ns=s1.ns)
        n2 = start_node("--port", "0", "--join", seed.token, "--model", own_model(tmp_path, "s2"),
                        env=env, ns=s2.ns)
        wait_for(lambda: any(p["id"] == n2.id and p.get("path") == "relayed"
                             for p in n1.status()["peers"]), timeout=90, what="s1-s2 relayed")
        text, who = chat(n1, "m-s2", stream=True)
        assert who == n2.id and text
    finally:
        wire = sniff.stop()
    # relay frames in the capture: [eth 14][ip 20][udp 8][0x3a side sid(16) ...] to the seed
    port = seed.status()["node"]["quic_port"]
    frames = []
    i = wire.find(b"\x08\x00\x45")
    while i >= 0 and len(frames) < 5:
        eth = i - 12
        ip = wire[eth + 14:eth + 34]
        if len(ip) == 20 and ip[9] == 17:
            udp = wire[eth + 34:eth + 42]
            dport = int.from_bytes(udp[2:4], "big")
            ulen = int.from_bytes(udp[4:6], "big")
            payload = wire[eth + 42:eth + 34 + ulen]
            if dport == port and len(payload) > 18 and payload[0] == 0x3a:
                frames.append(payload)
        i = wire.find(b"\x08\x00\x45", i + 3)
    assert frames, "no relay frame captured"
    before = seed.status()["node"]["nat"]
    s = net.udp(stranger, timeout=1.0)
    for f in frames:
        s.sendto(f, (seed_h.addr, port))
    wait_for(lambda: seed.status()["node"]["nat"]["relay_dropped"] >= before["relay_dropped"] +
             len(frames), timeout=10, what="the replayed frames dropped")
    with pytest.raises(socket.timeout):
        s.recvfrom(2048)  # nothing forwarded back to the stranger either


def seed_and_home(natnet, start_node, tmp_path, *a_args):
    """A public seed serving m-seed and node a (a_args added) on host a1 behind a home router:
    (net, site, a1, seed, a)."""
    net = natnet()
    seed_h = net.public_host("seed")
    site = net.site("a", kind="home")
    a1 = site.host("a1")
    env = dict(ENV, MESH_LLM_PORTMAP="0")
    seed = start_node("--port", "0", "--own-mesh", "--model", own_model(tmp_path, "seed"),
                      env=env, ns=seed_h.ns)
    a = start_node("--port", "0", "--join", seed.token, *a_args, env=env, ns=a1.ns)
    return net, site, a1, seed, a


def moved_setup(natnet, start_node, tmp_path):
    """A public seed and node a on host a1 behind a home router, connected and known at a1's
    address: (net, site, a1, seed, a, a's QUIC port, a1's next address). a serves a model of its
    own, which keeps it a gossip member (a node the mesh has no use for stands by passively and
    leaves gossip: then the seed would rightly forget it)."""
    net, site, a1, seed, a = seed_and_home(natnet, start_node, tmp_path, "--model",
                                           own_model(tmp_path, "a"))
    wait_for(lambda: any(p["id"] == a.id and p.get("connected") for p in seed.status()["peers"]),
             timeout=60, what="a1 connected to the seed")
    port = a.status()["node"]["quic_port"]
    wait_for(lambda: f"{a1.addr}:{port}" in peer_entry(seed, a).get("addrs", []), timeout=60,
             what="a1's address in the seed's view")
    return net, site, a1, seed, a, port, a1.addr.rsplit(".", 1)[0] + ".99"


def peer_entry(node, other):
    """node's entry for other ({} when it lists none)."""
    return next((p for p in node.status()["peers"] if p["id"] == other.id), {})


def move_cmds(a1, site, new):
    """a1's LAN address replaced by `new`, its default route back (the address's removal took it)."""
    return (["ip", "addr", "del", f"{a1.addr}/24", "dev", "eth0"],
            ["ip", "addr", "add", f"{new}/24", "dev", "eth0"],
            ["ip", "route", "replace", "default", "via", site.lan_gw])


def answered_through(a, seed):
    """A request through a for the seed's model: True once the seed answered it (a 503 that
    says to retry is allowed while the path is being set up again)."""
    r = a.request("POST", "/v1/chat/completions",
                  {"model": "m-seed", "max_tokens": 4, "temperature": 0,
                   "messages": [{"role": "user", "content": PROMPT}]}, timeout=60)
    assert r.status in (200, 503), r
    return r.status == 200 and r.headers.get("x-mesh-node") == seed.id


def announced(seed, a, a1, new, port):
    """The seed lists a, alive, at its new address and no longer at its old one."""
    e = peer_entry(seed, a)
    addrs = e.get("addrs", [])
    return e.get("state") == "alive" and f"{new}:{port}" in addrs and f"{a1.addr}:{port}" not in addrs


def test_a_node_that_moves_announces_its_new_address(natnet, start_node, tmp_path):
    """A node whose address changes (a laptop on another network: here its LAN address is
    replaced) announces the new one, and requests through it keep being answered."""
    net, site, a1, seed, a, port, new = moved_setup(natnet, start_node, tmp_path)
    # the address swapped in one `ip -batch` (as a DHCP renewal would): a gap of milliseconds,
    # well inside the liveness bound, so the connection is followed, not lost
    batch = "".join(" ".join(c[1:]) + "\n" for c in move_cmds(a1, site, new))
    r = net.run(a1, ["ip", "-batch", "-"], input=batch)
    assert r.returncode == 0, (batch, r.stderr)
    wait_for(lambda: announced(seed, a, a1, new, port), timeout=120,
             what="the new address announced")  # gossip carries it
    # the first request may meet the old path's end (a 503 that says to retry); then answered
    wait_for(lambda: answered_through(a, seed), timeout=60, interval=0.5,
             what="a request through the moved node answered")
    # the seed followed a1's connection to its new source port (its router gave the new LAN
    # address a new mapping) rather than losing it
    assert seed.status()["stats"]["quic_migrations"] >= 1, seed.status()["stats"]


def test_a_node_offline_for_seconds_comes_back_at_its_new_address(natnet, start_node, tmp_path):
    """A laptop changing networks is offline for seconds, not milliseconds: its LAN address goes,
    the seed (a gossip stream open to it) declares it dead within the liveness bound, and only
    then does the new address come. The node refutes its death, rejoins from the new address
    (its router gives it a new mapping), the seed lists it alive there, and requests through it
    are answered again."""
    net, site, a1, seed, a, port, new = moved_setup(natnet, start_node, tmp_path)
    inc = peer_entry(seed, a)["incarnation"]
    gone, *back = move_cmds(a1, site, new)
    r = net.run(a1, gone)
    assert r.returncode == 0, (gone, r.stderr)
    wait_for(lambda: peer_entry(seed, a).get("state") == "dead", timeout=60,
             what="the seed declaring the offline node dead")
    for cmd in back:
        r = net.run(a1, cmd)
        assert r.returncode == 0, (cmd, r.stderr)
    wait_for(lambda: announced(seed, a, a1, new, port), timeout=120,
             what="the node alive again at its new address")
    assert peer_entry(seed, a)["incarnation"] > inc  # it refuted its death
    wait_for(lambda: answered_through(a, seed), timeout=60, interval=0.5,
             what="a request through the node answered")


def test_a_standby_offline_for_seconds_checks_in_again_when_back(natnet, start_node, tmp_path):
    """A node the mesh has no use for stands by passively: no gossip, routing tables from the
    seed, the one active node it knows. Its network goes for longer than the liveness bound while
    a request waits on the seed, so it finds the seed silent. When the network is back it asks
    the seed again at its next check-in (every node it knew was silent: the silence was likely
    its own) instead of skipping it until the mark expires a refresh period (30 s) later, and
    answers again."""
    net, site, a1, seed, a = seed_and_home(natnet, start_node, tmp_path)  # a: nothing to serve
    wait_for(lambda: a.status().get("route", {}).get("checkins", 0) >= 1, timeout=60,
             what="the standby's first routing table")
    wait_for(lambda: answered_through(a, seed), timeout=60, interval=0.5,
             what="a request through the standby answered")
    gone, *back = move_cmds(a1, site, a1.addr.rsplit(".", 1)[0] + ".99")
    r = net.run(a1, gone)
    assert r.returncode == 0, (gone, r.stderr)

    def waiting_request():  # its stream waits on the seed: the silence is found on it
        try:
            a.request("POST", "/v1/chat/completions",
                      {"model": "m-seed", "max_tokens": 4,
                       "messages": [{"role": "user", "content": PROMPT}]}, timeout=90)
        except OSError:
            pass  # a trigger only; what a request gets after the outage is asserted below
    t = threading.Thread(target=waiting_request, daemon=True)
    t.start()
    wait_for(lambda: f"host {seed.id[:12]} went silent" in a.stderr(), timeout=30,
             what="the standby finding the seed silent")
    before = a.status()["route"]["checkins"]
    for cmd in back:
        r = net.run(a1, cmd)
        assert r.returncode == 0, (cmd, r.stderr)
    # bounded below the silent mark's refresh period (30 s): with the seed skipped until the
    # mark expired, this table came only after it
    wait_for(lambda: a.status()["route"]["checkins"] > before, timeout=20,
             what="a routing table again while the seed is still marked silent")
    wait_for(lambda: answered_through(a, seed), timeout=60, interval=0.5,
             what="a request through the standby answered again")
    t.join(timeout=120)


def test_ipv6_candidates_connect_two_symmetric_nats_without_a_relay(natnet, start_node, tmp_path):
    """Two nodes behind symmetric IPv4 NATs, with no relay in the mesh: over IPv4 they cannot
    reach each other at all. Their sites also route IPv6 (no NAT, a firewall that lets in only
    replies, like a home router's): each node announces its IPv6 address, the seed coordinates a
    punch, and the pair connects directly over IPv6 and serves a routed stream both ways."""
    net = natnet(ipv6=True)
    seed_h = net.public_host("seed")
    s1 = net.site("s", kind="symmetric").host("s1")
    s2 = net.site("t", kind="symmetric").host("s2")
    env = dict(ENV, MESH_LLM_PORTMAP="0")
    seed = start_node("--port", "0", "--own-mesh", "--model", own_model(tmp_path, "seed"),
                      env=env, ns=seed_h.ns)
    n1 = start_node("--port", "0", "--join", seed.token, "--model", own_model(tmp_path, "s1"),
                    env=env, ns=s1.ns)
    n2 = start_node("--port", "0", "--join", seed.token, "--model", own_model(tmp_path, "s2"),
                    env=env, ns=s2.ns)
    ids = {n1.id: "s1", n2.id: "s2", seed.id: "seed"}
    # each announces its IPv6 address beside its IPv4 ones (the seed's view of them)
    for node, h in ((n1, s1), (n2, s2)):
        port = node.status()["node"]["quic_port"]
        wait_for(lambda: any(f"[{h.addr6}]:{port}" in p.get("addrs", [])
                             for p in seed.status()["peers"] if p["id"] == node.id),
                 timeout=60, what=f"{h.name}'s IPv6 address announced")

    def peer(a, b):
        return next((p for p in a.status()["peers"] if p["id"] == b.id and p.get("connected")),
                    None)
    try:
        wait_for(lambda: peer(n1, n2) and peer(n2, n1), timeout=90, what="s1 and s2 connected")
    except BaseException:
        for who, x in (("seed", seed), ("s1", n1), ("s2", n2)):
            print(f"---- {who} ----\n" + "\n".join(x.stderr().splitlines()[-60:]))
        raise
    p12, p21 = peer(n1, n2), peer(n2, n1)
    port2, port1 = n2.status()["node"]["quic_port"], n1.status()["node"]["quic_port"]
    assert (p12["path"], p12["addr"]) == ("direct", f"[{s2.addr6}]:{port2}"), p12
    assert (p21["path"], p21["addr"]) == ("direct", f"[{s1.addr6}]:{port1}"), p21
    assert seed.status()["node"]["nat"]["coordinated"] >= 1  # it took a punch through the firewalls
    solo, _ = chat(seed, "m-seed", stream=False)
    for a, b in ((n1, "s2"), (n2, "s1")):
        text, who = chat(a, f"m-{b}", stream=True)
        assert ids.get(who) == b and text == solo, (ids.get(who), b, text, solo)


def test_a_request_waits_for_the_path_being_set_up(natnet, start_node, tmp_path):
    """A request for a model whose host has just joined from behind a symmetric NAT, sent as soon
    as the model is listed: the only path is the relay, set up about 5 s after the first dial
    (its timeout). The request waits for that connection (MESH_LLM_CONNECT_WAIT_MS) and is
    answered by the host, instead of a 503 "cannot be reached right now"."""
    net = natnet()
    seed_h = net.public_host("seed")
    s1 = net.site("s", kind="symmetric").host("s1")
    s2 = net.site("t", kind="symmetric").host("s2")
    env = dict(ENV, MESH_LLM_PORTMAP="0")
    seed = start_node("--port", "0", "--own-mesh", "--relay", env=env, ns=seed_h.ns)
    # s1 serves a model of its own, so it stays an active member (a node with nothing to serve
    # goes passive: it routes by table and dials hosts itself, without punches or relays)
    n1 = start_node("--port", "0", "--join", seed.token, "--model", own_model(tmp_path, "s1"),
                    env=env, ns=s1.ns)
    n2 = start_node("--port", "0", "--join", seed.token, "--model", own_model(tmp_path, "s2"),
                    env=env, ns=s2.ns)
    wait_for(lambda: "m-s2" in n1.request("GET", "/v1/models").body.decode(), timeout=60,
             interval=0.05, what="m-s2 listed at s1")
    before = next((p for p in n1.status()["peers"] if p["id"] == n2.id), {})
    assert not before.get("connected"), before  # the path is still being set up
    text, who = chat(n1, "m-s2", stream=True)
    assert who == n2.id and text, (who, text)
    after = next(p for p in n1.status()["peers"] if p["id"] == n2.id)
    assert after.get("connected") and after["path"] == "relayed", after

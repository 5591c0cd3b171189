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
from harness.node import model_path, wait_for

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
    assert r.status == 200, (node.name, model, r)
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

"""The NAT test network (tests/harness/nat.py) behaves like the NATs it claims to be: a home router
maps endpoint-independently and filters by remote ip:port, a symmetric one maps per destination,
double NAT behind a carrier works outward and does not hairpin, miniupnpd maps ports for natpmpc
and upnpc, coturn answers STUN and TURN with the router's public address. Plain UDP sockets made
inside the namespaces; every wait is bounded."""
import socket
import time

import pytest

from harness.nat import stun_binding, turn_allocate


def recv_until(sock, want, timeout=5.0, drain=0.3):
    """Datagrams (payload, source) read until every payload in want arrived (or timeout), then for
    drain seconds more: what arrived unasked is in the list too."""
    got, want = [], set(want)
    deadline = time.monotonic() + timeout
    while want and time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            d, a = sock.recvfrom(2048)
        except socket.timeout:
            break
        got.append((d, a))
        want.discard(d)
    end = time.monotonic() + drain
    while time.monotonic() < end:
        sock.settimeout(max(0.01, end - time.monotonic()))
        try:
            got.append(sock.recvfrom(2048))
        except socket.timeout:
            break
    return got


def seen_from(net, inner, pub_sock, pub_host, tag):
    """The source (ip, port) pub_sock sees a datagram from inner come from."""
    inner.sendto(tag, (pub_host.addr, pub_sock.getsockname()[1]))
    got = recv_until(pub_sock, [tag], drain=0)
    assert [d for d, _ in got] == [tag], f"{tag} did not arrive at {pub_host}: {got}"
    return got[0][1]


def test_home_router_maps_endpoint_independently_and_filters_by_port(natnet):
    net = natnet()
    p1, p2, p3 = net.public_host("p1"), net.public_host("p2"), net.public_host("p3")
    a = net.site("a", kind="home")
    a1 = a.host("a1")
    s = net.udp(a1)
    r1, r1b, r2, r3 = net.udp(p1, 5000), net.udp(p1, 5001), net.udp(p2, 5000), net.udp(p3, 5000)

    m1 = seen_from(net, s, r1, p1, b"to-p1")
    m2 = seen_from(net, s, r2, p2, b"to-p2")
    # endpoint-independent mapping: one external ip:port for both destinations (and Linux keeps
    # the socket's own port)
    assert m1 == m2 == (a.wan_addr, s.getsockname()[1])

    # filtering: the same public host from another port, and a host never sent to, are dropped;
    # the two remote ip:ports the socket sent to get through
    r1b.sendto(b"other-port", m1)
    r3.sendto(b"stranger", m1)
    r1.sendto(b"reply-p1", m1)
    r2.sendto(b"reply-p2", m1)
    got = recv_until(s, [b"reply-p1", b"reply-p2"])
    assert sorted(d for d, _ in got) == [b"reply-p1", b"reply-p2"], got
    assert {a for _, a in got} == {(p1.addr, 5000), (p2.addr, 5000)}


def test_symmetric_router_maps_per_destination(natnet):
    net = natnet()
    p1, p2 = net.public_host("p1"), net.public_host("p2")
    b = net.site("b", kind="symmetric")
    s = net.udp(b.host("b1"))
    r1, r2 = net.udp(p1, 5000), net.udp(p2, 5000)
    m1 = seen_from(net, s, r1, p1, b"to-p1")
    m2 = seen_from(net, s, r2, p2, b"to-p2")
    assert m1[0] == m2[0] == b.wan_addr
    assert m1[1] != m2[1], f"one external port {m1[1]} for two destinations: not symmetric"
    # the mapping of a destination stays while it is in use
    assert seen_from(net, s, r1, p1, b"again") == m1
    # and the replies come back through each mapping
    r1.sendto(b"reply-p1", m1)
    r2.sendto(b"reply-p2", m2)
    assert sorted(d for d, _ in recv_until(s, [b"reply-p1", b"reply-p2"])) == [b"reply-p1",
                                                                              b"reply-p2"]


def test_double_nat_outward_and_no_hairpin_behind_one_carrier(natnet):
    net = natnet()
    p1 = net.public_host("p1")
    isp = net.cgnat("isp")
    b, d = net.site("b", behind=isp), net.site("d", behind=isp)
    assert b.wan_addr.startswith("100.64.") and d.wan_addr.startswith("100.64.")
    sb, sd = net.udp(b.host("b1")), net.udp(d.host("d1"))
    r1 = net.udp(p1, 5000)

    # outward: the public host sees the carrier's address (not the home routers' 100.64 ones), the
    # source port kept by both NATs, and its replies come back through both
    eb = seen_from(net, sb, r1, p1, b"from-b1")
    ed = seen_from(net, sd, r1, p1, b"from-d1")
    assert eb == (isp.wan_addr, sb.getsockname()[1])
    assert ed == (isp.wan_addr, sd.getsockname()[1])
    r1.sendto(b"reply", eb)
    assert [x for x, _ in recv_until(sb, [b"reply"], drain=0)] == [b"reply"]

    # hairpinning: both send to the other's carrier-external ip:port at once (a hole punch),
    # five rounds; nothing arrives — the carrier delivers packets for its own address locally
    got_b, got_d = [], []
    for i in range(5):
        sb.sendto(b"hairpin-b%d" % i, ed)
        sd.sendto(b"hairpin-d%d" % i, eb)
        got_b += recv_until(sb, [], timeout=0, drain=0.1)
        got_d += recv_until(sd, [], timeout=0, drain=0.1)
    assert got_b == [] and got_d == [], f"the carrier hairpinned: {got_b} {got_d}"

    # the same hole punch to the home routers' 100.64 WAN addresses (the ports kept, as above)
    # gets through: the hosts reach each other inside the carrier's network
    ib, id_ = (b.wan_addr, sb.getsockname()[1]), (d.wan_addr, sd.getsockname()[1])
    sb.sendto(b"punch-b", id_)
    sd.sendto(b"punch-d", ib)
    sb.sendto(b"inside-b", id_)
    sd.sendto(b"inside-d", ib)
    assert b"inside-b" in [x for x, _ in recv_until(sd, [b"inside-b"], drain=0)]
    assert b"inside-d" in [x for x, _ in recv_until(sb, [b"inside-d"], drain=0)]


def mappings(net, h, site):
    r = net.run(h, ["upnpc", "-u", f"http://{site.lan_gw}:{site.upnp_http_port}/rootDesc.xml",
                    "-l"])
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def check_mapping(net, site, h, inner, ext_port, pub, tag):
    """A public host reaches inner through site's public address and ext_port."""
    q = net.udp(pub)
    try:
        q.sendto(tag, (site.wan_addr, ext_port))
        got = recv_until(inner, [tag], drain=0)
        assert [d for d, _ in got] == [tag], f"{tag} not forwarded: {got}\n{net.nft(site)}"
        assert got[0][1] == (pub.addr, q.getsockname()[1])
    finally:
        q.close()


def check_unmapped(net, site, inner, ext_port, pub):
    """A fresh public socket (no conntrack entry left from before) no longer gets through."""
    q = net.udp(pub)
    try:
        for i in range(3):
            q.sendto(b"after-delete", (site.wan_addr, ext_port))
        got = recv_until(inner, [], timeout=0, drain=1.0)
        assert got == [], f"forwarded after the mapping was deleted: {got}"
    finally:
        q.close()
    assert f"dport {ext_port} " not in net.nft(site)


def test_upnp_router_maps_ports_for_natpmpc_and_upnpc(natnet):
    net = natnet()
    pub = net.public_host("p1")
    u = net.site("u", kind="upnp")
    h = u.host("u1")
    s1, s2 = net.udp(h, 40000), net.udp(h, 40001)

    # before any mapping the public host cannot reach the LAN socket
    check_unmapped(net, u, s1, 41000, pub)

    # NAT-PMP: natpmpc finds the gateway from the default route
    r = net.run(h, ["natpmpc", "-a", "41000", "40000", "udp", "120"])
    assert r.returncode == 0 and "Mapped public port 41000 protocol UDP to local port 40000" in \
        r.stdout, r.stdout + r.stderr
    assert f"Public IP address : {u.wan_addr}" in r.stdout
    check_mapping(net, u, h, s1, 41000, pub, b"via-natpmp")
    r = net.run(h, ["natpmpc", "-a", "41000", "40000", "udp", "0"])  # lifetime 0: delete
    assert r.returncode == 0, r.stdout + r.stderr
    check_unmapped(net, u, s1, 41000, pub)

    # UPnP IGD: upnpc discovers the router by SSDP on the LAN
    r = net.run(h, ["upnpc", "-a", h.addr, "40001", "42000", "UDP"])
    assert r.returncode == 0 and f"external {u.wan_addr}:42000 UDP is redirected to internal " \
        f"{h.addr}:40001" in r.stdout, r.stdout + r.stderr
    assert f"UDP 42000->{h.addr}:40001" in mappings(net, h, u)
    check_mapping(net, u, h, s2, 42000, pub, b"via-upnp")
    r = net.run(h, ["upnpc", "-u", f"http://{u.lan_gw}:{u.upnp_http_port}/rootDesc.xml",
                    "-d", "42000", "UDP"])
    assert r.returncode == 0 and "UPNP_DeletePortMapping() returned : 0" in r.stdout, r.stdout
    assert "42000->" not in mappings(net, h, u)
    check_unmapped(net, u, s2, 42000, pub)


def test_coturn_reports_the_routers_public_address(natnet):
    net = natnet()
    turn_host = net.public_host("turn")
    a = net.site("a", kind="home")
    a1 = a.host("a1")
    turn = net.coturn(turn_host, "mesh", "s3cret", "mesh.test")
    s = net.udp(a1, timeout=1.0)
    # STUN: the NATed host learns its router's public address and its (kept) port
    assert stun_binding(s, (turn.addr, turn.port)) == (a.wan_addr, s.getsockname()[1])
    # TURN with long-term credentials: 401 first, then a relayed address on the TURN host;
    # a wrong password is refused
    got = turn_allocate(s, (turn.addr, turn.port), "mesh", "s3cret")
    assert got is not None, turn.log()[-2000:]
    assert got["first"] == 401 and got["realm"] == "mesh.test", got
    assert got["error"] is None, (got, turn.log()[-2000:])
    assert got["relayed"][0] == turn_host.addr and got["mapped"] == (a.wan_addr,
                                                                      s.getsockname()[1])
    s2 = net.udp(a1, timeout=1.0)
    bad = turn_allocate(s2, (turn.addr, turn.port), "mesh", "wrong")
    assert bad["first"] == 401 and bad["relayed"] is None and bad["error"] == 401, bad


def test_upnp_router_behind_a_carrier_refuses_mappings(natnet):
    # miniupnpd will not map ports when its WAN address is private/reserved (100.64.0.0/10 here),
    # like a real UPnP router behind CGNAT: a client must fall back to another way in
    net = natnet()
    u = net.site("u", kind="upnp", behind=net.cgnat("isp"))
    h = u.host("u1")
    r = net.run(h, ["natpmpc", "-a", "41000", "40000", "udp", "120"])
    # the public address request is answered 3 "network failure" (libnatpmp's -52): the router
    # has no public address to give
    assert r.returncode != 0 and "readnatpmpresponseorretry returned -52 (FAILED)" in r.stdout \
        and "Mapped public port" not in r.stdout, r.stdout + r.stderr
    assert "dnat" not in net.nft(u)
    why = f"Reserved / private IP address {u.wan_addr} on ext interface wan"
    assert why in u.upnp_output()


def test_ipv6_is_routed_without_nat_behind_a_stateful_firewall(natnet):
    """NatNet(ipv6=True): a site host's IPv6 address is its own on the internet (no NAT: seen from
    itself), the router lets in only replies (unasked datagrams from the internet are dropped), a
    simultaneous send between two firewalled hosts gets through (a hole punch opens both), and
    IPv4 is NATed as before."""
    net = natnet(ipv6=True)
    p1 = net.public_host("p1")
    a, b = net.site("a", kind="symmetric"), net.site("b", kind="home")
    a1, b1 = a.host("a1"), b.host("b1")
    assert p1.addr6 and a1.addr6 and b1.addr6 and a1.addr6 != b1.addr6
    assert a1.addr6.startswith(a.lan6 + "::"), (a1.addr6, a.lan6)
    r = net.udp6(p1, 5000)
    s = net.udp6(a1)
    s.sendto(b"v6-out", (p1.addr6, 5000))
    got = recv_until(r, [b"v6-out"], drain=0)
    assert [d for d, _ in got] == [b"v6-out"], got
    src = got[0][1]
    assert (src[0], src[1]) == (a1.addr6, s.getsockname()[1])  # no translation
    # the reply gets back in; the same host from another port does not
    r.sendto(b"v6-reply", src[:2])
    r2 = net.udp6(p1, 5001)
    r2.sendto(b"v6-unasked", src[:2])
    got = recv_until(s, [b"v6-reply"])
    assert [d for d, _ in got] == [b"v6-reply"], got
    # a host the site never sent to is dropped at the router
    sb = net.udp6(b1)
    sb.sendto(b"b-to-a-first", (a1.addr6, s.getsockname()[1]))
    got = recv_until(s, [], timeout=0.5, drain=0.5)
    assert got == [], got
    # both send at once (a hole punch): each one's own datagram opened its firewall for the other
    s.sendto(b"a-to-b", (b1.addr6, sb.getsockname()[1]))
    sb.sendto(b"b-to-a", (a1.addr6, s.getsockname()[1]))
    assert [d for d, _ in recv_until(s, [b"b-to-a"], drain=0)] == [b"b-to-a"]
    assert b"a-to-b" in [d for d, _ in recv_until(sb, [b"a-to-b"], drain=0)]
    # IPv4 still leaves through the NAT: the public host sees the router's address
    r4 = net.udp(p1, 5002)
    s4 = net.udp(b1)
    assert seen_from(net, s4, r4, p1, b"v4")[0] == b.wan_addr
    for x in (r, r2, s, sb, r4, s4):
        x.close()

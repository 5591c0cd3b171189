"""STUN Binding and the TURN client (src/core/stun.h, src/core/turn_client.h) against Debian's real
coturn on 127.0.0.1, through mesh-turn-probe (tests/tools/turn_probe.c) on a real UDP socket:
the reflexive address, an allocation with long-term credentials, a wrong password's 401, data
relayed both ways as ChannelData and as Send/Data indications, a peer without a permission
dropped by the server, a stale nonce (438) answered, and the allocation deleted on SIGTERM.
Traffic only on 127.0.0.0/8."""
import os
import socket

import pytest

from harness.coturn import (PASSWORD, PROBE, TURNSERVER, USER, addr_of, coturn_factory,  # noqa: F401
                            probes)
from harness.node import wait_for

pytestmark = [
    pytest.mark.skipif(TURNSERVER is None, reason="coturn (turnserver) not installed: scripts/deps.sh test"),
    pytest.mark.skipif(not os.access(PROBE, os.X_OK), reason="mesh-turn-probe not built"),
]


@pytest.fixture
def peer():
    """The test's peer: a UDP socket on 127.0.0.1."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    s.settimeout(5)
    yield s
    s.close()


def peer_str(s):
    host, port = s.getsockname()
    return f"{host}:{port}"


def echo_round(sock, relayed, payload):
    """Sends payload to the relayed address; returns what comes back and from where."""
    sock.sendto(payload, relayed)
    data, src = sock.recvfrom(4096)
    return data, src


def test_stun_binding_returns_the_probes_address(coturn_factory, probes):  # noqa: F811
    srv = coturn_factory()
    p = probes("stun", srv.addr)
    local = addr_of(p.expect("local "))
    mapped = addr_of(p.expect("mapped "))
    assert mapped == local and mapped[0] == "127.0.0.1" and mapped[1] != srv.port
    rc, _ = p.rest()
    assert rc == 0


def test_allocation_and_channel_data_echo(coturn_factory, probes, peer):  # noqa: F811
    srv = coturn_factory()
    p = probes("turn", srv.addr, USER, PASSWORD, peer_str(peer))
    local = addr_of(p.expect("local "))
    relayed = addr_of(p.expect("relayed "))
    assert relayed[0] == "127.0.0.1" and relayed[1] not in (srv.port, local[1])
    assert addr_of(p.expect("mapped ")) == local
    assert addr_of(p.expect("permission ")) == peer.getsockname()
    chan = p.expect("channel ")
    assert addr_of(chan) == peer.getsockname() and 0x4000 <= int(chan.split()[2], 16) <= 0x7FFF
    # sizes around the 4-byte ChannelData padding, and a larger datagram
    for payload in (b"x", b"ping-2", b"abc", b"four", os.urandom(1200)):
        data, src = echo_round(peer, relayed, payload)
        assert data == payload and src == relayed
        line = p.expect("echo ")
        assert line == f"echo {len(payload)} in=channel out=channel", line
    p.stop()
    rc, lines = p.rest()
    assert rc == 0 and lines[-1] == "deallocated"


def test_send_and_data_indications_without_a_channel(coturn_factory, probes, peer):  # noqa: F811
    srv = coturn_factory()
    p = probes("turn", srv.addr, USER, PASSWORD, peer_str(peer), "--no-channel")
    relayed = addr_of(p.expect("relayed "))
    p.expect("permission ")
    for payload in (b"hello over indications", os.urandom(700)):
        data, src = echo_round(peer, relayed, payload)
        assert data == payload and src == relayed
        assert p.expect("echo ") == f"echo {len(payload)} in=data out=send"
    assert not any(line.startswith("channel ") for line in p.lines)


def test_wrong_password_fails_with_401(coturn_factory, probes, peer):  # noqa: F811
    srv = coturn_factory()
    p = probes("turn", srv.addr, USER, PASSWORD + "x", peer_str(peer))
    rc, lines = p.rest(timeout=30)
    assert rc == 1
    assert not any(line.startswith("relayed ") for line in lines), lines
    failed = [line for line in lines if line.startswith("failed:")]
    assert failed and "allocate: 401" in failed[0] and "password" in failed[0], lines


def test_peer_without_permission_is_dropped(coturn_factory, probes, peer):  # noqa: F811
    """Permissions are per IP address: 127.0.0.1 has one, 127.0.0.2 (also loopback) has none."""
    srv = coturn_factory()
    p = probes("turn", srv.addr, USER, PASSWORD, peer_str(peer))
    relayed = addr_of(p.expect("relayed "))
    p.expect("channel ")
    stranger = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        stranger.bind(("127.0.0.2", 0))
        stranger.sendto(b"from-a-stranger", relayed)  # 15 bytes, first
        data, _ = echo_round(peer, relayed, b"permitted")  # 9 bytes, after it
        assert data == b"permitted"
        # the probe echoes in arrival order: had coturn relayed the stranger's datagram, its
        # echo line would have come first
        assert p.expect("echo ") == "echo 9 in=channel out=channel"
        stranger.setblocking(False)
        with pytest.raises(BlockingIOError):
            stranger.recvfrom(4096)
    finally:
        stranger.close()
    assert not any(line.startswith("echo 15") for line in p.lines)


def test_stale_nonce_is_answered(coturn_factory, probes, peer):  # noqa: F811
    """coturn's nonces last 1 s here; the permission, asked 2.5 s after the allocation, meets a
    438 and is sent again with the new nonce."""
    srv = coturn_factory("stale-nonce=1")
    p = probes("turn", srv.addr, USER, PASSWORD, peer_str(peer), "--peer-delay", "2500")
    relayed = addr_of(p.expect("relayed "))
    perm = p.expect("permission ", timeout=20)
    assert int(perm.split("stale_retries=")[1]) >= 1, perm
    p.expect("channel ")
    data, _ = echo_round(peer, relayed, b"after-438")
    assert data == b"after-438"


def test_sigterm_deletes_the_allocation(coturn_factory, probes, peer):  # noqa: F811
    """With one allocation per user, a second one is refused (486) while the first lives and is
    granted once the first probe deallocated on SIGTERM (undeleted, it would hold for its 600 s
    lifetime; the polling below gives it 20 s)."""
    srv = coturn_factory("user-quota=1")
    first = probes("turn", srv.addr, USER, PASSWORD, peer_str(peer))
    first.expect("relayed ")
    second = probes("turn", srv.addr, USER, PASSWORD, peer_str(peer))
    rc, lines = second.rest(timeout=30)
    assert rc == 1 and any("allocate: 486" in line for line in lines), lines
    first.stop()
    rc, lines = first.rest()
    assert rc == 0 and lines[-1] == "deallocated", lines

    def allocates():
        p = probes("turn", srv.addr, USER, PASSWORD, peer_str(peer))
        p.expect("local ")
        line = p.q.get(timeout=30)
        if line and line.startswith("relayed "):
            return True
        assert line and "allocate: 486" in line, line
        p.rest()
        return False

    wait_for(allocates, timeout=20, interval=0.25, what="an allocation once the first was deleted")

"""Port mapping (src/net/portmap.c) against Debian's miniupnpd: a home router in network
namespaces (tests/harness/upnp_router.py: NAT gateway with nft masquerade, miniupnpd with NAT-PMP
and UPnP-IGD), a LAN host running mesh-portmap-probe (tests/tools/portmap_probe.c) and a public
host on the WAN side that sends datagrams to the mapped address."""
import os
import re
import signal
import time

import pytest

from harness.node import MESH_BIN
from harness.upnp_router import LAN_HOST, WAN_IP, UpnpRouter, available

WHY_NOT = available()
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=f"port mapping: {WHY_NOT}")

PROBE = os.path.join(os.path.dirname(MESH_BIN), "mesh-portmap-probe")
PORT = 9999
OTHER_HOST = "192.168.77.3"  # another LAN host (only its mapping exists)
MAPPED = re.compile(r"^mapped (\d+\.\d+\.\d+\.\d+):(\d+) via (natpmp|upnp)( private)?$")

# a UDP echo on the LAN host, apart from the probe: it outlives the probe, so a mapping left
# behind would still carry datagrams to it (bounded: 200 datagrams or 120 s)
ECHO = """
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.settimeout(1)
print("bound", flush=True)
end = time.monotonic() + 120
n = 0
while n < 200 and time.monotonic() < end:
    try:
        d, a = s.recvfrom(2048)
    except socket.timeout:
        continue
    s.sendto(d, a)
    n += 1
"""
# from the public host: up to 5 datagrams, 1 s each, to IP:PORT; prints "echo" at the first one
# answered, else "silent"
PING = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(1)
for i in range(5):
    s.sendto(b"ping %d" % i, (sys.argv[1], int(sys.argv[2])))
    try:
        d, a = s.recvfrom(2048)
    except socket.timeout:
        continue
    if d == b"ping %d" % i:
        print("echo", a[0], a[1])
        break
else:
    print("silent")
"""


@pytest.fixture
def router(tmp_path):
    r = UpnpRouter(tmp_path)
    yield r
    r.close()
    # a sanitizer build's probe reports memory errors and leaks on stderr: they fail the test
    for path in sorted(tmp_path.glob("probe*.stderr")):
        err = path.read_text()
        for marker in ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:"):
            if marker in err:
                i = err.index(marker)
                pytest.fail(f"sanitizer report from {path.name}:\n{err[max(0, i - 200):i + 3000]}")


def probe(router, *args):
    p = router.popen(router.lan, [PROBE, str(PORT), *args], "probe")
    assert p.wait_line(lambda l: l == f"started {PORT}", 10), p.stderr()
    return p


def wait_mapped(router, p, timeout=20):
    line = p.wait_line(lambda l: MAPPED.match(l) or l.startswith(("none", "lost")), timeout)
    assert line, f"no mapping line: {p.lines} {p.stderr()} {router.miniupnpd_log()[-2000:]}"
    m = MAPPED.match(line)
    assert m, f"{line}: {p.stderr()} {router.miniupnpd_log()[-2000:]}"
    return m.group(1), int(m.group(2)), m.group(3), bool(m.group(4))


def ping(router, ip, port):
    r = router.run(router.public, ["/usr/bin/python3", "-c", PING, ip, str(port)])
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def upnp_list(router):
    """miniupnpd's mapping table as the LAN host's upnpc lists it: [(proto, ext, int addr, int
    port, description)]."""
    r = router.run(router.lan, ["upnpc", "-l"])
    assert "ExternalIPAddress = " + WAN_IP in r.stdout, r.stdout + r.stderr
    rows = re.findall(r"^\s*\d+ (UDP|TCP)\s+(\d+)->([\d.]+):(\d+)\s+'([^']*)'", r.stdout, re.M)
    return [(proto, int(ext), addr, int(port), desc) for proto, ext, addr, port, desc in rows]


def stop_probe(p):
    p.p.send_signal(signal.SIGTERM)
    lines = p.rest(15)
    rc = p.p.wait(timeout=15)
    return lines, rc


def start_echo(router):
    e = router.popen(router.lan, ["/usr/bin/python3", "-c", ECHO, str(PORT)], "echo")
    assert e.wait_line(lambda l: l == "bound", 10), e.stderr()
    return e


def test_natpmp_mapping_carries_traffic_and_is_deleted(router):
    router.start_miniupnpd(natpmp=True, upnp=True)
    start_echo(router)
    p = probe(router)
    ip, ext, via, private = wait_mapped(router, p)
    # (1) NAT-PMP is asked first; the router's WAN address, the port asked for
    assert (ip, ext, via, private) == (WAN_IP, PORT, "natpmp", False)
    assert ("UDP", PORT, LAN_HOST, PORT) in [r[:4] for r in upnp_list(router)]
    assert f"port mapping: UDP {WAN_IP}:{PORT} → local {PORT} via NAT-PMP, lease 3600 s" in \
        p.stderr()
    # (2) a datagram from the internet side reaches the LAN host's socket and comes back
    assert ping(router, ip, ext) == f"echo {WAN_IP} {PORT}"
    # (3) stopped: deleted, and the router no longer forwards the port
    lines, rc = stop_probe(p)
    assert lines[-1] == "deleted" and rc == 0, (lines, p.stderr())
    assert upnp_list(router) == []
    assert f"dport {PORT}" not in router.redirects()
    assert ping(router, ip, ext) == "silent"


def test_upnp_when_natpmp_is_off(router):
    # (4) no NAT-PMP on the router: UPnP-IGD maps, with the probe's own socket echoing
    router.start_miniupnpd(natpmp=False, upnp=True)
    p = probe(router, "--echo")
    ip, ext, via, private = wait_mapped(router, p)
    assert (ip, ext, via, private) == (WAN_IP, PORT, "upnp", False)
    assert upnp_list(router) == [("UDP", PORT, LAN_HOST, PORT, "mesh-llm")]
    assert ping(router, ip, ext) == f"echo {WAN_IP} {PORT}"
    lines, rc = stop_probe(p)
    assert lines[-1] == "deleted" and rc == 0, (lines, p.stderr())
    assert "deleted UDP" in p.stderr()
    assert upnp_list(router) == []
    assert f"dport {PORT}" not in router.redirects()


@pytest.mark.parametrize("method", ["natpmp", "upnp"])
def test_taken_port_gets_another(router, method):
    # the external port asked for is taken by another LAN host: the router grants another one
    # (NAT-PMP: by itself; UPnP: ConflictInMappingEntry, then AddAnyPortMapping), which is what
    # the probe reports and what carries traffic
    router.start_miniupnpd(natpmp=method == "natpmp", upnp=True, secure=False)
    r = router.run(router.lan, ["upnpc", "-a", OTHER_HOST, str(PORT), str(PORT), "UDP"])
    assert upnp_list(router) == [("UDP", PORT, OTHER_HOST, PORT, "libminiupnpc")], r.stdout
    start_echo(router)
    p = probe(router)
    ip, ext, via, _ = wait_mapped(router, p)
    assert ip == WAN_IP and via == method and ext != PORT
    assert ping(router, ip, ext) == f"echo {WAN_IP} {ext}"
    lines, rc = stop_probe(p)
    assert lines[-1] == "deleted" and rc == 0
    assert upnp_list(router) == [("UDP", PORT, OTHER_HOST, PORT, "libminiupnpc")]


def test_renewal(router):
    # a lease of 6 s (miniupnpd allows 2 s and up here): renewed at half of it, twice within
    # the bound, the mapping still held and still carrying traffic after them
    router.start_miniupnpd(natpmp=True, upnp=True, min_lifetime=2)
    start_echo(router)
    p = probe(router, "--lease", "6", "--debug")
    ip, ext, via, _ = wait_mapped(router, p)
    assert (ip, ext, via) == (WAN_IP, PORT, "natpmp")
    end = time.monotonic() + 30
    while time.monotonic() < end and p.stderr().count("port mapping: renewed") < 2:
        time.sleep(0.2)
    assert p.stderr().count(f"port mapping: renewed UDP {WAN_IP}:{PORT} via NAT-PMP") >= 2, \
        p.stderr()
    assert ping(router, ip, ext) == f"echo {WAN_IP} {PORT}"
    assert p.wait_line(lambda l: l.startswith(("lost", "none")), 0) is None
    lines, rc = stop_probe(p)
    assert lines[-1] == "deleted" and rc == 0


@pytest.mark.parametrize("rounds", [None, 1])
def test_no_router(router, rounds):
    # (5) no miniupnpd: one round (NAT-PMP to the gateway, UPnP discovery) answers nothing; the
    # probe says so once ("none", an info line, no warning) and stops cleanly; with one round
    # allowed it gives up at once and still says "none"
    p = probe(router, "--debug", *(["--rounds", str(rounds)] if rounds else []))
    assert p.wait_line(lambda l: l == "none", 20), (p.lines, p.stderr())
    assert not [l for l in p.lines if MAPPED.match(l)]
    err = p.stderr()
    if rounds == 1:
        assert "INFO  portmap: port mapping: no router answered in 1 rounds; giving up" in err
    else:
        assert "INFO  portmap: port mapping: no router answered NAT-PMP or UPnP" in err, err
    assert "WARN" not in err
    lines, rc = stop_probe(p)
    assert lines == [f"started {PORT}", "none", "deleted"] and rc == 0, (lines, p.stderr())


def test_stop_while_mapping(router):
    # SIGTERM while the UPnP attempt is in the threadpool (NAT-PMP off: its attempt failed; the
    # SSDP search waits 4 s, a wide window): the stop's done comes at its 2 s bound ("deleted"),
    # the attempt's mapping is still deleted after it (the process lives until its last job
    # returns), and it is never reported
    router.start_miniupnpd(natpmp=False, upnp=True)
    p = probe(router, "--debug", "--discover-ms", "8000")
    end = time.monotonic() + 15
    while time.monotonic() < end and "natpmp attempt failed" not in p.stderr():
        time.sleep(0.05)
    assert "natpmp attempt failed" in p.stderr(), p.stderr()
    lines, rc = stop_probe(p)
    assert lines == [f"started {PORT}", "deleted"] and rc == 0, (lines, p.stderr())
    err = p.stderr()
    assert "stop not done within 2000 ms" in err, err
    assert err.index("stop not done within") < err.index(f"deleted UDP {WAN_IP}:{PORT} via UPnP")
    assert upnp_list(router) == []


def test_router_gone_mapping_lost(router):
    # the router stops answering (miniupnpd stopped) while a 6 s lease is held: the renewals
    # fail until the lease would run out, the mapping is reported lost, and the next round
    # finds no router
    router.start_miniupnpd(natpmp=True, upnp=True, min_lifetime=2)
    p = probe(router, "--lease", "6", "--debug")
    ip, ext, via, _ = wait_mapped(router, p)
    assert (ip, ext, via) == (WAN_IP, PORT, "natpmp")
    router.stop_miniupnpd()
    assert p.wait_line(lambda l: l == "none", 30), (p.lines, p.stderr())
    assert p.lines == [f"started {PORT}", f"mapped {WAN_IP}:{PORT} via natpmp", "lost via natpmp",
                       "none"], p.lines
    assert f"port mapping: UDP {WAN_IP}:{PORT} via NAT-PMP lost" in p.stderr()
    lines, rc = stop_probe(p)
    assert lines[-1] == "deleted" and rc == 0


def test_external_address_change(router):
    # the router's WAN address changes while mapped: the next renewal reports the new one,
    # and it carries traffic
    new_ip = WAN_IP.rsplit(".", 1)[0] + ".5"
    router.start_miniupnpd(natpmp=True, upnp=True, min_lifetime=2)
    start_echo(router)
    p = probe(router, "--lease", "6")
    assert wait_mapped(router, p)[:3] == (WAN_IP, PORT, "natpmp")
    for verb, addr in (("del", WAN_IP), ("add", new_ip)):
        r = router.run(router.router, ["ip", "addr", verb, f"{addr}/24", "dev", "wan0"])
        assert r.returncode == 0, r.stderr
    line = p.wait_line(lambda l: l.startswith(f"mapped {new_ip}:"), 20)
    assert line == f"mapped {new_ip}:{PORT} via natpmp", (p.lines, p.stderr())
    assert ping(router, new_ip, PORT) == f"echo {new_ip} {PORT}"
    lines, rc = stop_probe(p)
    assert lines[-1] == "deleted" and rc == 0

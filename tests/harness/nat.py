"""A small internet of network namespaces with real Linux NATs (nftables) for NAT-traversal tests:
public hosts, private sites behind home / symmetric / UPnP routers, double NAT behind a carrier-
grade NAT, and a STUN/TURN server (Debian's coturn) on a public host.

    with NatNet() as net:                       # in a test: net = natnet() (harness/fixtures.py)
        seed = net.public_host("seed")          # 11.0.0.10 on the public segment
        a = net.site("a", kind="home")          # router: WAN 11.0.0.11, LAN 192.168.1.0/24
        a1 = a.host("a1")                       # 192.168.1.10, default route via 192.168.1.1
        isp = net.cgnat("isp")                  # WAN 11.0.0.12, inside 100.64.0.1/10
        b = net.site("b", kind="home", behind=isp)   # WAN 100.64.0.10, LAN 192.168.2.0/24
        b1 = b.host("b1")                       # 192.168.2.10; seen from 11.0.0.12 outside
        s = net.udp(a1)                         # a UDP socket made inside a1's namespace
        net.run(a1, ["natpmpc"])                # subprocess.run inside a1's namespace
        turn = net.coturn(seed, "user", "secret", "mesh.test")  # turnserver on 11.0.0.10:3478

Addresses on a segment are handed out in creation order from .10 (public hosts and routers share
the public segment); read them from the objects (h.addr, site.wan_addr), do not hard-code them.

The topology:
  * the public segment: a bridge in namespace PREFIX-pub, 11.0.0.0/24 (its gateway 11.0.0.1 is
    that namespace: the "internet core", which forwards nothing). Public hosts and the routers' WAN
    sides are on it. Every namespace's default route points at its gateway; public hosts have no
    route to any private LAN, and nothing leaves to the real network: every veth is created with
    both ends inside this net's namespaces, none in this machine's own.
    Why not 203.0.113.0/24: miniupnpd refuses to map ports when its WAN address is private or
    reserved (the RFC 5737 documentation ranges included), and address-discovery code may
    rightly treat documentation addresses as non-global. NatNet(public_net="203.0.113") works
    for everything but UPnP.
  * a site: a router namespace (interface "wan" on the public segment, or on a carrier's inside
    segment; a bridge "lan0" = 192.168.K.1/24, K = 1, 2, ... per site) and hosts on the LAN
    (interface eth0, 192.168.K.10, .11, ...). Router kinds (nftables, table inet "mesh" in the
    router's namespace):
      home      `masquerade` on wan: endpoint-independent mapping (Linux keeps the source port when
                it is free: the same external ip:port whatever the destination) with address-and-
                port-dependent filtering (conntrack lets back only replies from the exact remote
                ip:port the host sent to): a "port-restricted cone" NAT.
      symmetric `masquerade fully-random`: every new flow (each destination ip:port) gets a
                random external port: address-and-port-dependent mapping.
      upnp      home plus miniupnpd 2.3 (UPnP IGD + NAT-PMP on lan0, HTTP port 5555, secure mode,
                its config, lease and log in a temp dir, foreground (-d), stopped by pid). Its
                chains are in the router's table inet "mesh": forward jumps to "miniupnpd", nat
                prerouting/postrouting jump to "prerouting_miniupnpd"/"postrouting_miniupnpd"
                (the names miniupnpd's nftables backend expects; it adds dnat + accept rules there
                and removes them when a mapping is deleted or it stops).
    On every router the forward chain drops what comes in on wan unless it is established/related
    (or accepted by miniupnpd's chain), and the input chain drops new TCP/UDP flows arriving on wan
    for the router itself: a dropped packet's conntrack entry is never confirmed, so an early hole
    punch from a peer leaves nothing that would clash with (and move) the host's own mapping.
  * IPv6 (NatNet(ipv6=True)): the public segment also has 2001:db8:ff::/64 (the core ::1, routing
    IPv6 between the public segment and the sites), and every site on the public segment a routed
    2001:db8:K::/64 on its LAN: no NAT (the routers masquerade IPv4 only), but the same forward
    filter, which lets in only replies: a home router's IPv6 firewall (address-and-port-dependent
    filtering). Members get PREFIX::N with the N of their IPv4 address (host.addr6). Sites behind
    a carrier get no IPv6, like many carriers' customers.
  * a carrier (net.cgnat): a router namespace with wan on the public segment and a bridge "cgn0",
    100.64.0.1/10, inside; sites created with behind=carrier get WAN addresses 100.64.0.10, .11,
    ... on it; carrier.host(name) puts a host directly on it (one NAT, like a phone on a mobile
    carrier). The carrier NATs like a home router.

Measured (tests/integration/test_nat_harness.py; kernel 6.18, nftables 1.0.6, miniupnpd 2.3.1,
coturn 4.6.1):
  * home: one socket sending to two public hosts is seen from one ip:port, the router's WAN
    address and the socket's own port. Only the exact remote ip:ports it sent to get back in; the
    same public host from another port, and a host never sent to, are dropped.
  * symmetric: the same socket is seen from a different external port per destination (and the
    same one again for the same destination).
  * double NAT: a host behind home-behind-carrier is seen from the carrier's public address, with
    its own port kept through both NATs; replies come back.
  * hairpinning: NO. Two hosts behind the same carrier cannot reach each other's carrier-external
    ip:port, even with both sending at once (a hole punch): the carrier takes packets for its own
    address as local (no conntrack entry matches, no DNAT rule) and nothing listens. Sending to
    each other's home-router WAN address (100.64.0.x and the kept port) at once does get through.
  * IPv6 (test_ipv6_is_routed_without_nat_behind_a_stateful_firewall): a site host is seen from
    its own address and port; only replies get back in (an unasked datagram, even from a host it
    talks to on another port, is dropped); two firewalled hosts sending to each other at once
    get through; IPv4 is still NATed.
  * a upnp router behind a carrier refuses every mapping (its WAN address is in 100.64.0.0/10):
    NAT-PMP answers "network failure", miniupnpd logs "Reserved / private IP address".
  * coturn answers a STUN binding request from a NATed host with the router's public ip:port
    (XOR-MAPPED-ADDRESS), and a TURN Allocate with long-term credentials: 401 with the realm and a
    nonce first, then a relayed address on the TURN host's address; a wrong password gets 401.

API:
  NatNet(prefix=None, public_net="11.0.0", ipv6=False)   context manager; close() stops every process it
                                      started (by pid) and deletes its namespaces; idempotent
  net.public_host(name) -> Host       a host with a public address (also the "no NAT" case)
  net.cgnat(name) -> Carrier          .wan_addr, .public_addr, .inside_addr, .router_ns, .host()
  net.site(name, kind="home", behind=None) -> Site   kind: "home" | "symmetric" | "upnp"
  site.host(name) -> Host             a host on the site's LAN
  site.wan_addr                       the router's WAN address (public; 100.64.x behind a carrier)
  site.public_addr                    what the internet sees (the carrier's address when behind one)
  site.lan_gw, .router_ns, .kind, .hosts, .behind; upnp: .upnp (Popen), .upnp_http_port,
                                      .upnp_output() (miniupnpd's log so far)
  host.name, host.ns, host.addr, host.gw, host.site (None for public hosts), host.addr6 (None
                                      without IPv6); site.lan6, site.wan_addr6 (IPv6 prefix, WAN)
  net.run(h, argv, **kw)              subprocess.run inside h's namespace (text, output captured,
                                      timeout 60 s unless given)
  net.popen(h, argv, **kw)            subprocess.Popen inside h's namespace (ip netns exec execs
                                      argv: the pid is the program's); stopped on close
  net.wrap(h, argv)                   ["ip", "netns", "exec", h.ns, *argv]
  net.socket(h, type=SOCK_DGRAM)      an unbound IPv4 socket made inside h's namespace
  net.udp(h, port=0, addr="0.0.0.0", timeout=5.0)   a bound UDP socket inside h's namespace
  net.udp6(h, port=0, timeout=5.0)    a UDP socket bound to h.addr6 inside h's namespace
  net.connect(h, (ip, port), timeout=30.0)          a TCP socket connected from inside h
  net.coturn(h, user, password, realm, port=3478, extra=()) -> Turn
                                      turnserver on h.addr (long-term credentials, UDP+TCP, no
                                      TLS/DTLS, no CLI, relay ports 49152-49999, config/pid/log
                                      in a temp dir, foreground); returns once it answers STUN.
                                      Turn: .addr, .port, .pid, .proc, .conf_path, .log()
  net.nft(site_or_carrier_or_host)    `nft list ruleset` of its namespace (diagnostics)
  stun_binding(sock, (ip, port))      XOR-MAPPED-ADDRESS (ip, port), or None without an answer
  turn_allocate(sock, (ip, port), user, password)   a TURN Allocate with long-term credentials
  available()                         why NAT networks cannot run here, or None

Needs root (ip netns, veth, bridges, nftables). Names are PREFIX-role with a per-process
prefix (nat<pid>x<n>), so parallel runs do not collide.
"""
import ctypes
import hashlib
import hmac
import os
import secrets
import shutil
import socket
import struct
import subprocess
import tempfile
import threading
import time

from harness.netimp import CLONE_NEWNET, _ip, _libc, ns_connect

# the public segment: a globally routable-looking prefix, not a documentation one (203.0.113/24):
# miniupnpd refuses to map ports when its WAN address is reserved or private (RFC 5737 ranges
# included), and address-discovery code may rightly treat documentation addresses as non-global.
# Nothing leaves the namespaces, so no real 11.0.0.0/24 host is ever reached.
PUBLIC_NET = "11.0.0"
CGN_GW = "100.64.0.1"
IPV6_BASE = "2001:db8"  # NatNet(ipv6=True): the public segment 2001:db8:ff::/64, site K 2001:db8:K::/64
_counter = [0]
_counter_lock = threading.Lock()


def available():
    """Why NAT networks cannot run here, or None when they can."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, veth, bridges, nftables)"
    for tool in ("ip", "nft"):
        if not shutil.which(tool):
            return f"{tool} is not installed"
    try:
        name = f"nat_probe{os.getpid()}"
        _ip("netns", "add", name)
        _ip("netns", "del", name)
    except (RuntimeError, FileNotFoundError) as e:
        return f"cannot create network namespaces: {e}"
    return None


def _in_ns(ns, fn):
    """fn() run on a short-lived thread that joined namespace ns (setns affects only the calling
    thread; a socket keeps the namespace it was made in)."""
    box = {}

    def run():
        try:
            fd = os.open(f"/run/netns/{ns}", os.O_RDONLY)
            try:
                if _libc.setns(fd, CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), f"setns {ns}")
            finally:
                os.close(fd)
            box["v"] = fn()
        except BaseException as e:  # reported to the caller
            box["e"] = e

    t = threading.Thread(target=run)
    t.start()
    t.join()
    if "e" in box:
        raise box["e"]
    return box["v"]


class Host:
    def __init__(self, name, ns, addr, gw, site=None, addr6=None):
        self.name, self.ns, self.addr, self.gw, self.site = name, ns, addr, gw, site
        self.addr6 = addr6  # its IPv6 address on NatNet(ipv6=True), else None

    def __repr__(self):
        return f"Host({self.name} {self.addr} in {self.ns})"


class _Segment:
    """A bridge in namespace ns with the gateway address gw/plen; members get .first, .first+1...
    v6: an IPv6 /64 prefix ("2001:db8:1") on it too: the gateway PREFIX::1, members PREFIX::N with
    the same N as their IPv4 address."""

    def __init__(self, net, ns, bridge, base, gw, plen, first, v6=None):
        self.net, self.ns, self.bridge = net, ns, bridge
        self.base, self.gw, self.plen = base, gw, plen
        self.v6 = v6
        self.gw6 = f"{v6}::1" if v6 else None
        self.next = first
        self.ports = 0
        self.last6 = None
        _ip("-n", ns, "link", "add", bridge, "type", "bridge", "forward_delay", "0")
        _ip("-n", ns, "addr", "add", f"{gw}/{plen}", "dev", bridge)
        if v6:
            _ip("-n", ns, "addr", "add", f"{self.gw6}/64", "dev", bridge, "nodad")
        _ip("-n", ns, "link", "set", bridge, "up")

    def attach(self, member_ns, ifname):
        """A veth from member_ns (named ifname there) to this bridge; returns the member's address
        (configured, with a default route via the gateway)."""
        addr = f"{self.base}.{self.next}"
        self.next += 1
        assert self.next < 255
        self.ports += 1
        port = f"p{self.ports}"
        _ip("link", "add", port, "netns", self.ns, "type", "veth", "peer", "name", ifname,
            "netns", member_ns)
        _ip("-n", self.ns, "link", "set", port, "master", self.bridge)
        _ip("-n", self.ns, "link", "set", port, "up")
        _ip("-n", member_ns, "addr", "add", f"{addr}/{self.plen}", "dev", ifname)
        self.last6 = None
        if self.v6:
            self.last6 = f"{self.v6}::{addr.rsplit('.', 1)[1]}"
            _ip("-n", member_ns, "addr", "add", f"{self.last6}/64", "dev", ifname, "nodad")
        _ip("-n", member_ns, "link", "set", ifname, "up")
        _ip("-n", member_ns, "route", "add", "default", "via", self.gw)
        if self.v6:
            _ip("-n", member_ns, "-6", "route", "add", "default", "via", self.gw6)
        self.net._wait_up(member_ns, ifname)
        return addr


NAT_RULES = {
    "home": "masquerade",
    "upnp": "masquerade",
    "symmetric": "masquerade fully-random",
}


def _ruleset(kind, lan_if, upnp=False):
    """The router's nftables: NAT out of wan, a forward filter that lets in only replies (and, on a
    UPnP router, what miniupnpd's chain accepts), and an input filter that drops new TCP/UDP flows
    arriving on wan for the router itself. The last matters for hole punching: a dropped packet's
    conntrack entry is never confirmed, so the router keeps no entry for a peer's early punch that
    would later clash with (and move) the host's own outgoing mapping to that peer."""
    jump_fwd = "        jump miniupnpd\n" if upnp else ""
    jump_pre = "        jump prerouting_miniupnpd\n" if upnp else ""
    jump_post = "        jump postrouting_miniupnpd\n" if upnp else ""
    upnp_chains = ("    chain miniupnpd {\n    }\n    chain prerouting_miniupnpd {\n    }\n"
                   "    chain postrouting_miniupnpd {\n    }\n") if upnp else ""
    return f"""table inet mesh {{
    chain forward {{
        type filter hook forward priority 0; policy drop;
        ct state established,related accept
        iifname "{lan_if}" accept
{jump_fwd}    }}
    chain input {{
        type filter hook input priority 0; policy accept;
        iifname "wan" ct state new meta l4proto {{ tcp, udp }} drop
    }}
    chain prerouting {{
        type nat hook prerouting priority -100; policy accept;
{jump_pre}    }}
    chain postrouting {{
        type nat hook postrouting priority 100; policy accept;
{jump_post}        oifname "wan" meta nfproto ipv4 {NAT_RULES[kind]}
    }}
{upnp_chains}}}
"""


class _Router:
    def _router_setup(self, net, ns):
        net._add_ns(ns)
        for key in ("net.ipv4.ip_forward=1", "net.ipv4.conf.all.rp_filter=0",
                    "net.ipv4.conf.default.rp_filter=0", "net.ipv6.conf.all.forwarding=1"):
            net._exec(ns, ["sysctl", "-qw", key])


class Carrier(_Router):
    """A carrier-grade NAT: wan on the public segment, 100.64.0.1/10 inside (bridge cgn0)."""

    def __init__(self, net, name):
        self.net, self.name, self.kind = net, name, "cgnat"
        self.router_ns = net._name(f"{name}-r")
        self._router_setup(net, self.router_ns)
        self.wan_addr = net._public.attach(self.router_ns, "wan")
        self.public_addr = self.wan_addr
        self.inside_addr = CGN_GW
        self.segment = _Segment(net, self.router_ns, "cgn0", "100.64.0", CGN_GW, 10, 10)
        net._nft(self.router_ns, _ruleset("home", "cgn0"))
        self.sites = []
        self.hosts = []

    def host(self, name):
        """A host directly on the carrier's inside network (a 100.64 address, like a phone on a
        mobile carrier): one NAT, the carrier's."""
        ns = self.net._name(name)
        self.net._add_ns(ns)
        addr = self.segment.attach(ns, "eth0")
        h = Host(name, ns, addr, CGN_GW, site=self)
        self.hosts.append(h)
        return h


class Site(_Router):
    def __init__(self, net, name, kind, index, behind):
        if kind not in NAT_RULES:
            raise ValueError(f"unknown router kind {kind!r} (home, symmetric, upnp)")
        self.net, self.name, self.kind, self.behind = net, name, kind, behind
        self.router_ns = net._name(f"{name}-r")
        self.lan_net = f"192.168.{index}"
        self.lan_gw = f"{self.lan_net}.1"
        self.hosts = []
        self.upnp = None
        self.upnp_http_port = None
        self.upnp_log = None
        self._router_setup(net, self.router_ns)
        up = behind.segment if behind is not None else net._public
        self.wan_addr = up.attach(self.router_ns, "wan")
        self.public_addr = behind.public_addr if behind is not None else self.wan_addr
        # IPv6: a routed /64 per site on the public segment (no NAT: the router's forward filter
        # lets in only replies, like a home router's IPv6 firewall); none behind a carrier
        self.wan_addr6 = up.last6 if behind is None else None
        self.lan6 = f"{net.ipv6_base}:{index}" if self.wan_addr6 else None
        self.lan = _Segment(net, self.router_ns, "lan0", self.lan_net, self.lan_gw, 24, 10,
                            v6=self.lan6)
        if self.lan6:
            _ip("-n", net.core_ns, "-6", "route", "add", f"{self.lan6}::/64", "via",
                self.wan_addr6)
        net._nft(self.router_ns, _ruleset(kind, "lan0", upnp=kind == "upnp"))
        if behind is not None:
            behind.sites.append(self)
        if kind == "upnp":
            self._start_miniupnpd()

    def host(self, name):
        ns = self.net._name(name)
        self.net._add_ns(ns)
        addr = self.lan.attach(ns, "eth0")
        h = Host(name, ns, addr, self.lan_gw, site=self, addr6=self.lan.last6)
        self.hosts.append(h)
        return h

    def upnp_output(self):
        """What miniupnpd has logged so far (-d: its log goes to stderr, into a file)."""
        try:
            with open(self.upnp_log, errors="replace") as f:
                return f.read()
        except (OSError, TypeError):
            return ""

    def _start_miniupnpd(self):
        d = self.net._tmpdir(f"upnp-{self.name}")
        self.upnp_http_port = 5555
        conf = os.path.join(d, "miniupnpd.conf")
        with open(conf, "w") as f:
            f.write(f"""ext_ifname=wan
listening_ip=lan0
http_port={self.upnp_http_port}
enable_natpmp=yes
enable_upnp=yes
secure_mode=yes
system_uptime=yes
notify_interval=60
clean_ruleset_interval=600
uuid={_uuid()}
lease_file={d}/upnp.leases
upnp_table_name=mesh
upnp_nat_table_name=mesh
upnp_forward_chain=miniupnpd
upnp_nat_chain=prerouting_miniupnpd
upnp_nat_postrouting_chain=postrouting_miniupnpd
allow 1024-65535 {self.lan_net}.0/24 1024-65535
deny 0-65535 0.0.0.0/0 0-65535
""")
        self.upnp_log = os.path.join(d, "miniupnpd.log")
        log = open(self.upnp_log, "wb")
        self.upnp = self.net._spawn(
            self.router_ns, ["miniupnpd", "-d", "-f", conf, "-P", os.path.join(d, "miniupnpd.pid")],
            stdout=log, stderr=subprocess.STDOUT)
        log.close()
        # ready when its NAT-PMP (UDP 5351) and HTTP (TCP) sockets are bound in the router
        deadline = time.monotonic() + 15
        while True:
            out = self.net._exec(self.router_ns, ["ss", "-lntu"]).stdout
            if ":5351 " in out and f":{self.upnp_http_port} " in out:
                return
            if self.upnp.poll() is not None or time.monotonic() > deadline:
                with open(self.upnp_log, errors="replace") as f:
                    raise RuntimeError(f"miniupnpd did not start: {f.read()[-3000:]}")
            time.sleep(0.05)


def _uuid():
    h = secrets.token_hex(16)
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


class Turn:
    def __init__(self, proc, addr, port, log_path, conf_path):
        self.proc, self.pid, self.addr, self.port = proc, proc.pid, addr, port
        self.log_path, self.conf_path = log_path, conf_path

    def log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""


class NatNet:
    def __init__(self, prefix=None, public_net=PUBLIC_NET, ipv6=False):
        with _counter_lock:
            _counter[0] += 1
            n = _counter[0]
        self.prefix = prefix or f"nat{os.getpid() % 100000}x{n}"
        self._made = []  # namespaces, deleted in reverse order
        self._procs = []  # daemons and popen()s, stopped by pid
        self._tmp = None
        self._sites = 0
        self.hosts = []
        self.sites = []
        try:
            self.core_ns = self._name("pub")
            self._add_ns(self.core_ns)
            self.public_net = public_net
            self.public_gw = f"{public_net}.1"
            self.ipv6_base = IPV6_BASE if ipv6 else None
            if ipv6:  # the core routes IPv6 between the public segment and the sites' /64s
                self._exec(self.core_ns, ["sysctl", "-qw", "net.ipv6.conf.all.forwarding=1"])
            self._public = _Segment(self, self.core_ns, "br0", public_net, self.public_gw, 24, 10,
                                    v6=f"{IPV6_BASE}:ff" if ipv6 else None)
        except BaseException:
            self.close()
            raise

    # ---- building ----
    def _name(self, role):
        return f"{self.prefix}-{role}"

    def _add_ns(self, ns):
        _ip("netns", "add", ns)
        self._made.append(ns)
        _ip("-n", ns, "link", "set", "lo", "up")

    def _exec(self, ns, argv, check=True, **kw):
        r = subprocess.run(["ip", "netns", "exec", ns, *argv], capture_output=True, text=True, **kw)
        if check and r.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} in {ns}: {r.stderr.strip()}")
        return r

    def _nft(self, ns, ruleset):
        self._exec(ns, ["nft", "-f", "-"], input=ruleset)

    def _wait_up(self, ns, ifname):
        # the kernel reports a veth's carrier a little after both ends are up
        deadline = time.monotonic() + 10
        while "state UP" not in _ip("-n", ns, "link", "show", ifname).stdout:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{ifname} in {ns} did not come up")
            time.sleep(0.02)

    def _tmpdir(self, sub):
        if self._tmp is None:
            self._tmp = tempfile.mkdtemp(prefix=f"{self.prefix}-")
        d = os.path.join(self._tmp, sub)
        os.makedirs(d, exist_ok=True)
        return d

    def _spawn(self, ns, argv, **kw):
        p = subprocess.Popen(["ip", "netns", "exec", ns, *argv], **kw)
        self._procs.append(p)
        return p

    def public_host(self, name):
        ns = self._name(name)
        self._add_ns(ns)
        addr = self._public.attach(ns, "eth0")
        h = Host(name, ns, addr, self.public_gw, addr6=self._public.last6)
        self.hosts.append(h)
        return h

    def cgnat(self, name):
        c = Carrier(self, name)
        self.sites.append(c)
        return c

    def site(self, name, kind="home", behind=None):
        self._sites += 1
        assert self._sites < 250
        s = Site(self, name, kind, self._sites, behind)
        self.sites.append(s)
        return s

    # ---- reaching inside ----
    def wrap(self, h, argv):
        return ["ip", "netns", "exec", h.ns, *argv]

    def run(self, h, argv, **kw):
        kw.setdefault("capture_output", True)
        kw.setdefault("text", True)
        kw.setdefault("timeout", 60)
        return subprocess.run(self.wrap(h, argv), **kw)

    def popen(self, h, argv, **kw):
        """A process inside h's namespace (ip netns exec execs it: same pid), stopped on close."""
        return self._spawn(h.ns, argv, **kw)

    def socket(self, h, type=socket.SOCK_DGRAM, family=socket.AF_INET):
        return _in_ns(h.ns, lambda: socket.socket(family, type))

    def udp(self, h, port=0, addr="0.0.0.0", timeout=5.0):
        s = self.socket(h, socket.SOCK_DGRAM)
        s.settimeout(timeout)
        s.bind((addr, port))
        return s

    def udp6(self, h, port=0, timeout=5.0):
        """A UDP socket bound to h's IPv6 address (NatNet(ipv6=True))."""
        s = self.socket(h, socket.SOCK_DGRAM, socket.AF_INET6)
        s.settimeout(timeout)
        s.bind((h.addr6, port))
        return s

    def connect(self, h, address, timeout=30.0):
        return ns_connect(h.ns, address, timeout)

    def nft(self, x):
        ns = x.router_ns if hasattr(x, "router_ns") else x.ns
        return self._exec(ns, ["nft", "list", "ruleset"]).stdout

    def coturn(self, h, user, password, realm, port=3478, extra=()):
        """Debian's turnserver on h's address (long-term credentials, UDP/TCP, no TLS, no CLI),
        foreground, config/pid/log in a temp dir; returns once it answers STUN."""
        d = self._tmpdir(f"coturn-{h.name}")
        conf = os.path.join(d, "turnserver.conf")
        log_path = os.path.join(d, "turn.log")
        with open(conf, "w") as f:
            f.write("\n".join([
                f"listening-ip={h.addr}", f"relay-ip={h.addr}", f"external-ip={h.addr}",
                f"listening-port={port}", "min-port=49152", "max-port=49999",
                "lt-cred-mech", "fingerprint", f"user={user}:{password}", f"realm={realm}",
                f"userdb={d}/turndb", f"pidfile={d}/turnserver.pid", f"log-file={log_path}",
                "simple-log", "no-tls", "no-dtls", "no-cli", "no-software-attribute",
                "no-multicast-peers", *extra, ""]))
        devnull = subprocess.DEVNULL
        p = self._spawn(h.ns, ["turnserver", "-c", conf], stdout=devnull, stderr=devnull)
        t = Turn(p, h.addr, port, log_path, conf)
        s = self.udp(h, timeout=0.2)
        try:
            deadline = time.monotonic() + 20
            while stun_binding(s, (h.addr, port), tries=1) is None:
                if p.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"turnserver did not answer STUN: {t.log()[-3000:]}")
        finally:
            s.close()
        return t

    # ---- teardown ----
    def close(self):
        for p in reversed(self._procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(timeout=5)
        self._procs = []
        for ns in reversed(self._made):
            _ip("netns", "del", ns, check=False)
        self._made = []
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ---- STUN (RFC 8489), enough for a binding request ----
MAGIC = 0x2112A442


def stun_request(msg_type, attrs=b"", txid=None):
    txid = txid or secrets.token_bytes(12)
    return struct.pack("!HHI", msg_type, len(attrs), MAGIC) + txid + attrs, txid


def stun_parse(data, txid):
    """(type, {attr type: value}) of a STUN message with transaction id txid, or None."""
    if len(data) < 20:
        return None
    t, length, magic = struct.unpack("!HHI", data[:8])
    if magic != MAGIC or data[8:20] != txid or 20 + length > len(data) or length % 4:
        return None
    attrs, i = {}, 20
    while i + 4 <= 20 + length:
        at, al = struct.unpack("!HH", data[i:i + 4])
        if i + 4 + al > 20 + length:
            return None
        attrs.setdefault(at, data[i + 4:i + 4 + al])
        i += 4 + (al + 3) // 4 * 4
    return t, attrs


def xor_address(v):
    """(ip, port) of an XOR-MAPPED-ADDRESS / XOR-RELAYED-ADDRESS value (IPv4)."""
    if len(v) != 8 or v[1] != 1:
        return None
    port = struct.unpack("!H", v[2:4])[0] ^ (MAGIC >> 16)
    ip = struct.unpack("!I", v[4:8])[0] ^ MAGIC
    return socket.inet_ntoa(struct.pack("!I", ip)), port


def _transact(sock, server, msg_type, attrs=b"", tries=3, integrity_key=None):
    """(type, attrs) of the answer to one request (retried tries times, each waiting sock's
    timeout), None when none came."""
    for _ in range(tries):
        req, txid = stun_request(msg_type, attrs)
        if integrity_key is not None:
            # MESSAGE-INTEGRITY: HMAC-SHA1 over the message whose length already counts it
            head = struct.pack("!HHI", msg_type, len(attrs) + 24, MAGIC) + txid + attrs
            mac = hmac.new(integrity_key, head, hashlib.sha1).digest()
            req = head + struct.pack("!HH", 0x0008, 20) + mac
        sock.sendto(req, server)
        try:
            for _ in range(16):  # other datagrams on the socket: bounded
                data, _ = sock.recvfrom(2048)
                m = stun_parse(data, txid)
                if m:
                    return m
        except socket.timeout:
            continue
    return None


def stun_binding(sock, server, tries=3):
    """The XOR-MAPPED-ADDRESS (ip, port) a STUN server reports for sock, None when no answer."""
    m = _transact(sock, server, 0x0001, tries=tries)
    if m and m[0] == 0x0101 and 0x0020 in m[1]:
        return xor_address(m[1][0x0020])
    return None


def _attr(t, v):
    return struct.pack("!HH", t, len(v)) + v + b"\0" * ((4 - len(v) % 4) % 4)


def _error_code(attrs):
    v = attrs.get(0x0009, b"")
    return (v[2] & 7) * 100 + v[3] if len(v) >= 4 else None


def turn_allocate(sock, server, user, password, tries=3):
    """A TURN Allocate (UDP relay) with long-term credentials (RFC 8656): the first request
    without credentials must get 401 with REALM and NONCE, the second carries them.
    Returns {"first": error code, "error": code or None, "relayed": (ip, port) or None,
    "mapped": (ip, port) or None, "realm": str}."""
    transport = _attr(0x0019, bytes([17, 0, 0, 0]))  # REQUESTED-TRANSPORT: UDP
    m = _transact(sock, server, 0x0003, transport, tries)
    if m is None:
        return None
    out = {"first": _error_code(m[1]), "error": None, "relayed": None, "mapped": None,
           "realm": m[1].get(0x0014, b"").decode(errors="replace")}
    if m[0] != 0x0113 or 0x0014 not in m[1] or 0x0015 not in m[1]:
        return out
    realm, nonce = m[1][0x0014], m[1][0x0015]
    key = hashlib.md5(user.encode() + b":" + realm + b":" + password.encode()).digest()
    attrs = transport + _attr(0x0006, user.encode()) + _attr(0x0014, realm) + _attr(0x0015, nonce)
    m = _transact(sock, server, 0x0003, attrs, tries, integrity_key=key)
    if m is None:
        return out
    if m[0] == 0x0103:
        out["relayed"] = xor_address(m[1].get(0x0016, b""))
        out["mapped"] = xor_address(m[1].get(0x0020, b""))
    else:
        out["error"] = _error_code(m[1])
    return out

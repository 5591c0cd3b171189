"""Impaired networks for tests and benchmarks: nodes in their own network namespaces, every packet
between them passing through mesh-netimp (tests/tools/netimp.c), which delays, drops, duplicates,
reorders and partitions per directed link, changeable at run time.

    with ImpairedNet(3, netimp_bin) as net:
        net.link(1, 2, rtt_ms=50, loss=0.02)     # both directions
        p = subprocess.Popen(net.wrap(1, [cmd, ...]))
        s = net.connect(1, ("127.0.0.1", port))  # a socket inside node 1's namespace
        net.cut(1, 2); net.heal(1, 2)

Node i has the address 10.231.i.2. Needs root (ip netns, veth, TUN). Everything is removed on
close(): the relay is stopped by pid and the namespaces deleted.
"""
import ctypes
import os
import socket
import subprocess
import threading
import time

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL("libc.so.6", use_errno=True)


def _ip(*args, check=True):
    r = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {r.stderr.strip()}")
    return r


def available():
    """Why impaired-network tests cannot run here, or None when they can."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, veth, TUN)"
    if not os.path.exists("/dev/net/tun"):
        return "no /dev/net/tun"
    try:
        name = f"mi_probe{os.getpid()}"
        _ip("netns", "add", name)
        _ip("netns", "del", name)
    except (RuntimeError, FileNotFoundError) as e:
        return f"cannot create network namespaces: {e}"
    return None


class ImpairedNet:
    def __init__(self, n, netimp_bin, seed=1, subnet="10.231"):
        assert 1 <= n <= 62
        self.n = n
        self.subnet = subnet
        self.prefix = f"mi{os.getpid() % 100000}x{id(self) % 1000}"
        self.router = f"{self.prefix}r"
        self.ctl_path = f"/tmp/{self.prefix}.ctl"
        self.relay = None
        self._ctl = None
        self._made = []
        try:
            self._setup(netimp_bin, seed)
        except BaseException:
            self.close()
            raise

    def ns(self, i):
        return f"{self.prefix}n{i}"

    def addr(self, i):
        return f"{self.subnet}.{i}.2"

    def _setup(self, netimp_bin, seed):
        _ip("netns", "add", self.router)
        self._made.append(self.router)
        r = ["-n", self.router]
        _ip(*r, "link", "set", "lo", "up")
        for i in range(1, self.n + 1):
            ns, veth = self.ns(i), f"{self.prefix}v{i}"
            _ip("netns", "add", ns)
            self._made.append(ns)
            _ip("link", "add", veth, "netns", self.router, "type", "veth", "peer", "name", "eth0",
                "netns", ns)
            _ip(*r, "addr", "add", f"{self.subnet}.{i}.1/24", "dev", veth)
            _ip(*r, "link", "set", veth, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "addr", "add", f"{self.addr(i)}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "route", "add", "default", "via", f"{self.subnet}.{i}.1")
        for key in ("net.ipv4.ip_forward=1", "net.ipv4.conf.all.rp_filter=0",
                    "net.ipv4.conf.default.rp_filter=0"):
            subprocess.run(["ip", "netns", "exec", self.router, "sysctl", "-qw", key], check=True)
        self.relay = subprocess.Popen(
            [netimp_bin, "--netns", self.router, "--tun", "imp0", "--ctl", self.ctl_path,
             "--subnet", self.subnet, "--seed", str(seed)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.relay.stdout.readline().strip()
        if line != "ready":
            raise RuntimeError(f"mesh-netimp did not start: {line} {self.relay.stderr.read()}")
        subprocess.run(["ip", "netns", "exec", self.router, "sysctl", "-qw",
                        "net.ipv4.conf.imp0.rp_filter=0"], check=True)
        # every packet arriving from a node goes into the relay; what the relay writes back
        # (arriving on imp0) is routed by the main table to the destination node's veth
        _ip(*r, "route", "add", "default", "dev", "imp0", "table", "100")
        for i in range(1, self.n + 1):
            _ip(*r, "rule", "add", "iif", f"{self.prefix}v{i}", "lookup", "100", "pref", "100")
        # the kernel reports a veth's carrier a little after both ends are up; programs that list
        # interfaces (a node choosing the addresses of its invite token) skip it until then
        deadline = time.monotonic() + 10
        for i in range(1, self.n + 1):
            while "state UP" not in _ip("-n", self.ns(i), "link", "show", "eth0").stdout:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the link of {self.ns(i)} did not come up")
                time.sleep(0.02)
        self._ctl = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._ctl.settimeout(10)
        self._ctl.connect(self.ctl_path)
        self._ctl_file = self._ctl.makefile("r")

    # ---- control ----
    def command(self, line):
        self._ctl.sendall((line + "\n").encode())
        reply = self._ctl_file.readline().strip()
        if not reply.startswith("ok"):
            raise RuntimeError(f"mesh-netimp: {line}: {reply}")
        return reply

    def set(self, src, dst, **kv):
        """One direction; src/dst are node indices or '*'."""
        self.command(f"set {src} {dst} " + " ".join(f"{k}={v}" for k, v in kv.items()))

    def link(self, a, b, rtt_ms=0.0, loss=0.0, jitter_ms=0.0, dup=0.0, reorder=0.0):
        """Both directions of a link (a or b may be '*'): half the RTT each way."""
        kv = dict(delay_us=int(rtt_ms * 500), jitter_us=int(jitter_ms * 1000), loss=loss,
                  dup=dup, reorder=reorder)
        self.set(a, b, **kv)
        self.set(b, a, **kv)

    def cut(self, a, b):
        self.set(a, b, cut=1)
        self.set(b, a, cut=1)

    def heal(self, a, b):
        self.set(a, b, cut=0)
        self.set(b, a, cut=0)

    def isolate(self, i):
        """Partition node i from every other node."""
        self.cut(i, "*")

    def stats(self):
        """{(src, dst): (passed, dropped, duplicated, bytes, turns, payload)}: packets, IP bytes;
        turns = how often data began to flow src -> dst right after data dst -> src (replies:
        request/response round trips; TCP segments with payload, UDP datagrams over 72 payload
        bytes, so QUIC ACK-only packets do not count), payload = TCP/UDP payload bytes."""
        self._ctl.sendall(b"stats\n")
        assert self._ctl_file.readline().startswith("ok")
        out = {}
        while True:
            line = self._ctl_file.readline().strip()
            if line == "end" or not line:
                return out
            s, d, *v = (int(x) for x in line.split())
            out[(s, d)] = tuple(v)

    # ---- reaching inside ----
    def wrap(self, i, argv):
        """argv run inside node i's namespace (same pid: ip netns exec execs the command)."""
        return ["ip", "netns", "exec", self.ns(i), *argv]

    def connect(self, i, address, timeout=30.0):
        """A TCP socket connected from inside node i's namespace (e.g. to its 127.0.0.1 API)."""
        return ns_connect(self.ns(i), address, timeout)

    def close(self):
        if self._ctl:
            try:
                self._ctl.close()
            except OSError:
                pass
            self._ctl = None
        if self.relay and self.relay.poll() is None:
            self.relay.kill()
            self.relay.wait(timeout=10)
        for ns in reversed(self._made):
            _ip("netns", "del", ns, check=False)
        self._made = []
        try:
            os.unlink(self.ctl_path)
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def ns_connect(ns, address, timeout=30.0):
    """Create a socket inside a named network namespace (a socket keeps the namespace it was made
    in; setns only affects the calling thread, so a short-lived thread makes it) and connect."""
    box = {}

    def make():
        try:
            fd = os.open(f"/run/netns/{ns}", os.O_RDONLY)
            try:
                if _libc.setns(fd, CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), f"setns {ns}")
            finally:
                os.close(fd)
            box["s"] = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        except BaseException as e:  # reported to the caller
            box["e"] = e

    t = threading.Thread(target=make)
    t.start()
    t.join()
    if "e" in box:
        raise box["e"]
    s = box["s"]
    s.settimeout(timeout)
    try:
        s.connect(address)
    except BaseException:
        s.close()
        raise
    return s

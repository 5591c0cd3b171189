"""A home router in network namespaces for the port-mapping tests (test_portmap.py): Debian's
miniupnpd (UPnP-IGD and NAT-PMP, nftables backend) on a NAT gateway between a LAN host and a
public host.

    public (WAN_HOST) --wan-- router (WAN_IP | LAN_GW) --lan-- lan (LAN_HOST, default via LAN_GW)

The router forwards and masquerades LAN traffic out of its WAN side (nft), lets in from the WAN
only what miniupnpd's chains map, and runs miniupnpd in the foreground (its own config, pid file
and lease file in a temp dir; its own nft table). Everything stays in the namespaces made here;
close() stops miniupnpd and every process started through popen() by pid and deletes the
namespaces. Needs root (ip netns, nft) and miniupnpd.
"""
import os
import queue
import shutil
import subprocess
import threading
import time

# The WAN side's addresses look public: miniupnpd refuses to map on an external address it counts
# private or reserved (RFC 1918, CGNAT, and the documentation ranges TEST-NET-1/2/3 too), so
# these come from 11.0.0.0/8. They exist only in the namespaces made here: the router has no
# default route, nothing reaches beyond them.
WAN_IP = "11.77.0.1"  # the router's external address
WAN_HOST = "11.77.0.2"  # the public host
LAN_GW = "192.168.77.1"
LAN_HOST = "192.168.77.2"
MINIUPNPD = "/usr/sbin/miniupnpd"
TABLE = "mesh_upnp"  # miniupnpd's nft table (and ours): deleted with the namespace

NFT_RULES = f"""
table inet {TABLE} {{
    chain forward {{
        type filter hook forward priority 0; policy drop;
        ct state established,related accept
        iifname "lan0" accept
        jump miniupnpd
    }}
    chain miniupnpd {{
    }}
    chain prerouting {{
        type nat hook prerouting priority -100; policy accept;
        jump prerouting_miniupnpd
    }}
    chain postrouting {{
        type nat hook postrouting priority 100; policy accept;
        jump postrouting_miniupnpd
        oifname "wan0" masquerade
    }}
    chain prerouting_miniupnpd {{
    }}
    chain postrouting_miniupnpd {{
    }}
}}
"""


def _run(*args):
    r = subprocess.run(list(args), capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {r.stderr.strip()}")
    return r.stdout


def available():
    """Why the router cannot be built here, or None when it can."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, nft)"
    for tool in ("ip", "nft", MINIUPNPD):
        if not shutil.which(tool):
            return f"{tool} is not installed (scripts/deps.sh test)"
    try:
        name = f"pm_probe{os.getpid()}"
        _run("ip", "netns", "add", name)
        _run("ip", "netns", "del", name)
    except (RuntimeError, FileNotFoundError) as e:
        return f"cannot create network namespaces: {e}"
    return None


class Proc:
    """A process in a namespace whose stdout lines are collected (wait_line)."""

    def __init__(self, argv, stderr_path):
        self.stderr_file = open(stderr_path, "w")
        self.stderr_path = stderr_path
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self.stderr_file, text=True)
        self.lines = []
        self._q = queue.Queue()
        self._t = threading.Thread(target=self._read, daemon=True)
        self._t.start()

    def _read(self):
        for line in self.p.stdout:
            self._q.put(line.rstrip("\n"))
        self._q.put(None)

    def _drain(self, timeout):
        try:
            line = self._q.get(timeout=timeout)
        except queue.Empty:
            return False
        if line is None:
            self._q.put(None)  # stays at the end
            return None
        self.lines.append(line)
        return True

    def wait_line(self, pred, timeout):
        """The first line (old or new) for which pred is true, or None after timeout s or at EOF."""
        for line in self.lines:
            if pred(line):
                return line
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            got = self._drain(min(0.2, max(0.0, end - time.monotonic())))
            if got is None:
                return None
            if got and pred(self.lines[-1]):
                return self.lines[-1]
        return None

    def rest(self, timeout):
        """Every line until EOF (bounded by timeout s)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end and self._drain(0.2) is not None:
            pass
        return list(self.lines)

    def stderr(self):
        if not self.stderr_file.closed:
            self.stderr_file.flush()
        with open(self.stderr_path) as f:
            return f.read()

    def stop(self, sig_timeout=10):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(timeout=sig_timeout)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(timeout=10)
        self.stderr_file.close()
        return self.p.returncode


class UpnpRouter:
    def __init__(self, tmp_dir):
        self.tmp = str(tmp_dir)
        self.prefix = f"pm{os.getpid() % 100000}x{id(self) % 1000}"
        self.router, self.lan, self.public = (f"{self.prefix}{s}" for s in ("r", "l", "p"))
        self._made = []
        self._procs = []
        self.miniupnpd = None
        try:
            self._setup()
        except BaseException:
            self.close()
            raise

    def _ns(self, ns, *args):
        return _run("ip", "netns", "exec", ns, *args)

    def _setup(self):
        for ns in (self.router, self.lan, self.public):
            _run("ip", "netns", "add", ns)
            self._made.append(ns)
            self._ns(ns, "ip", "link", "set", "lo", "up")
        _run("ip", "-n", self.router, "link", "add", "wan0", "type", "veth", "peer", "name",
             "eth0", "netns", self.public)
        _run("ip", "-n", self.router, "link", "add", "lan0", "type", "veth", "peer", "name",
             "eth0", "netns", self.lan)
        self._ns(self.router, "ip", "addr", "add", f"{WAN_IP}/24", "dev", "wan0")
        self._ns(self.router, "ip", "addr", "add", f"{LAN_GW}/24", "dev", "lan0")
        self._ns(self.public, "ip", "addr", "add", f"{WAN_HOST}/24", "dev", "eth0")
        self._ns(self.lan, "ip", "addr", "add", f"{LAN_HOST}/24", "dev", "eth0")
        for ns, dev in ((self.router, "wan0"), (self.router, "lan0"), (self.public, "eth0"),
                        (self.lan, "eth0")):
            self._ns(ns, "ip", "link", "set", dev, "up")
        self._ns(self.lan, "ip", "route", "add", "default", "via", LAN_GW)
        self._ns(self.router, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1")
        rules = os.path.join(self.tmp, "router.nft")
        with open(rules, "w") as f:
            f.write(NFT_RULES)
        self._ns(self.router, "nft", "-f", rules)

    def wrap(self, ns, argv):
        return ["ip", "netns", "exec", ns, *argv]

    def popen(self, ns, argv, name):
        """Start argv in namespace ns (self.lan, self.public, self.router); stopped by close()."""
        p = Proc(self.wrap(ns, argv), os.path.join(self.tmp, f"{name}.stderr"))
        self._procs.append(p)
        return p

    def run(self, ns, argv, timeout=30):
        return subprocess.run(self.wrap(ns, argv), capture_output=True, text=True, timeout=timeout)

    def start_miniupnpd(self, natpmp=True, upnp=True, min_lifetime=120, secure=True):
        """miniupnpd in the router namespace, in the foreground (-d), with a config of its own.
        secure=False lets a LAN host map ports for another one (a port taken by "another host").
        Returns once it listens (its log says so), or raises."""
        assert self.miniupnpd is None
        d = os.path.join(self.tmp, "miniupnpd")
        os.makedirs(d, exist_ok=True)
        conf = os.path.join(d, "miniupnpd.conf")
        with open(conf, "w") as f:
            f.write(f"""ext_ifname=wan0
listening_ip=lan0
http_port=0
enable_natpmp={'yes' if natpmp else 'no'}
enable_upnp={'yes' if upnp else 'no'}
secure_mode={'yes' if secure else 'no'}
system_uptime=no
notify_interval=60
clean_ruleset_interval=600
min_lifetime={min_lifetime}
max_lifetime=86400
lease_file={d}/leases
uuid=3e8a1c7e-5a0b-4c55-9d3e-6c1f0e2a7b90
upnp_table_name={TABLE}
upnp_nat_table_name={TABLE}
upnp_forward_chain=miniupnpd
upnp_nat_chain=prerouting_miniupnpd
upnp_nat_postrouting_chain=postrouting_miniupnpd
allow 1024-65535 192.168.77.0/24 1024-65535
deny 0-65535 0.0.0.0/0 0-65535
""")
        log = os.path.join(d, "miniupnpd.log")
        self._mlog = open(log, "w")
        self.miniupnpd = subprocess.Popen(
            self.wrap(self.router, [MINIUPNPD, "-f", conf, "-d", "-P", os.path.join(d, "pid")]),
            stdout=self._mlog, stderr=subprocess.STDOUT)
        want = "Listening for NAT-PMP" if natpmp else "HTTP listening on port"
        end = time.monotonic() + 15
        while time.monotonic() < end:
            if self.miniupnpd.poll() is not None:
                raise RuntimeError(f"miniupnpd exited {self.miniupnpd.returncode}: "
                                   f"{self.miniupnpd_log()}")
            if want in self.miniupnpd_log():
                return
            time.sleep(0.1)
        raise RuntimeError(f"miniupnpd did not start: {self.miniupnpd_log()}")

    def miniupnpd_log(self):
        if not self.miniupnpd:
            return ""
        self._mlog.flush()
        with open(self._mlog.name) as f:
            return f.read()

    def stop_miniupnpd(self):
        if self.miniupnpd is None:
            return
        if self.miniupnpd.poll() is None:
            self.miniupnpd.terminate()
            try:
                self.miniupnpd.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.miniupnpd.kill()
                self.miniupnpd.wait(timeout=10)
        self._mlog.close()
        self.miniupnpd = None

    def redirects(self):
        """The router's DNAT rules miniupnpd made (its nft chain), as text."""
        return self._ns(self.router, "nft", "list", "chain", "inet", TABLE,
                        "prerouting_miniupnpd")

    def close(self):
        for p in reversed(self._procs):
            try:
                p.stop()
            except Exception:
                pass
        self._procs = []
        try:
            self.stop_miniupnpd()
        except Exception:
            pass
        for ns in reversed(self._made):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self._made = []

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()

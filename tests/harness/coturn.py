"""Debian's coturn (turnserver) on 127.0.0.1 for the TURN/STUN tests, and mesh-turn-probe
(tests/tools/turn_probe.c), the client that drives src/core/turn_client.h on a real socket.

Coturn runs in the foreground from a generated config in a temporary directory (long-term
credentials, loopback peers allowed, no TLS/DTLS/CLI, pidfile and log there) and is stopped by the
pid of the process the fixture started."""
import os
import queue
import shutil
import signal
import socket
import struct
import subprocess
import threading
import time

import pytest

from harness.node import MESH_BIN

TURNSERVER = shutil.which("turnserver")
PROBE = os.path.join(os.path.dirname(MESH_BIN), "mesh-turn-probe")
USER, PASSWORD, REALM = "meshuser", "s3cret-pass", "mesh.test"


def free_udp_tcp_port():
    """A port free on 127.0.0.1 for both UDP and TCP now (coturn listens on both)."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
            u.bind(("127.0.0.1", 0))
            port = u.getsockname()[1]
            with socket.socket() as t:
                try:
                    t.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    raise RuntimeError("no free port")


def stun_answers(port, timeout=0.2):
    """True when a plain Binding request (built here, not by the code under test) is answered."""
    tid = os.urandom(12)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(timeout)
        s.sendto(struct.pack(">HHI", 1, 0, 0x2112A442) + tid, ("127.0.0.1", port))
        try:
            d, _ = s.recvfrom(2048)
        except OSError:
            return False
        return len(d) >= 20 and d[8:20] == tid and d[0:2] == b"\x01\x01"


class Coturn:
    def __init__(self, tmp, extra=()):
        self.dir = str(tmp)
        self.port = free_udp_tcp_port()
        self.log = os.path.join(self.dir, "turn.log")
        conf = [
            "listening-ip=127.0.0.1", "relay-ip=127.0.0.1", f"listening-port={self.port}",
            "lt-cred-mech", f"user={USER}:{PASSWORD}", f"realm={REALM}",
            "allow-loopback-peers", "no-tls", "no-dtls", "no-cli", "no-rfc5780", "fingerprint",
            f"userdb={os.path.join(self.dir, 'turndb')}",
            f"pidfile={os.path.join(self.dir, 'turn.pid')}", f"log-file={self.log}",
            "simple-log", "no-stdout-log", *extra,
        ]
        self.conf = os.path.join(self.dir, "turnserver.conf")
        with open(self.conf, "w") as f:
            f.write("\n".join(conf) + "\n")
        self.proc = subprocess.Popen([TURNSERVER, "-c", self.conf], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 20
        while not stun_answers(self.port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"turnserver did not answer STUN on {self.port}: {self.tail()}")

    @property
    def addr(self):
        return f"127.0.0.1:{self.port}"

    def tail(self):
        try:
            with open(self.log, errors="replace") as f:
                return f.read()[-2000:]
        except OSError:
            return "(no log)"

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


@pytest.fixture
def coturn_factory(tmp_path):
    """coturn_factory(*extra_config_lines) -> a running Coturn, stopped after the test."""
    servers = []

    def make(*extra):
        d = tmp_path / f"coturn{len(servers)}"
        d.mkdir()
        servers.append(Coturn(d, extra))
        return servers[-1]

    yield make
    for s in servers:
        s.stop()


class Probe:
    """mesh-turn-probe with its stdout lines read as they come."""

    def __init__(self, *args):
        self.proc = subprocess.Popen([PROBE, *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.lines = []
        self.q = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.q.put(line.rstrip("\n"))
        self.q.put(None)

    def expect(self, prefix, timeout=15.0):
        """The next line starting with prefix (the lines before it are kept in self.lines);
        fails on a timeout, the probe's exit or a "failed:" line first."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"probe: no '{prefix}' line within {timeout}s: {self.lines}")
            try:
                line = self.q.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                pytest.fail(f"probe exited before '{prefix}': {self.lines} "
                            f"rc={self.proc.wait()} {self.proc.stderr.read()}")
            self.lines.append(line)
            if line.startswith(prefix):
                return line
            if line.startswith("failed:"):
                pytest.fail(f"probe failed before '{prefix}': {line}")

    def rest(self, timeout=15.0):
        """Waits for the exit; (exit code, every line)."""
        rc = self.proc.wait(timeout=timeout)
        while True:
            line = self.q.get(timeout=timeout)
            if line is None:
                return rc, self.lines
            self.lines.append(line)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


@pytest.fixture
def probes():
    """probes(*args) -> a running Probe; every one still running is stopped after the test."""
    started = []

    def make(*args):
        started.append(Probe(*args))
        return started[-1]

    yield make
    for p in started:
        p.stop()


def addr_of(line):
    """("IP", port) of a probe line "WORD IP:PORT ...". """
    host, port = line.split()[1].rsplit(":", 1)
    return host, int(port)

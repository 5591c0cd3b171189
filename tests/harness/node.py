"""The node harness of the integration tests: real mesh-llm nodes, real llama-server children
(Node), HTTP on raw sockets (http, read_response, Pushback, sse_events), /proc helpers and
bounded polling (wait_for). The start_node fixture that starts and cleans up Nodes is in
harness/fixtures.py."""
import json
import os
import queue
import signal
import socket
import subprocess
import threading
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = os.environ.get("MESH_LLM_TEST_MODELS", os.path.join(ROOT, "..", "shared", "models"))
MESH_BIN = os.environ.get("MESH_LLM_BIN", os.path.join(ROOT, "build", "mesh-llm"))
BIN_DIR = os.environ.get("MESH_LLM_BIN_DIR", "")
# an ASan+UBSan build (make asan): its shadow memory and freed-memory quarantine make resident
# memory figures meaningless, so memory bounds are checked on the release build only
SANITIZED = "asan" in os.path.basename(os.path.dirname(os.path.abspath(MESH_BIN)))


def model_path(name):
    return os.path.join(MODELS, name + ".gguf")


def made_model(script, cache_subdir):
    """The path of the model scripts/SCRIPT makes with mesh-gguf-synth (agent-model.sh,
    vision-model.sh): made once into the test cache's CACHE_SUBDIR, named by its recipe."""
    synth = os.path.join(os.path.dirname(MESH_BIN), "mesh-gguf-synth")
    cache = os.environ.get("MESH_LLM_CACHE") or os.path.expanduser("~/.cache/mesh-llm")
    r = subprocess.run(["sh", os.path.join(ROOT, "scripts", script), synth,
                        os.path.join(cache, cache_subdir)],
                       check=True, timeout=300, capture_output=True, text=True)
    return r.stdout.strip()


def wait_for(cond, timeout=20.0, interval=0.05, what="condition"):
    """Bounded polling: returns cond()'s truthy value or fails the test."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def free_port():
    """A TCP port free on 127.0.0.1 now (for a node whose ports a test must know before its
    ready line)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pid_alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except (OSError, IndexError):
        return False


def children_of(pid):
    """Direct children of pid (from /proc)."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                out.append(int(d))
        except (OSError, IndexError, ValueError):  # exited while we looked
            pass
    return out


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode() for a in f.read().split(b"\0") if a]
    except OSError:  # gone (ENOENT) or exited while being read (ESRCH): no command line
        return []


def sh(*args, check=True):
    return subprocess.run(list(args), capture_output=True, timeout=30, check=check)


class Response:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return f"<Response {self.status} {self.body[:200]!r}>"


def read_response(sock, timeout=30.0):
    """Read one HTTP/1.1 response (Content-Length, chunked or until close)."""
    sock.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed before headers: {data!r}")
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for l in lines[1:]:
        k, v = l.split(":", 1)
        headers[k.strip().lower()] = v.strip()
    if status == 100:
        return read_response_from(sock, rest, timeout)
    body = rest
    if "content-length" in headers:
        n = int(headers["content-length"])
        while len(body) < n:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed in body")
            body += chunk
        if len(body) > n and hasattr(sock, "unread"):
            sock.unread(body[n:])  # the next pipelined response's bytes
        body = body[:n]
    elif headers.get("transfer-encoding", "").lower() == "chunked":
        raw = body
        body = b""
        while True:
            while b"\r\n" not in raw:
                c = sock.recv(65536)
                if not c:
                    raise ConnectionError("closed in chunked body")
                raw += c
            size_line, raw = raw.split(b"\r\n", 1)
            size = int(size_line.split(b";")[0], 16)
            while len(raw) < size + 2:
                c = sock.recv(65536)
                if not c:
                    raise ConnectionError("closed in chunk")
                raw += c
            if size == 0:
                break
            body += raw[:size]
            raw = raw[size + 2:]
    else:
        while True:
            c = sock.recv(65536)
            if not c:
                break
            body += c
    return Response(status, headers, body)


class Pushback:
    """A socket for pipelined responses: bytes read past one response are kept for the next."""

    def __init__(self, s):
        self.s, self.p = s, b""

    def settimeout(self, t):
        self.s.settimeout(t)

    def recv(self, n):
        if self.p:
            r, self.p = self.p, b""
            return r
        return self.s.recv(n)

    def unread(self, b):
        self.p = b + self.p


def read_response_from(sock, prefix, timeout):
    ps = sock if isinstance(sock, Pushback) else Pushback(sock)
    ps.unread(prefix)
    return read_response(ps, timeout)


def http(port, method, path, body=None, headers=None, timeout=60.0, raw_body=None,
         host="127.0.0.1", ns=None):
    """One request on a fresh connection (from inside network namespace ns when given)."""
    if raw_body is None and body is not None:
        raw_body = json.dumps(body).encode() if not isinstance(body, (bytes, str)) else (
            body.encode() if isinstance(body, str) else body)
    h = {"Host": f"{host}:{port}", "Connection": "close"}
    if raw_body is not None:
        h["Content-Type"] = "application/json"
        h["Content-Length"] = str(len(raw_body))
    h.update(headers or {})
    req = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n"
    if ns is not None:
        from harness.netimp import ns_connect
        conn = ns_connect(ns, (host, port), timeout)
    else:
        conn = socket.create_connection((host, port), timeout=timeout)
    with conn as s:
        s.sendall(req.encode() + (raw_body or b""))
        return read_response(s, timeout)


def sse_events(body):
    out = []
    for block in body.decode().split("\n\n"):
        for line in block.split("\n"):
            if line.startswith("data: "):
                out.append(line[6:])
    return out


def user_home(tmp_path):
    """An empty HOME under tmp_path (its .cache the real one: the llama.cpp build)."""
    home = tmp_path / "user"
    if not home.exists():
        home.mkdir()
        real = os.path.expanduser("~/.cache")
        if os.path.isdir(real):
            os.symlink(real, home / ".cache")
    return str(home)


class Node:
    """A mesh-llm process started by a test; always cleaned up by pid."""

    def __init__(self, args, env=None, tmp_path=None, wait_ready=True, ready_timeout=60.0,
                 prefix=None, host="127.0.0.1", ns=None, clean_env=None, binary=None, cwd=None):
        self.host = host  # where its API and console are reached
        self.ns = ns  # the network namespace it runs in, when a test made one
        if ns is not None and prefix is None:
            prefix = ["ip", "netns", "exec", ns]
        self.args = list(prefix or []) + [binary or MESH_BIN] + list(args)
        if "--console" not in args and "--headless" not in args:
            self.args += ["--console", "0"]  # never the default 3131: tests run side by side
        if BIN_DIR and "--bin-dir" not in args and clean_env is None:
            self.args += ["--bin-dir", BIN_DIR]
        # clean_env: exactly this environment (like env -i), no --bin-dir: the binary finds
        # llama.cpp by itself (test_install.py)
        self.env = dict(os.environ) if clean_env is None else dict(clean_env)
        # never the public Nostr relays: a test that wants discovery gives its own relay
        self.env.setdefault("MESH_LLM_NOSTR_RELAYS", "none")
        # nor to this machine's router: no port mapping (NAT tests turn it on in their namespaces)
        self.env.setdefault("MESH_LLM_PORTMAP", "0")
        # one compute thread per llama-server child (llama.cpp reads LLAMA_ARG_THREADS; the node
        # passes its environment on): the test models need no more, and on a machine whose cores
        # are all busy a child's threads wait for each other at every step — a 1500-token stream
        # took 7 minutes with two, seconds with one. A test may set its own.
        self.env.setdefault("LLAMA_ARG_THREADS", "1")
        if tmp_path is not None and clean_env is None:
            self.env["MESH_LLM_HOME"] = str(tmp_path / "home")
            # a HOME of its own: a node serves ~/.models by default, and the user's (or another
            # test's downloads) must not show up in a test; ~/.cache stays the user's
            self.env["HOME"] = user_home(tmp_path)
        self.env.update(env or {})
        self.stderr_path = str(tmp_path / "node.stderr") if tmp_path else "/dev/null"
        self._stderr = open(self.stderr_path, "wb") if tmp_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=self._stderr,
                                     env=self.env, cwd=cwd)
        self.pid = self.proc.pid
        self.lines = queue.Queue()
        self.stdout_lines = []
        self.child_pids = set()
        t = threading.Thread(target=self._pump, daemon=True)
        t.start()
        self.ready = None
        if wait_ready:
            self.wait_ready(ready_timeout)

    def _pump(self):
        for line in self.proc.stdout:
            s = line.decode(errors="replace").rstrip("\n")
            self.stdout_lines.append(s)
            self.lines.put(s)

    def wait_ready(self, timeout=60.0):
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"node not ready in {timeout}s; stderr:\n{self.stderr()}")
            try:
                line = self.lines.get(timeout=min(left, 0.5))
            except queue.Empty:
                if self.proc.poll() is not None:
                    pytest.fail(f"node exited with {self.proc.returncode}; stderr:\n{self.stderr()}")
                continue
            if line.startswith("mesh-llm ready "):
                self.ready = dict(kv.split("=", 1) for kv in line.split()[2:])
                self.api_port = int(self.ready["api"])
                self.console_port = int(self.ready["console"])
                self.quic_port = int(self.ready["quic"])
                self.id = self.ready["id"]
                self.token = self.ready["token"]
                self.remember_children()
                return self.ready

    def stderr(self):
        try:
            with open(self.stderr_path, "rb") as f:
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def llama_children(self):
        """pid → argv of llama-server children (remembered for cleanup)."""
        out = {}
        for c in children_of(self.pid):
            argv = cmdline(c)
            if argv and "llama-server" in os.path.basename(argv[0]):
                out[c] = argv
                self.child_pids.add(c)
            elif argv and "rpc-server" in os.path.basename(argv[0]):
                self.child_pids.add(c)
        return out

    def remember_children(self):
        self.llama_children()

    def child_for(self, model):
        for pid, argv in self.llama_children().items():
            if "--alias" in argv and argv[argv.index("--alias") + 1] == model:
                return pid, int(argv[argv.index("--port") + 1]), argv
        return None

    def status(self, timeout=10.0):
        r = http(self.console_port, "GET", "/api/status", timeout=timeout, host=self.host,
                 ns=self.ns)
        assert r.status == 200, r
        return r.json()

    def peer_states(self):
        """peer id -> state ("alive", "dead", "left", "standby") from /api/status."""
        return {p["id"]: p["state"] for p in self.status()["peers"]}

    def metric(self, series, headers=None):
        """The value of one series of GET /metrics (its name with labels exactly as the node
        writes them, e.g. 'mesh_llm_relay_retries_total{model="m"}'), or None if absent."""
        r = http(self.console_port, "GET", "/metrics", headers=headers)
        assert r.status == 200, r
        for line in r.body.decode().splitlines():
            if line.startswith(series + " "):
                return float(line[len(series) + 1:])
        return None

    def check_metrics_with_promtool(self, headers=None):
        """promtool (Debian's prometheus package) accepts the node's /metrics as it is now."""
        import shutil
        assert shutil.which("promtool"), "no promtool: scripts/deps.sh test installs prometheus"
        r = http(self.console_port, "GET", "/metrics", headers=headers)
        assert r.status == 200, r
        p = subprocess.run(["promtool", "check", "metrics"], input=r.body.decode(),
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stdout + p.stderr

    def request(self, method, path, body=None, **kw):
        kw.setdefault("ns", self.ns)
        return http(self.api_port, method, path, body, **kw)

    def complete(self, model, prompt="Once upon a time", max_tokens=8, **extra):
        body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
        body.update(extra)
        return self.request("POST", "/v1/completions", body)

    def stop(self, sig=signal.SIGTERM, timeout=20.0):
        self.remember_children()
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        return self.proc.returncode

    def cleanup(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        for c in self.child_pids:
            argv = cmdline(c)
            if pid_alive(c) and argv and ("llama-server" in argv[0] or "rpc-server" in argv[0]):
                try:
                    os.kill(c, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if hasattr(self._stderr, "close"):
            self._stderr.close()

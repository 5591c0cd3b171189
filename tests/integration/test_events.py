"""GET /api/events (status snapshots as Server-Sent Events) and the request log in /api/status:
changes arrive at once (not at the next periodic snapshot), a client that never reads is dropped
with the node's memory bounded, and the last 200 requests are logged with who served them."""
import json
import socket
import threading
import time

from harness.node import SANITIZED, http, model_path, wait_for
from harness.mesh import ENV

A_MODEL = "stories260K"
B_MODEL = "TinyStories-656K-Q8_0"


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


class EventStream:
    """An /api/events client on a raw socket: every snapshot with the time it arrived."""

    def __init__(self, port, rcvbuf=None):
        self.s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            self.s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.s.connect(("127.0.0.1", port))
        self.s.sendall(f"GET /api/events HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                       "Accept: text/event-stream\r\n\r\n".encode())
        self.events = []  # (monotonic time, parsed snapshot)
        self.head = None
        self.closed = False
        self.lock = threading.Lock()

    def start(self):
        threading.Thread(target=self._read, daemon=True).start()
        return self

    def _read(self):
        buf = b""
        try:
            while True:
                chunk = self.s.recv(65536)
                if not chunk:
                    break
                buf += chunk
                if self.head is None and b"\r\n\r\n" in buf:
                    self.head, buf = buf.split(b"\r\n\r\n", 1)
                while self.head is not None and b"\n\n" in buf:
                    block, buf = buf.split(b"\n\n", 1)
                    for line in block.decode().split("\n"):
                        if line.startswith("data: "):
                            with self.lock:
                                self.events.append((time.monotonic(), json.loads(line[6:])))
        except OSError:
            pass
        self.closed = True

    def first(self, pred):
        """Arrival time of the first snapshot satisfying pred, or None."""
        with self.lock:
            for t, st in self.events:
                if pred(st):
                    return t
        return None

    def close(self):
        self.s.close()


def peer_state(st, pid):
    return {p["id"]: p["state"] for p in st.get("peers", [])}.get(pid)


def test_events_snapshot_at_once_and_on_change(start_node):
    # a long period: only the change notification can bring a change within a second
    env = dict(ENV, MESH_LLM_EVENTS_MS="30000")
    a = start_node("--port", "0", "--own-mesh", env=env)
    ev = EventStream(a.console_port).start()
    wait_for(lambda: ev.events, timeout=10, what="the snapshot sent on connect")
    head = ev.head.decode()
    assert head.startswith("HTTP/1.1 200")
    assert "content-type: text/event-stream" in head.lower()
    first = ev.events[0][1]
    assert first["node"]["id"] == a.id
    assert first["node"]["token"] == a.token  # a loopback client, as in /api/status
    assert first["events"]["clients"] == 1
    assert first["requests"] == []

    # a peer joins: the first /api/status that shows it alive (polled fast from before it
    # starts) and the first event that does
    seen = [None]
    stop = threading.Event()

    def poll():
        while not stop.is_set() and seen[0] is None:
            try:
                if any(p["state"] == "alive" for p in a.status()["peers"]):
                    seen[0] = time.monotonic()
            except (OSError, AssertionError):
                pass
            time.sleep(0.01)
    t = threading.Thread(target=poll, daemon=True)
    t.start()
    b = start_node("--port", "0", "--join", a.token, env=env)
    wait_for(lambda: seen[0], timeout=30, what="a to see b alive")
    stop.set()
    wait_for(lambda: ev.first(lambda st: peer_state(st, b.id) == "alive"), timeout=5,
             what="an event showing b alive")
    delay = ev.first(lambda st: peer_state(st, b.id) == "alive") - seen[0]
    print(f"join: event {delay * 1000:.0f} ms after /api/status showed the peer alive")
    assert delay < 1.0, f"the join reached the event stream {delay:.2f}s after it happened"

    # it leaves: the same
    assert b.stop() == 0
    wait_for(lambda: peer_state(a.status(), b.id) == "left", timeout=30, interval=0.02,
             what="a to see b leave")
    t_left = time.monotonic()
    wait_for(lambda: ev.first(lambda st: peer_state(st, b.id) == "left"), timeout=5,
             what="an event showing b gone")
    assert ev.first(lambda st: peer_state(st, b.id) == "left") - t_left < 1.0
    ev.close()


def test_events_client_that_never_reads_is_dropped(start_node):
    # snapshots 10 times a second; the stalled-reader timeout far away, so only the per-client
    # queue cap can drop the client
    env = dict(ENV, MESH_LLM_EVENTS_MS="100", MESH_LLM_HTTP_WRITE_MS="600000")
    a = start_node("--port", "0", "--own-mesh", env=env)
    reader = EventStream(a.console_port).start()
    wait_for(lambda: reader.events, timeout=10, what="a reading client's first snapshot")
    # the start-up speed calibration touches and frees a 32 MiB matrix: measure after it
    wait_for(lambda: a.status()["node"]["speed"]["source"] != "calibrating", timeout=30,
             what="the speed calibration to end")
    rss0 = rss_kb(a.pid)
    stuck = EventStream(a.console_port, rcvbuf=4096)  # never read
    wait_for(lambda: a.status()["events"]["clients"] == 2, timeout=10, what="two clients")
    peak = [rss0]

    def dropped():
        peak[0] = max(peak[0], rss_kb(a.pid))
        return a.status()["events"]["dropped"] == 1
    wait_for(dropped, timeout=120, interval=0.2, what="the client that does not read to be dropped")
    st = a.status()
    assert st["events"]["clients"] == 1
    assert "dropping an event-stream client" in a.stderr()
    print(f"RSS before {rss0} kB, peak {peak[0]} kB, after drop {rss_kb(a.pid)} kB")
    # what it could hold: its capped queue (256 KiB) and a snapshot in flight, with slack for
    # the allocator
    assert SANITIZED or peak[0] - rss0 < 4096, f"RSS grew by {peak[0] - rss0} kB"
    # the reading client keeps getting snapshots
    n = len(reader.events)
    wait_for(lambda: len(reader.events) > n + 5, timeout=10, what="more snapshots after the drop")
    assert not reader.closed
    stuck.close()
    reader.close()


def test_request_log_local_tunnel_and_cap(start_node):
    a = start_node("--port", "0", "--model", model_path(A_MODEL), env=ENV)
    b = start_node("--port", "0", "--model", model_path(B_MODEL), "--join", a.token, env=ENV)
    wait_for(lambda: {m["name"]: m["status"] for m in a.status().get("catalog", [])}
             .get(B_MODEL) == "ready", timeout=60, what="b's model ready in a's catalog")
    r = a.request("POST", "/v1/chat/completions",
                  {"model": A_MODEL, "stream": True, "max_tokens": 16, "temperature": 0,
                   "messages": [{"role": "user", "content": "Once upon a time"}]})
    assert r.status == 200, r
    r = a.complete(B_MODEL, max_tokens=8)
    assert r.status == 200, r
    log = a.status()["requests"]
    assert [e["model"] for e in log[:2]] == [B_MODEL, A_MODEL]  # newest first
    tun, loc = log[0], log[1]
    assert (loc["node"], loc["route"], loc["status"]) == (a.id, "local", 200)
    assert loc["ttft_ms"] > 0 and loc["tokens"] > 0 and loc["tokens_per_s"] > 0
    assert (tun["node"], tun["route"], tun["status"]) == (b.id, "tunnel", 200)
    assert tun["ttft_ms"] > 0
    assert abs(loc["time_ms"] / 1000 - time.time()) < 60
    # b logged the tunnelled request as one it served itself
    blog = b.status()["requests"]
    assert (blog[0]["model"], blog[0]["node"], blog[0]["route"]) == (B_MODEL, b.id, "local")
    # the log keeps the last 200
    for i in range(205):
        r = a.request("POST", "/v1/completions", {"model": f"no-such-model-{i}", "prompt": "x"})
        assert r.status == 404, r
    log = a.status()["requests"]
    assert len(log) == 200
    assert log[0]["status"] == 404 and log[-1]["status"] == 404
    # a client on another host sees the log but never the token (unchanged rule)
    r = http(a.console_port, "GET", "/api/status", host="127.0.0.1",
             headers={"Host": "example.com"})
    assert r.json()["node"]["token"] is None and len(r.json()["requests"]) == 200

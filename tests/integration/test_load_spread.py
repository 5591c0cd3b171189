"""Load spread (issue 31): a serving node announces each model's `busy` (requests in flight or
queued there, re-announced when its load class changes, core/slots.h), and new requests without
a stickiness key go to the replica with a free slot, the least loaded: from an entry node that
relays (by what the hosts announce, not only its own requests in flight), and from a node whose
own server for the model is full (the local spill, route_decide.h). Real nodes with their default
settings; the busy host's llama-server is frozen (SIGSTOP) so its request stays in flight."""
import os
import signal
import threading

from harness.node import model_path, wait_for
from harness.routing import expected_host, sticky_host

MODEL = "stories260K"
OTHER = "TinyStories-656K-Q8_0"
# a frozen request must not be given up, nor its server restarted, while the test runs
ENV = {"MESH_LLM_FIRST_BYTE_MS": "300000", "MESH_LLM_HANG_TIMEOUT_MS": "300000"}


def host(start_node, *extra):
    return start_node("--model", model_path(MODEL), "--port", "0", "--slots", "1", *extra,
                      env=ENV)


def answers(node):
    r = node.complete(MODEL, max_tokens=4, timeout=30)
    return r.status == 200


def announced(observer, node_id):
    """The serving entry of MODEL node_id announces, as observer sees it ({} none)."""
    for p in observer.status()["peers"]:
        if p["id"] == node_id and p["state"] == "alive":
            return next((s for s in p.get("serving", []) if s["model"] == MODEL), {})
    return {}


def local_model(node):
    return next(m for m in node.request("GET", "/api/v1/models").json()["data"]
                if m["model_name"] == MODEL)


class Asker:
    """Requests in threads; results by name."""

    def __init__(self, node):
        self.node, self.results, self.threads = node, {}, []

    def ask(self, name, **extra):
        def run():
            self.results[name] = self.node.complete(MODEL, max_tokens=4, timeout=240, **extra)
        t = threading.Thread(target=run)
        t.start()
        self.threads.append(t)

    def join(self):
        for t in self.threads:
            t.join(timeout=240)


def two_hosts(start_node):
    a = host(start_node)
    b = host(start_node, "--join", a.token)
    for n in (a, b):
        wait_for(lambda: answers(n), timeout=60, what="the host to answer")
    for x, y in ((a, b), (b, a)):
        wait_for(lambda: announced(x, y.id).get("http_ready") and
                 announced(x, y.id).get("slots") == 1,
                 timeout=30, what="each host to see the other's one slot")
    return a, b


def test_an_entry_node_sends_past_a_host_others_keep_busy(start_node):
    """An entry node with nothing in flight itself sends a new request past its home host once
    that host announces its one slot taken (by a request of its own API): to the free replica.
    With only its own requests in flight counted, it went to the busy home host and waited."""
    a, b = two_hosts(start_node)
    e = start_node("--model", model_path(OTHER), "--join", a.token, "--port", "0", env=ENV)
    by_id = {a.id: a, b.id: b}
    wait_for(lambda: all(announced(e, i).get("http_ready") and "busy" not in announced(e, i)
                         for i in by_id), timeout=60,
             what="the entry node to see both hosts ready and idle")
    h = by_id[expected_host(e.id, MODEL, by_id)]
    other = b if h is a else a
    r = e.complete(MODEL, max_tokens=4, timeout=60)  # nothing busy: the home host
    assert r.status == 200 and r.headers.get("x-mesh-node") == h.id, r
    pid = h.child_for(MODEL)[0]
    busy = Asker(h)
    os.kill(pid, signal.SIGSTOP)
    try:
        busy.ask("held")
        wait_for(lambda: local_model(h)["busy"] == 1, timeout=30,
                 what="the home host's one slot taken")
        assert local_model(h)["free_slots"] == 0
        wait_for(lambda: announced(e, h.id).get("busy") == 1, timeout=30,
                 what="the entry node to hear the home host is busy")
        assert e.status()["routing"]["spilled"] == 0
        r = e.complete(MODEL, max_tokens=4, timeout=60)
        assert r.status == 200, r
        assert r.headers.get("x-mesh-node") == other.id
        assert e.status()["routing"]["spilled"] == 1
        # a stickiness key keeps its host, busy or not: it waits there
        key = next(f"user-{i}" for i in range(200)
                   if sticky_host(f"user-{i}", by_id) == h.id)
        sticky = Asker(e)
        sticky.ask("sticky", user=key)
        wait_for(lambda: local_model(h)["busy"] == 2, timeout=30,
                 what="the sticky request waiting at its busy host")
    finally:
        os.kill(pid, signal.SIGCONT)
    busy.join()
    sticky.join()
    assert busy.results["held"].status == 200, busy.results
    assert sticky.results["sticky"].status == 200, sticky.results
    assert sticky.results["sticky"].headers.get("x-mesh-node") == h.id
    wait_for(lambda: local_model(h)["busy"] == 0, timeout=30, what="the host idle again")
    wait_for(lambda: announced(e, h.id).get("busy") is None, timeout=30,
             what="the host to announce it is idle again (busy absent)")


def test_a_full_node_sends_new_requests_to_a_free_replica(start_node):
    """A node whose own server for the model has no free slot sends a new request of its own API
    to a peer replica that has one (the local spill) instead of queueing it; a request with a
    stickiness key stays and waits; once the peer is full too, a new request waits here."""
    a, b = two_hosts(start_node)
    pid = a.child_for(MODEL)[0]
    q = Asker(a)
    pid_b = None
    os.kill(pid, signal.SIGSTOP)
    try:
        q.ask("held")
        wait_for(lambda: local_model(a)["busy"] == 1, timeout=30, what="a's one slot taken")
        r = a.complete(MODEL, max_tokens=4, timeout=60)
        assert r.status == 200, r
        assert r.headers.get("x-mesh-node") == b.id
        assert a.status()["routing"]["spilled"] == 1
        q.ask("sticky", user="alice")
        wait_for(lambda: local_model(a)["busy"] == 2, timeout=30,
                 what="the keyed request queued at a")
        # b full as well (its own request, announced): a new request of a's waits at a
        pid_b = b.child_for(MODEL)[0]
        qb = Asker(b)
        os.kill(pid_b, signal.SIGSTOP)
        qb.ask("held_b")
        wait_for(lambda: announced(a, b.id).get("busy") == 1, timeout=30,
                 what="a to hear that b is full")
        q.ask("queued")
        wait_for(lambda: local_model(a)["busy"] == 3, timeout=30,
                 what="the third request queued at a")
        assert a.status()["routing"]["spilled"] == 1
    finally:
        os.kill(pid, signal.SIGCONT)
        if pid_b:
            os.kill(pid_b, signal.SIGCONT)
    q.join()
    qb.join()
    for name in ("held", "sticky", "queued"):
        assert q.results[name].status == 200, (name, q.results[name])
        assert q.results[name].headers.get("x-mesh-node") == a.id, name
    assert qb.results["held_b"].status == 200

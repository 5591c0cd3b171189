"""Passive nodes (seed 002) with real processes: `--client` nodes check in with active nodes over
ROUTE_REQUEST, never gossip, route their requests to a host picked by hash(own id + model), and
survive the loss of a host within a refresh period."""
import os
import signal
import threading
import time


from harness.node import model_path, wait_for
from harness.routing import expected_host, sticky_host

MODEL = "stories260K"
REFRESH_MS = 4000
HB_MS = 1000
IDLE_MS = 3000  # a killed host's connections end at the QUIC idle timeout
ENV = {
    "MESH_LLM_ROUTE_REFRESH_MS": str(REFRESH_MS),
    "MESH_LLM_HEARTBEAT_MS": str(HB_MS),
    "MESH_LLM_QUIC_IDLE_MS": str(IDLE_MS),
}


def home_of(node):
    return node.env["MESH_LLM_HOME"]


def start_client(start_node, token, headless=True):
    args = ["--client", "--join", token, "--port", "0"]
    if headless:
        args.append("--headless")
    return start_node(*args, env=ENV)


def answers(node, **extra):
    r = node.complete(MODEL, max_tokens=4, timeout=30, **extra)
    if r.status != 200:
        return None
    return r.json()["choices"][0]["text"] is not None


def ready_host(start_node, *extra):
    n = start_node("--model", model_path(MODEL), "--port", "0", *extra, env=ENV)
    wait_for(lambda: answers(n), timeout=60, what="the host to answer")
    return n


def test_thirty_clients_stay_out_of_gossip(start_node):
    host = ready_host(start_node)
    before = host.status()["stats"]
    clients = [start_client(start_node, host.token) for _ in range(30)]
    ids = {c.id for c in clients}
    assert len(ids) == 30
    for c in clients:
        assert wait_for(lambda: answers(c), timeout=30, what=f"client {c.id[:8]} to answer")
    st = wait_for(lambda: (lambda s: s if ids <= {p["id"] for p in s["passive"]} else None)(
        host.status()), timeout=2 * REFRESH_MS / 1000 + 10, what="every client listed as passive")
    passive = {p["id"]: p for p in st["passive"]}
    for i in ids:
        assert passive[i]["role"] == "client"
        assert passive[i]["last_checkin"] > time.time() - 60
    # not gossip members: not peers, no gossip traffic with them
    assert not ids & {p["id"] for p in st["peers"]}
    assert st["peers"] == []
    assert st["stats"]["gossip_received"] == before["gossip_received"]
    assert st["stats"]["gossip_sent"] == before["gossip_sent"]
    assert st["stats"]["route_answered"] >= 30
    # a client writes nothing to its state directory
    for c in clients:
        h = home_of(c)
        assert not os.path.exists(h) or os.listdir(h) == [], os.listdir(h)
    # a client lists the mesh's models from its table
    m = clients[0].request("GET", "/v1/models").json()
    (e,) = [x for x in m["data"] if x["id"] == MODEL]
    assert e["status"] == "ready" and e["hosts"] == [host.id]
    # the host holds per-peer state for each connected client, and none once they are gone
    assert host.status()["stats"]["peer_entries"] >= 30
    for c in clients:
        assert c.stop() == 0
    wait_for(lambda: host.status()["stats"]["peer_entries"] == 0, timeout=30,
             what="the host to forget the clients' entries")


def test_clients_spread_over_hosts_and_survive_a_host(start_node):
    a = ready_host(start_node)
    b = ready_host(start_node, "--join", a.token)
    wait_for(lambda: {p["id"] for p in a.status()["peers"] if p["state"] == "alive"} == {b.id},
             timeout=20, what="the hosts to see each other")
    hosts = {a.id, b.id}
    clients, expect = [], {}
    # enough clients that both hosts are picked (decided by the hash; bounded)
    while len(clients) < 6 or (set(expect.values()) != hosts and len(clients) < 20):
        c = start_client(start_node, a.token, headless=False)
        clients.append(c)
        expect[c.id] = expected_host(c.id, MODEL, hosts)
    assert set(expect.values()) == hosts
    # the table lists both hosts before the clients are asked
    for c in clients:
        wait_for(lambda: next((len(x["hosts"]) == 2 for x in
                               c.request("GET", "/v1/models").json()["data"]
                               if x["id"] == MODEL), False),
                 timeout=2 * REFRESH_MS / 1000 + 10, what="both hosts in the client's table")
    for c in clients:
        for _ in range(2):
            assert answers(c)
        fwd = c.status()["route"]["forwarded"]
        assert fwd == {expect[c.id]: 2}, (c.id, fwd, expect[c.id])
    # a sticky key wins over the node id: one user goes to one host from every client
    users = {}
    for c in clients[:4]:
        before = dict(c.status()["route"]["forwarded"])
        assert answers(c, user="alice")
        after = c.status()["route"]["forwarded"]
        (h,) = [k for k in after if after[k] != before.get(k, 0)]
        users[c.id] = h
    assert len(set(users.values())) == 1
    # kill b: every client still gets answers (retry before the first byte, then new tables)
    b.remember_children()
    t0 = time.monotonic()
    b.proc.send_signal(signal.SIGKILL)
    b.proc.wait(timeout=10)
    bound = REFRESH_MS / 1000 + IDLE_MS / 1000 + 10  # slack for a loaded machine
    for c in clients:
        assert wait_for(lambda: answers(c), timeout=bound, what=f"client {c.id[:8]} after the kill")
    took = time.monotonic() - t0
    print(f"every client answered {took:.1f} s after the host was killed")
    # their next tables list only a
    for c in clients:
        wait_for(lambda: next((x["hosts"] == [a.id] for x in
                               c.request("GET", "/v1/models").json()["data"]
                               if x["id"] == MODEL), False),
                 timeout=2 * REFRESH_MS / 1000 + 3 * HB_MS / 1000 + 10,
                 what="the dead host gone from the client's table")


def test_client_spills_to_the_next_host_when_its_host_is_full(start_node):
    """Two hosts with one slot each (-np 1, announced as "slots"); the client's hashed host has
    one of the client's requests in flight (its llama-server frozen, so it stays in flight):
    the next request without a stickiness key goes to the other host; a sticky one stays."""
    # a frozen request must not be given up for lack of a first byte while the test runs
    env = dict(ENV, MESH_LLM_FIRST_BYTE_MS="300000")
    np1 = ("--model", model_path(MODEL), "--port", "0", "--llamacpp-args", "-np 1")
    a = start_node(*np1, env=env)
    b = start_node(*np1, "--join", a.token, env=env)
    for n in (a, b):
        wait_for(lambda: answers(n), timeout=60, what="the host to answer")
    wait_for(lambda: {p["id"] for p in a.status()["peers"] if p["state"] == "alive"} == {b.id},
             timeout=20, what="the hosts to see each other")
    c = start_node("--client", "--join", a.token, "--port", "0", env=env)
    wait_for(lambda: next((len(x["hosts"]) == 2 for x in c.request("GET", "/v1/models").json()
                           ["data"] if x["id"] == MODEL), False),
             timeout=2 * REFRESH_MS / 1000 + 10, what="both hosts in the client's table")
    by_id = {a.id: a, b.id: b}
    h = by_id[expected_host(c.id, MODEL, by_id)]
    other = b if h is a else a
    key = next(f"user-{i}" for i in range(100) if sticky_host(f"user-{i}", by_id) == h.id)
    pid = h.child_for(MODEL)[0]
    results = {}

    def ask(name, **extra):
        body = dict(model=MODEL, prompt="Once upon a time", max_tokens=4, temperature=0, **extra)
        results[name] = c.request("POST", "/v1/completions", body, timeout=240)

    threads = []
    os.kill(pid, signal.SIGSTOP)
    try:
        threads.append(threading.Thread(target=ask, args=("first",)))
        threads[-1].start()
        wait_for(lambda: c.status()["route"]["in_flight"].get(h.id) == 1, timeout=30,
                 what="the first request in flight at the hashed host")
        # the hashed host's one slot is taken by this client: the next request spills over
        r = c.request("POST", "/v1/completions", dict(model=MODEL, prompt="Once", max_tokens=4),
                      timeout=60)
        assert r.status == 200, r
        assert r.headers.get("x-mesh-node") == other.id
        route = c.status()["route"]
        assert route["spilled"] == 1 and route["forwarded"] == {h.id: 1, other.id: 1}, route
        assert route["in_flight"] == {h.id: 1}, route
        # a stickiness key keeps its host (KV-cache locality), full or not
        threads.append(threading.Thread(target=ask, args=("sticky",), kwargs={"user": key}))
        threads[-1].start()
        wait_for(lambda: c.status()["route"]["in_flight"].get(h.id) == 2, timeout=30,
                 what="the sticky request waiting at its own host")
        assert c.status()["route"]["spilled"] == 1
    finally:
        os.kill(pid, signal.SIGCONT)
    for t in threads:
        t.join(timeout=240)
    assert results["first"].status == 200 and results["sticky"].status == 200, results
    assert results["first"].headers.get("x-mesh-node") == h.id
    assert results["sticky"].headers.get("x-mesh-node") == h.id
    wait_for(lambda: c.status()["route"]["in_flight"] == {}, timeout=10, what="nothing in flight")


def test_a_key_reaches_one_host_through_active_and_passive_entries(start_node):
    """The one stickiness rule (issue 30 S20): a request with a stickiness key reaches the host
    FNV-1a(key) picks among the model's hosts in id order, whether it enters through an active
    node (one that does not serve the model itself, so it relays) or through a --client. A
    "user": "" does not count as a key (the active router used to pin it, and every session with
    it, on FNV-1a(""); a client ignored the session_id behind it); its session_id does."""
    a = ready_host(start_node)
    b = ready_host(start_node, "--join", a.token)
    # an active entry node serving another model: it routes stories260K to a or b
    e = start_node("--model", model_path("TinyStories-656K-Q8_0"), "--join", a.token,
                   "--port", "0", env=ENV)
    c = start_client(start_node, a.token, headless=False)
    hosts = {a.id, b.id}
    wait_for(lambda: {p["id"] for p in e.status()["peers"] if p["state"] == "alive"} >= hosts,
             timeout=30, what="the entry node to see both hosts")
    for n in (e, c):
        wait_for(lambda: sorted(next((m for m in n.status()["catalog"] if m["name"] == MODEL),
                                     {}).get("hosts", [])) == sorted(hosts),
                 timeout=2 * REFRESH_MS / 1000 + 30, what="both hosts in the entry's catalog")
        wait_for(lambda: answers(n), timeout=30, what="an answer through the entry node")

    def served_by(node, **key):
        r = node.complete(MODEL, max_tokens=4, **key)
        assert r.status == 200, r
        return r.headers.get("x-mesh-node")

    # keys on both hosts: users, and sessions with an empty user
    users = [f"user-{i}" for i in range(6)]
    sessions = [f"session-{i}" for i in range(6)]
    assert {sticky_host(k, hosts) for k in sessions} == hosts
    for u in users:
        want = sticky_host(u, hosts)
        assert served_by(e, user=u) == want, ("active entry", u)
        assert served_by(c, user=u) == want, ("client", u)
    for s in sessions:
        want = sticky_host(s, hosts)
        assert served_by(e, user="", session_id=s) == want, ("active entry", s)
        # a client follows the same rule (it had no key here: every such session on its
        # home host)
        assert served_by(c, user="", session_id=s) == want, ("client", s)
        assert served_by(c, session_id=s) == want, ("client, no user", s)

"""Demand tracking, standby promotion, demotion and idle unload (real processes, short timers)."""
import os
import signal

from harness.node import children_of, cmdline, model_path, pid_alive, wait_for
from harness.mesh import ENV, wait_converged

SMALL = "stories260K"
TINY = "TinyStories-656K-Q8_0"

# 1 s demand windows (one request per window = 60 per minute), idle after 3 s, kept at least 2 s;
# a passive standby checks in every 3 s (each attempt bounded by 1 s)
REFRESH_MS = 3000
DEMAND_ENV = dict(ENV, MESH_LLM_DEMAND_WINDOW_MS="1000", MESH_LLM_IDLE_UNLOAD_MS="3000",
                  MESH_LLM_MIN_SERVE_MS="2000", MESH_LLM_ROUTE_REFRESH_MS=str(REFRESH_MS))


def env_for(tmp_path, name):
    env = dict(DEMAND_ENV)
    env["LLAMA_CACHE"] = str(tmp_path / f"llama-cache-{name}")
    return env


def models_dir(tmp_path, name, *models):
    d = tmp_path / f"models-{name}"
    d.mkdir()
    for m in models:
        os.symlink(model_path(m), d / f"{m}.gguf")
    return str(d)


def demand(node):
    return node.status()["node"]["demand"]


def rule(node):
    a = node.status()["node"].get("assignment")
    return a["rule"] if a else None


def serving(node, model):
    """The plan entry of model on node when it serves it as a replica, else None."""
    for p in node.status()["plan"]:
        if p["model"] == model and p["role"] == "replica":
            return p
    return None


def children(node, kind):
    """pids of node's children whose program is kind (llama-server / rpc-server)."""
    out = []
    for c in children_of(node.pid):
        argv = cmdline(c)
        if argv and kind in os.path.basename(argv[0]):
            node.child_pids.add(c)
            out.append(c)
    return out


def llama_pid(node, model):
    c = node.child_for(model)
    return c[0] if c else None


def ready_on(node, model):
    for m in node.request("GET", "/v1/models").json()["data"]:
        if m["id"] == model:
            return m["status"] == "ready"
    return False


def wait_standby(node, demotions, pid):
    """node demoted `demotions` times in all: standby, its llama-server (pid) and any
    rpc-server gone."""
    wait_for(lambda: demand(node)["demotions"] >= demotions and demand(node)["standby"],
             timeout=60, what=f"{node.id[:8]} back to standby")
    assert demand(node)["demotions"] == demotions
    assert rule(node) == "standby" and node.status()["plan"] == []
    wait_for(lambda: not pid_alive(pid), timeout=30, what="the demoted llama-server to exit")
    wait_for(lambda: not children(node, "llama-server"), timeout=30, what="no llama-server")
    assert children(node, "rpc-server") == []


def catalog_entry(node, model):
    for e in node.status()["catalog"]:
        if e["name"] == model:
            return e
    return None


def alive_peer_ids(node):
    return {p["id"] for p in node.status()["peers"] if p["state"] == "alive"}


def passive_entry(active, node):
    """active's /api/status "passive" entry for node (seen in its last two refresh periods)."""
    for p in active.status()["passive"]:
        if p["id"] == node.id:
            return p
    return None


def assert_passive_standby(s, active, models_on_disk):
    """s stands by passively: it left gossip (not an alive peer of the active node, no peers of
    its own), checks in with the active node as role standby with its memory and models on
    disk, and the active node's gossip counters do not move while it does."""
    wait_for(lambda: s.status()["node"]["standby"]["passive"], timeout=30,
             what=f"{s.id[:8]} passive")
    wait_for(lambda: s.id not in alive_peer_ids(active), timeout=30,
             what=f"{s.id[:8]} gone from the active node's peers")
    e = wait_for(lambda: passive_entry(active, s), timeout=3 * REFRESH_MS / 1000 + 10,
                 what=f"{s.id[:8]} checked in as passive")
    assert e["role"] == "standby" and e["vram_bytes"] > 0 and e["models"] == models_on_disk, e
    st = s.status()
    assert st["node"]["passive"] and st["route"]["role"] == "standby", st["route"]
    assert [p for p in st["peers"] if p["state"] == "alive"] == []
    assert demand(s)["standby"] and st["plan"] == []
    # its check-ins cost the active node no gossip: two more check-ins, the same counters
    before = active.status()["stats"]
    wait_for(lambda: active.status()["stats"]["route_answered"] >= before["route_answered"] + 2,
             timeout=3 * REFRESH_MS / 1000 + 10, what="two more check-ins")
    after = active.status()["stats"]
    assert s.id not in alive_peer_ids(active)
    assert after["gossip_sent"] == before["gossip_sent"], (before, after)
    assert after["gossip_received"] == before["gossip_received"], (before, after)


def test_standby_promotes_on_demand_and_when_the_host_dies(start_node, tmp_path):
    a = start_node("--port", "0", "--model", model_path(SMALL), env=env_for(tmp_path, "a"))
    s = start_node("--port", "0", "--models-dir", models_dir(tmp_path, "s", SMALL),
                   "--join", a.token, env=env_for(tmp_path, "s"))
    wait_converged([a, s])
    # join: everything is covered, S fits it → another replica (seed 000 rule 5)
    wait_for(lambda: rule(s) == "biggest" and serving(s, SMALL), timeout=30, what="S replica")
    wait_for(lambda: llama_pid(s, SMALL), timeout=30, what="S's llama-server")
    first = llama_pid(s, SMALL)
    # no request for the idle period, A (--model, pinned) keeps serving: S unloads, stands by
    wait_standby(s, 1, first)
    assert demand(s)["promotions"] == 0
    assert ready_on(a, SMALL)
    assert_passive_standby(s, a, 1)
    assert children(s, "llama-server") == []

    # (c) demand: requests to A, ≥ 10 per minute per host → S, passive, sees A's load in its
    # routing table and promotes for the hot model
    seen = {}

    def drive_then_promoted():
        assert a.complete(SMALL, max_tokens=1).status == 200
        seen["a"] = max(seen.get("a", 0), demand(a)["request_rates"].get(SMALL, 0))
        return serving(s, SMALL)

    wait_for(drive_then_promoted, timeout=90, interval=0.1, what="S promoted under demand")
    assert rule(s) == "promoted_hot"
    assert seen["a"] >= 10, seen
    assert not s.status()["node"]["standby"]["passive"]
    # promoted: a gossip member again, and the demand is visible on both sides
    wait_converged([a, s])

    def demand_visible():
        assert a.complete(SMALL, max_tokens=1).status == 200
        for n in (a, s):
            e = catalog_entry(n, SMALL)
            m = [x for x in n.request("GET", "/v1/models").json()["data"] if x["id"] == SMALL][0]
            if not (e["request_rate"] >= 10 and e["last_request"] > 0 and m["request_rate"] >= 10):
                return False
        return True

    wait_for(demand_visible, timeout=30, interval=0.1, what="the demand in both catalogs")
    da = demand(a)
    assert da["last_request"][SMALL] > 0
    wait_for(lambda: ready_on(s, SMALL) and llama_pid(s, SMALL), timeout=30, what="S ready")
    second = llama_pid(s, SMALL)
    # the demand stops: after the idle period S demotes again, its llama-server gone, passive
    wait_standby(s, 2, second)
    assert_passive_standby(s, a, 1)
    assert catalog_entry(a, SMALL)["request_rate"] == 0

    # (a) the only host dies: no active node answers S's check-ins → S promotes and answers
    a.stop(signal.SIGKILL)
    wait_for(lambda: serving(s, SMALL), timeout=60, what="S promoted after the host died")
    assert rule(s) == "promoted_all_hosts_gone"
    wait_for(lambda: ready_on(s, SMALL), timeout=30, what="S's model ready")
    assert s.complete(SMALL).status == 200
    assert demand(s)["promotions"] == 2
    assert s.status()["node"]["standby"] == {"passive": False, "went_passive": 2,
                                             "went_active": 2}


def test_standby_promotes_for_an_unserved_model_it_holds(start_node, tmp_path):
    a = start_node("--port", "0", "--model", model_path(SMALL), env=env_for(tmp_path, "a"))
    b = start_node("--port", "0", "--model", model_path(TINY), "--join", a.token,
                   env=env_for(tmp_path, "b"))
    wait_converged([a, b])
    wait_for(lambda: ready_on(a, TINY) and ready_on(b, SMALL), timeout=60, what="both served")
    s = start_node("--port", "0", "--models-dir", models_dir(tmp_path, "s", SMALL, TINY),
                   "--join", a.token, env=env_for(tmp_path, "s"))
    wait_converged([a, b, s])
    # both models served: S takes another replica of the larger one, then unloads it when idle
    wait_for(lambda: rule(s) == "biggest" and serving(s, SMALL), timeout=30, what="S replica")
    wait_for(lambda: llama_pid(s, SMALL), timeout=30, what="S's llama-server")
    wait_standby(s, 1, llama_pid(s, SMALL))
    # standing by passively: out of both active nodes' gossip, checking in with one of them
    wait_for(lambda: s.status()["node"]["standby"]["passive"], timeout=30, what="S passive")
    wait_for(lambda: s.id not in alive_peer_ids(a) | alive_peer_ids(b), timeout=30,
             what="S gone from the peers")
    e = wait_for(lambda: passive_entry(a, s) or passive_entry(b, s),
                 timeout=3 * REFRESH_MS / 1000 + 10, what="S checked in")
    assert e["role"] == "standby" and e["models"] == 2, e
    # (b) B leaves: TINY, on S's disk, has no host → S promotes for it
    b.stop()
    wait_for(lambda: serving(s, TINY), timeout=60, what="S promoted for the unserved model")
    assert rule(s) == "promoted_unserved"
    wait_for(lambda: ready_on(s, TINY), timeout=30, what="TINY ready on S")
    # S joined gossip again: A reaches TINY through S
    wait_converged([a, s])
    wait_for(lambda: ready_on(a, TINY), timeout=30, what="TINY ready seen by A")
    assert a.complete(TINY).status == 200


def test_modelless_joiner_stands_by_passively(start_node, tmp_path):
    """A node joined without --model and nothing on disk that the mesh gives nothing stands by
    passively: not a gossip member, listed as a standby, answering through the host."""
    a = start_node("--port", "0", "--model", model_path(SMALL), env=env_for(tmp_path, "a"))
    wait_for(lambda: ready_on(a, SMALL), timeout=60, what="A ready")
    s = start_node("--port", "0", "--join", a.token, env=env_for(tmp_path, "s"))
    assert_passive_standby(s, a, 0)
    assert demand(s)["demotions"] == 0 and demand(s)["promotions"] == 0
    r = s.complete(SMALL, max_tokens=2)
    assert r.status == 200, r
    assert r.headers.get("x-mesh-node") == a.id
    assert s.status()["route"]["forwarded"] == {a.id: 1}
    # a model nobody has: 404 from the table
    assert s.complete("no-such-model").status == 404
    # the only host leaves: the standby (nothing on disk, nothing to promote for) answers 503
    # with the OpenAI error shape, never hangs
    a.stop()
    r = s.complete(SMALL, max_tokens=2)
    assert r.status == 503 and r.json()["error"]["type"] == "unavailable", r
    assert demand(s)["promotions"] == 0

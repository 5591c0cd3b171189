"""Demand tracking, standby promotion, demotion and idle unload (real processes, short timers)."""
import os
import signal

from conftest import children_of, cmdline, model_path, pid_alive, wait_for
from test_mesh import ENV, wait_converged

SMALL = "stories260K"
TINY = "TinyStories-656K-Q8_0"

# 1 s demand windows (one request per window = 60 per minute), idle after 3 s, kept at least 2 s
DEMAND_ENV = dict(ENV, MESH_LLM_DEMAND_WINDOW_MS="1000", MESH_LLM_IDLE_UNLOAD_MS="3000",
                  MESH_LLM_MIN_SERVE_MS="2000")


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

    # (c) demand: requests to A, ≥ 10 per minute per host → S promotes for the hot model
    def drive_then_promoted():
        assert a.complete(SMALL, max_tokens=1).status == 200
        return serving(s, SMALL)

    wait_for(drive_then_promoted, timeout=60, interval=0.1, what="S promoted under demand")
    assert rule(s) == "promoted_hot"
    # the demand is visible: A counts it, the mesh sums it, /v1/models and /api/status show it
    da = demand(a)
    assert da["request_rates"][SMALL] >= 10 and da["last_request"][SMALL] > 0
    for n in (a, s):
        e = catalog_entry(n, SMALL)
        assert e["request_rate"] >= 10 and e["last_request"] > 0, e
        m = [x for x in n.request("GET", "/v1/models").json()["data"] if x["id"] == SMALL][0]
        assert m["request_rate"] >= 10 and m["last_request"] == e["last_request"], m
    wait_for(lambda: ready_on(s, SMALL) and llama_pid(s, SMALL), timeout=30, what="S ready")
    second = llama_pid(s, SMALL)
    # the demand stops: after the idle period S demotes again, its llama-server gone
    wait_standby(s, 2, second)
    assert catalog_entry(a, SMALL)["request_rate"] == 0

    # (a) the only host dies: S promotes and answers itself
    a.stop(signal.SIGKILL)
    wait_for(lambda: serving(s, SMALL), timeout=60, what="S promoted after the host died")
    assert rule(s) == "promoted_all_hosts_gone"
    wait_for(lambda: ready_on(s, SMALL), timeout=30, what="S's model ready")
    assert s.complete(SMALL).status == 200
    assert demand(s)["promotions"] == 2


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
    # (b) B leaves: TINY, on S's disk, has no host → S promotes for it
    b.stop()
    wait_for(lambda: serving(s, TINY), timeout=60, what="S promoted for the unserved model")
    assert rule(s) == "promoted_unserved"
    wait_for(lambda: ready_on(s, TINY), timeout=30, what="TINY ready on S")
    # A reaches it through S
    assert a.complete(TINY).status == 200

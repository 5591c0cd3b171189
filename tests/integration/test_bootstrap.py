"""The bootstrap proxy (seed 001): a node that joins a mesh answers at once, before its own
llama-server is ready — a request sent while its replica of a model still loads is served by a
ready peer, without waiting for the local load; once the local copy is ready, it serves itself.

B's llama-server is slow to load by a real process: B's --bin-dir holds a llama-server wrapper
that waits (bounded) for a gate file the test creates before it execs the real llama-server;
every other invocation (--list-devices, the offer probe) runs the real one at once. B's
"mesh-llm ready" line waits for its --model load, so the test gives B its ports and reads its id
from /api/status."""
import os
import stat

from harness.node import BIN_DIR, free_port, model_path, wait_for
from harness.mesh import ENV, wait_converged

MODEL = "stories260K"
GATE_S = 100  # the wrapper's bound (under the node's 2-min load timeout): it execs anyway

WRAPPER = """#!/bin/sh
# a llama-server whose model load waits for {gate} (at most {bound} s)
case " $* " in
*" --model "*|*" -m "*)
    i=0
    while [ ! -e '{gate}' ] && [ $i -lt {ticks} ]; do sleep 0.1; i=$((i + 1)); done ;;
esac
exec '{real}' "$@"
"""


def slow_bin_dir(tmp_path):
    """A --bin-dir whose llama-server loads a model only once the returned gate file exists."""
    real = BIN_DIR or os.path.dirname(os.environ.get("MESH_LLM_LLAMA_SERVER", ""))
    assert real and os.path.isfile(os.path.join(real, "llama-server")), \
        "MESH_LLM_BIN_DIR names the llama.cpp binaries (scripts/llama.sh)"
    d = tmp_path / "slow-bin"
    d.mkdir()
    gate = str(tmp_path / "load-gate")
    for name in os.listdir(real):
        if name != "llama-server":
            os.symlink(os.path.join(real, name), d / name)
    w = d / "llama-server"
    w.write_text(WRAPPER.format(gate=gate, bound=GATE_S, ticks=GATE_S * 10,
                                real=os.path.join(real, "llama-server")))
    w.chmod(w.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return str(d), gate


def local_status(node, model):
    return next((m["status"] for m in node.status()["models"] if m["name"] == model), None)


def test_request_during_local_load_is_answered_by_a_ready_peer(start_node, tmp_path):
    bin_dir, gate = slow_bin_dir(tmp_path)
    a = start_node("--port", "0", "--model", model_path(MODEL), env=ENV)
    wait_for(lambda: a.complete(MODEL, max_tokens=2).status == 200, timeout=60,
             what=f"{MODEL} served on a")
    b = start_node("--port", str(free_port()), "--console", str(free_port()), "--model",
                   model_path(MODEL), "--join", a.token, "--bin-dir", bin_dir, env=ENV,
                   wait_ready=False)
    b.api_port = int(b.args[b.args.index("--port") + 1])
    b.console_port = int(b.args[b.args.index("--console") + 1])

    def b_member():
        try:
            st = b.status(timeout=2)
        except (OSError, AssertionError):
            return None
        return st["node"]["id"] if st["node"]["state"] == "member" else None

    b.id = wait_for(b_member, timeout=60, what="b to join the mesh")
    wait_converged([a, b])
    # b's llama-server was started for the model and waits at the gate: "loading" on b
    # (its argv[0] is the wrapper's shell: /api/status's processes name it, not child_for)
    wait_for(lambda: any(p["kind"] == "llama-server" and p["model"] == MODEL
                         for p in b.status()["processes"]), timeout=60,
             what="b's llama-server started")
    assert local_status(b, MODEL) == "loading"
    # b knows a's server answers (a hosts the model in b's catalog)
    wait_for(lambda: a.id in next((m["hosts"] for m in b.status()["catalog"]
                                   if m["name"] == MODEL), []),
             timeout=30, what=f"b to see a hosting {MODEL}")
    # asked of b, the request is answered by a — through the mesh, not after b's load
    r = b.request("POST", "/v1/completions", {"model": MODEL, "prompt": "Once upon a time",
                                              "max_tokens": 8, "temperature": 0}, timeout=30)
    assert r.status == 200, r
    assert r.headers.get("x-mesh-node") == a.id, r.headers
    assert r.headers.get("x-mesh-route") == f"tunnel:{a.id}", r.headers
    assert r.json()["choices"][0]["text"], r
    # the answer came while b's own load was still under way (the gate is still closed)
    assert not os.path.exists(gate) and local_status(b, MODEL) == "loading"
    # b's load finishes: b serves the model itself again
    open(gate, "w").close()
    wait_for(lambda: local_status(b, MODEL) == "ready", timeout=120, what=f"{MODEL} ready on b")
    assert b.wait_ready(timeout=60)["id"] == b.id
    r = b.complete(MODEL)
    assert r.status == 200, r
    assert r.headers.get("x-mesh-node") == b.id and r.headers.get("x-mesh-route") == "local", \
        r.headers

"""A split takes the near worker (issue 34 item 1, seed 004 "node load and latency metrics"): the
election orders a split's workers by the RTT matrix the nodes announce (rtt_ms, core/rtt.c),
with a kept worker's RTT counted at half (election.h's hysteresis). Real delay: every node in
its own network namespace, every packet between them through mesh-netimp
(harness/netimp.py; the kernel's netem is not available on these machines).

The host needs one worker. A far worker (40 ms) that has more memory than the near one (1 ms)
joins first: the split forms with it (so 40 ms is inside the 80 ms bound, and without the RTT
order the larger memory would keep winning). Then the near worker joins: 1 ms < 40 / 2 ms, so
the split moves to it, the far one holds no layers, and the split still answers a solo node's
greedy text."""
import pytest

from harness.impaired import WHY_NOT
from harness.mesh import ENV, wait_converged
from harness.node import model_path, wait_for
from harness.split import SMALL, SMALL_CTX, SMALL_SIZE, gb, models_dir, models_status, plan_of

pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=f"impaired networks: {WHY_NOT}")

FAR_MS, NEAR_MS = 40, 1
PROMPT = "Once upon a time"


def greedy(node):
    r = node.request("POST", "/v1/completions",
                     {"model": SMALL, "prompt": PROMPT, "max_tokens": 24, "temperature": 0,
                      "seed": 42, "ignore_eos": True}, timeout=120)
    assert r.status == 200, r
    return r.json()["choices"][0]["text"]


def split_worker(host):
    """The id of the one worker of host's launched split of SMALL, or None."""
    p = plan_of(host, SMALL)
    if not p or p.get("role") != "host" or not p.get("launched") or len(p["workers"]) != 1:
        return None
    return p["workers"][0]["id"]


def holds_layers(node):
    """Whether node's own plan makes it a worker of SMALL with layers to hold."""
    p = plan_of(node, SMALL)
    return bool(p and p.get("role") == "worker" and p["layers"]["end"] > p["layers"]["first"])


def test_split_moves_to_the_low_rtt_worker(impaired, start_node, tmp_path):
    net = impaired(4)
    # node 1: the host; 2: the far worker; 3: the near one; 4: a solo node for the reference
    net.link(1, 2, rtt_ms=FAR_MS)
    net.link(2, 3, rtt_ms=FAR_MS)
    net.link(1, 3, rtt_ms=NEAR_MS)
    env = lambda name: dict(ENV, LLAMA_CACHE=str(tmp_path / f"cache-{name}"))

    solo = start_node("--port", "0", "--model", model_path(SMALL), *SMALL_CTX, env=env("solo"),
                      ns=net.ns(4))
    wait_for(lambda: models_status(solo).get(SMALL) == "ready", timeout=90, what="solo ready")
    want = greedy(solo)
    assert len(want) > 20
    solo.stop()

    # the host is the node with the most memory; host + either worker is >= 1.1 x the size,
    # the host alone is not
    host = start_node("--port", "0", "--model", model_path(SMALL), *SMALL_CTX,
                      "--max-vram", gb(0.7 * SMALL_SIZE), env=env("host"), ns=net.ns(1))
    far = start_node("--port", "0", "--models-dir", models_dir(tmp_path, "far", SMALL),
                     *SMALL_CTX, "--max-vram", gb(0.6 * SMALL_SIZE), "--join", host.token,
                     env=env("far"), ns=net.ns(2))
    wait_converged([host, far], timeout=60)
    got = wait_for(lambda: split_worker(host), timeout=180, what="the split with the far worker")
    assert got == far.id
    wait_for(lambda: holds_layers(far), timeout=60, what="the far worker holding layers")

    near = start_node("--port", "0", "--models-dir", models_dir(tmp_path, "near", SMALL),
                      *SMALL_CTX, "--max-vram", gb(0.55 * SMALL_SIZE), "--join", host.token,
                      env=env("near"), ns=net.ns(3))
    wait_converged([host, far, near], timeout=60)
    wait_for(lambda: split_worker(host) == near.id, timeout=180,
             what="the split moved to the near worker")

    # the RTTs the host decided on are the links' (rtt.h steps of the least RTT; never below the
    # delay set, near it on a busy machine)
    def announced_rtt():
        r = host.status()["node"]["peer_rtt_ms"]
        return r if far.id in r and near.id in r else None
    rtt = wait_for(announced_rtt, timeout=30, what="the host's announced RTT to both workers")
    assert rtt[far.id] >= FAR_MS - 1 and rtt[near.id] < FAR_MS / 2, rtt

    # seen from every node's /api/status: the near one holds layers, the far one none
    wait_for(lambda: holds_layers(near), timeout=60, what="the near worker holding layers")
    wait_for(lambda: not holds_layers(far), timeout=60, what="the far worker holding nothing")
    p = plan_of(host, SMALL)
    assert [w["id"] for w in p["workers"]] == [near.id], p
    assert p["workers"][0]["end"] > p["workers"][0]["first"], p
    wait_for(lambda: models_status(host).get(SMALL) == "ready", timeout=90,
             what="the split with the near worker ready")
    assert greedy(host) == want
    assert near.status()["rpc_tunnel"]["worker_rx"] > 0

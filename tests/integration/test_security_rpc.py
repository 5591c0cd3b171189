"""A split worker's rpc-server is reachable only by the host of the plan it works for."""
import subprocess

from harness.node import wait_for
from harness.mesh import TEST_PEER
from harness.split import SMALL, greedy, plan_of, split_pair, text


def test_rpc_tunnel_only_from_the_plan_host(start_node, tmp_path):
    a, b = split_pair(start_node, tmp_path)
    host, worker = (a, b) if plan_of(a, SMALL)["role"] == "host" else (b, a)
    assert plan_of(worker, SMALL)["role"] == "worker"
    before = worker.status()["rpc_tunnel"]["worker_rx"]
    # an admitted member that is not the host opens TUNNEL_RPC to the worker
    r = subprocess.run([TEST_PEER, worker.token, "rpc", SMALL], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    assert "refused" in r.stdout and "0 bytes back" in r.stdout, r.stdout
    wait_for(lambda: "refused an rpc tunnel from" in worker.stderr(), timeout=10,
             what="the worker to log the refusal")
    assert worker.status()["rpc_tunnel"]["worker_rx"] == before
    # a model it does not work for at all: refused the same way
    r = subprocess.run([TEST_PEER, worker.token, "rpc", "no-such-model"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and "refused" in r.stdout, r.stdout
    # the real host still reaches it: the split keeps answering
    assert text(greedy(host, SMALL)).strip()
    assert worker.status()["rpc_tunnel"]["worker_rx"] >= before

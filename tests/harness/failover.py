"""The failover tests' mesh (from test_failover.py): one model on replicas behind a passive client,
heartbeat 400 ms, the client's routing table refreshed every second."""
from harness.mesh import wait_converged
from harness.node import model_path, wait_for

MODEL = "stories260K"
HB_MS = 400  # dead-peer detection ~2.25 heartbeats: test_failover's "within 2 s" bound rests on it
ENV = {"MESH_LLM_HEARTBEAT_MS": str(HB_MS)}
# a passive client fetches its routing table every second, so it sees every replica at once
CLIENT_ENV = dict(ENV, MESH_LLM_ROUTE_REFRESH_MS="1000")


def ready_everywhere(nodes):
    for n in nodes:
        wait_for(lambda: any(m["id"] == MODEL and m["status"] == "ready"
                             for m in n.request("GET", "/v1/models").json()["data"]),
                 timeout=60, what=f"{MODEL} ready as seen from {n.id[:8]}")


def three_nodes(start_node, replicas=2):
    a = start_node("--port", "0", "--model", model_path(MODEL), env=ENV)
    hosts = [a]
    for _ in range(replicas - 1):
        hosts.append(start_node("--port", "0", "--model", model_path(MODEL), "--join", a.token,
                                env=ENV))
    c = start_node("--port", "0", "--client", "--join", a.token, env=CLIENT_ENV)
    if len(hosts) > 1:
        wait_converged(hosts)  # a --client is passive: not a gossip member
    ready_everywhere([c])
    # the client's catalog lists every replica as a host before the test relies on it
    wait_for(lambda: sorted(next(m for m in c.status()["catalog"] if m["name"] == MODEL)["hosts"])
             == sorted(h.id for h in hosts), timeout=30, what="every replica listed as host")
    return hosts, c

"""Mesh tests' settings and helpers (from test_mesh.py): heartbeat 1 s, the dead-peer bound, the
hostile test peer, waiting for a mesh to converge."""
import os

from harness.node import MESH_BIN, wait_for

HB_MS = 1000
PROBE_MS = min(HB_MS // 4, 5000)
ENV = {"MESH_LLM_HEARTBEAT_MS": str(HB_MS)}
# A dead peer is noticed by a monitor after 2.25 heartbeats of silence, confirmed by its probe,
# then every receiver of PEER_DOWN probes once more. Slack: message delays and a loaded CI box.
DEAD_BOUND_S = (2.25 * HB_MS + 2 * PROBE_MS) / 1000 + 2.0
TEST_PEER = os.path.join(os.path.dirname(MESH_BIN), "mesh-test-peer")


def sees(node, others, state="alive"):
    try:
        st = node.peer_states()
    except (OSError, AssertionError):
        return False
    return all(st.get(o.id) == state for o in others)


def wait_converged(nodes, timeout=30):
    for n in nodes:
        others = [o for o in nodes if o is not n]
        wait_for(lambda: sees(n, others), timeout=timeout,
                 what=f"{n.id[:8]} to see {len(others)} peers alive")

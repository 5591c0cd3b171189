"""Speed-aware placement (issue 19 item 4): a really throttled node measures a lower compute
speed at start, announces it, and the split host gives it fewer layers than the
memory-proportional split does — which the same test shows by running that layout too.

Throttling is real: node B and its children run in a cgroup of their own limited to a tenth of
one CPU (tests/harness/cpu_quota.py: cgroup cpu quota); where the machine has no cgroup cpu
controller, B runs on CPU 0 only (taskset) beside CPU hogs pinned to that CPU, which the test
starts and stops by pid, and A on CPU 1. The assertions
are on the layout (which follows the announced speeds and memory exactly, by the rule of
src/core/layer_split.h); the tokens/s these layouts give are measured by bench/split-speed,
never asserted here."""
import os
import signal
import subprocess

import pytest

from harness.cpu_quota import CpuQuota, QuotaUnavailable
from harness.mesh import wait_converged
from harness.node import model_path, wait_for
from harness.split import (SMALL, SMALL_CTX, SMALL_SIZE, env_for, gb, greedy, models_dir,
                           models_status, plan_of, text)

LAYERS = 5  # stories260K: 5 repeating layers + the output layer = 6 slots
EQUAL_RATIO = 1.5  # LS_EQUAL_RATIO
SHARE = 0.1  # node B's CPU quota: a tenth of one CPU
HOGS = 3  # without a cgroup: node B gets about a quarter of CPU 0


class Throttle:
    """Node B's real throttle: a cgroup CPU quota, else taskset + CPU hogs."""

    def __init__(self):
        self.quota, self.hogs = None, []
        try:
            self.quota = CpuQuota("mesh-test-split-speed", SHARE)
            self.how = f"a cgroup quota of {SHARE} CPU"
            self.prefix_a, self.prefix_b = None, self.quota.prefix()
        except QuotaUnavailable:
            if not {0, 1} <= os.sched_getaffinity(0):
                pytest.skip("no cgroup cpu controller, and not CPUs 0 and 1 for taskset")
            self.hogs = start_hogs(HOGS)
            self.how = f"CPU 0 with {HOGS} hogs"
            self.prefix_a, self.prefix_b = ["taskset", "-c", "1"], ["taskset", "-c", "0"]

    def close(self):
        stop_hogs(self.hogs)
        if self.quota:
            self.quota.close()


def start_hogs(n):
    # `timeout` bounds them even if the test dies before its finally
    return [subprocess.Popen(["taskset", "-c", "0", "timeout", "300", "sh", "-c",
                              "while :; do :; done"]) for _ in range(n)]


def stop_hogs(hogs):
    for h in hogs:
        if h.poll() is None:
            h.send_signal(signal.SIGTERM)
    for h in hogs:
        try:
            h.wait(timeout=10)
        except subprocess.TimeoutExpired:
            h.kill()
            h.wait(timeout=10)


def expected_slots(caps, speeds, slots):
    """The rule of layer_split.h in Python: None when it does not apply (proportional)."""
    if any(s <= 0 for s in speeds) or max(speeds) < EQUAL_RATIO * min(speeds):
        return None
    if sum(min(c, slots) for c in caps) < slots:
        return None
    n = len(caps)
    cnt = [1 if slots >= n else 0] * n
    left = slots - sum(cnt)
    for j in sorted(range(n), key=lambda j: (-speeds[j], j)):
        room = max(0, min(caps[j] - cnt[j], left))
        cnt[j] += room
        left -= room
    return cnt


def split(start_node, tmp_path, tag, env_extra, thr):
    """Host A (fast, more memory) and worker B (throttled); neither holds the model alone.
    Returns (a, b) once the split is ready."""
    ea = env_for(tmp_path, f"a{tag}")
    eb = env_for(tmp_path, f"b{tag}")
    ea.update(env_extra)
    eb.update(env_extra)
    a = start_node("--port", "0", "--model", model_path(SMALL), *SMALL_CTX, "--max-vram",
                   gb(1.0 * SMALL_SIZE), env=ea, prefix=thr.prefix_a)
    b = start_node("--port", "0", "--models-dir", models_dir(tmp_path, f"b{tag}", SMALL),
                   *SMALL_CTX, "--max-vram", gb(0.9 * SMALL_SIZE), "--join", a.token, env=eb,
                   prefix=thr.prefix_b)
    wait_converged([a, b])
    wait_for(lambda: models_status(a).get(SMALL) == "ready", timeout=90,
             what=f"the split ready ({tag})")
    return a, b


def layout(a, b):
    """(slots of A, slots of B, the host's plan) from A's plan."""
    hp = plan_of(a, SMALL)
    assert hp["role"] == "host" and hp["mode"] == "split", hp
    assert [w["id"] for w in hp["workers"]] == [b.id], hp
    wb = hp["workers"][0]["weight"]
    return LAYERS + 1 - wb, wb, hp


def test_throttled_node_gets_fewer_layers(start_node, tmp_path):
    thr = Throttle()
    a = b = a2 = b2 = None
    try:
        # 1. speed-aware: each node calibrates at start under its real CPU share
        a, b = split(start_node, tmp_path, "s", {}, thr)
        sa = a.status()
        speed_a = sa["node"]["speed"]
        speed_b = b.status()["node"]["speed"]
        assert speed_a["source"] == "measured" and speed_b["source"] == "measured"
        # A sees B's announced speed (decoded and clamped) as B measured it
        peer_b = [p for p in sa["peers"] if p["id"] == b.id][0]
        assert peer_b["speed_mflops"] == speed_b["mflops"], (peer_b, speed_b)
        print(f"calibrated: A {speed_a['mflops']} MFLOP/s, B ({thr.how}) "
              f"{speed_b['mflops']} MFLOP/s")
        # the real throttle shows in the calibration (a cut of 4x or more; 1.5x needed)
        assert speed_b["mflops"] * EQUAL_RATIO <= speed_a["mflops"], (speed_a, speed_b)
        slots_a, slots_b, hp = layout(a, b)
        assert hp["speed_aware"], hp
        # the layout is the rule applied to the announced speeds and the offered memory
        need = [c for c in sa["catalog"] if c["name"] == SMALL][0]["need_bytes"]
        slot_bytes = -(-need // (LAYERS + 1))
        caps = [n.status()["node"]["memory"]["offered_bytes"] // slot_bytes for n in (a, b)]
        want = expected_slots(caps, [speed_a["mflops"], speed_b["mflops"]], LAYERS + 1)
        assert want == [slots_a, slots_b], (want, slots_a, slots_b, caps)
        # the host keeps its first layers, the worker the rest and the output layer
        assert hp["host_layers"] == {"first": 0, "end": slots_a}, hp
        assert hp["workers"][0]["output"] and hp["workers"][0]["end"] == LAYERS
        # and the split still answers
        want_text = text(greedy(a, SMALL, 24))
        assert len(want_text) > 10
        a.stop()
        b.stop()

        # 2. memory-proportional in the same run: the same nodes, calibration off
        a2, b2 = split(start_node, tmp_path, "m", {"MESH_LLM_SPEED_MFLOPS": "0"}, thr)
        assert a2.status()["node"]["speed"]["source"] == "off"
        pa, pb, hp2 = layout(a2, b2)
        assert not hp2["speed_aware"], hp2
        print(f"slots of B (throttled): speed-aware {slots_b}, memory-proportional {pb}")
        assert slots_b < pb, (slots_b, pb)
        # both layouts compute the same greedy text
        assert text(greedy(a2, SMALL, 24)) == want_text
        a2.stop()
        b2.stop()
    finally:
        for n in (a, b, a2, b2):
            if n is not None:
                n.stop()
        thr.close()

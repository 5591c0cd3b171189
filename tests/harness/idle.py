"""Idle nodes (from test_idle.py): a node started with no mesh arguments prints
`mesh-llm idle …` instead of its ready line."""
import queue
import time

import pytest

from harness.mesh import ENV


def wait_idle(n, timeout=30.0):
    """Wait for the idle line `mesh-llm idle api=P console=C id=ID`; fills n's ports and id."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            pytest.fail(f"no idle line in {timeout}s; stderr:\n{n.stderr()}")
        try:
            line = n.lines.get(timeout=min(left, 0.5))
        except queue.Empty:
            if n.proc.poll() is not None:
                pytest.fail(f"node exited with {n.proc.returncode}; stderr:\n{n.stderr()}")
            continue
        if line.startswith("mesh-llm ready "):
            pytest.fail(f"node is not idle: {line}")
        if line.startswith("mesh-llm idle "):
            kv = dict(x.split("=", 1) for x in line.split()[2:])
            n.api_port, n.console_port, n.id = int(kv["api"]), int(kv["console"]), kv["id"]
            return n


def start_idle(start_node, *args, env=None):
    return wait_idle(start_node("--port", "0", *args, env=env or ENV, wait_ready=False))

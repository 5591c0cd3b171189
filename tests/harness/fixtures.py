"""The fixtures shared by the test modules, loaded as a pytest plugin by tests/conftest.py
(pytest_plugins): a test names one as an argument, no import needed."""
import os
import random
import shutil
import subprocess

import pytest

from harness.hub import Hub
from harness.nat import NatNet
from harness.nat import available as nat_available
from harness.netimp import ImpairedNet
from harness.node import MESH_BIN, Node, sh

NETIMP = os.path.join(os.path.dirname(MESH_BIN), "mesh-netimp")


@pytest.fixture
def start_node(tmp_path):
    nodes = []
    counter = [0]

    def _start(*args, **kw):
        counter[0] += 1
        d = tmp_path / f"node{counter[0]}"
        d.mkdir()
        n = Node(list(args), tmp_path=d, **kw)
        nodes.append(n)
        return n

    yield _start
    for n in nodes:
        n.cleanup()
    # a sanitizer build reports memory errors and leaks on stderr: they fail the test
    for n in nodes:
        err = n.stderr()
        for marker in ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:"):
            if marker in err:
                i = err.index(marker)
                pytest.fail(f"sanitizer report from node {n.pid}:\n{err[max(0, i - 200):i + 3000]}")


# the fake Hugging Face hub (harness/hub.py): test_download.py, test_download_mesh.py
@pytest.fixture
def hub(tmp_path):
    h = Hub(tmp_path)
    yield h
    h.stop()


# a network namespace joined by a veth pair: test_security_http.py, test_idle.py
@pytest.fixture
def netns():
    """A network namespace joined to this one by a veth pair: (ns name, our address)."""
    if not shutil.which("ip") or sh("ip", "netns", "list", check=False).returncode != 0:
        pytest.skip("ip netns is not available")
    tag = f"{os.getpid() % 10000}{random.randrange(100)}"
    ns, va, vb = f"mlsec{tag}", f"mlsa{tag}", f"mlsb{tag}"
    net = f"10.{200 + random.randrange(50)}.{random.randrange(250)}"
    try:
        sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", va, "type", "veth", "peer", "name", vb)
        sh("ip", "link", "set", vb, "netns", ns)
        sh("ip", "addr", "add", f"{net}.1/30", "dev", va)
        sh("ip", "link", "set", va, "up")
        sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"{net}.2/30", "dev", vb)
        sh("ip", "netns", "exec", ns, "ip", "link", "set", vb, "up")
        sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
    except subprocess.CalledProcessError as e:
        sh("ip", "link", "del", va, check=False)
        sh("ip", "netns", "del", ns, check=False)
        pytest.skip(f"cannot set up a network namespace: {e.stderr.decode().strip()}")
    yield ns, f"{net}.1"
    sh("ip", "link", "del", va, check=False)
    sh("ip", "netns", "del", ns, check=False)


# impaired networks (harness/netimp.py; WHY_NOT in harness/impaired.py): test_impaired.py,
# test_liveness.py
@pytest.fixture
def impaired(tmp_path):
    nets = []

    def _make(n, seed=1):
        net = ImpairedNet(n, NETIMP, seed=seed)
        nets.append(net)
        return net

    yield _make
    for net in nets:
        net.close()


# NAT networks (harness/nat.py): test_nat_harness.py and the NAT-traversal tests
@pytest.fixture
def natnet():
    """natnet() -> a NatNet, closed (daemons stopped by pid, namespaces deleted) after the test."""
    why = nat_available()
    if why is not None:
        pytest.skip(f"NAT networks: {why}")
    nets = []

    def _make(**kw):
        net = NatNet(**kw)
        nets.append(net)
        return net

    yield _make
    for net in nets:
        net.close()

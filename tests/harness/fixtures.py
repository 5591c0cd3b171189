"""The fixtures shared by the test modules, loaded as a pytest plugin by tests/conftest.py
(pytest_plugins): a test names one as an argument, no import needed."""
import pytest

from harness.node import Node


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

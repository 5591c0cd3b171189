"""pytest's entry to the shared harness (tests/harness): the fixtures come as a plugin, and this
file's directory, tests/, is what pytest puts on sys.path (its default "prepend" import mode) so
that test modules import `harness.…`. Nothing else under tests/ touches sys.path."""
pytest_plugins = ["harness.fixtures"]


def pytest_configure(config):
    config.addinivalue_line("markers", "asan_smoke: also run against the ASan+UBSan build")

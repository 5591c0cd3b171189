"""The shared test harness: modules the test files under tests/ import (a test module never imports
another test module). tests/conftest.py loads harness.fixtures as a pytest plugin and, being a
conftest in tests/, puts tests/ on sys.path for pytest; the bench scripts, which run outside
pytest, add tests/ with one documented line each. tests/tools/ keeps the programs tests run
(hub_server.py, the C tools) and the check scripts.

    node       a mesh-llm process (Node), HTTP on raw sockets, /proc helpers, wait_for
    fixtures   the fixtures every test module may use (the plugin): start_node, ...
    netimp     impaired networks between namespaces (mesh-netimp), also for bench/
    cpu_quota  a cgroup CPU quota for one node (test_split_speed, bench/split-speed)
    doc_run    runs a document's fenced command blocks (test_docs; also a script)
    soak       the chaos soak engine (tests/soak)
"""

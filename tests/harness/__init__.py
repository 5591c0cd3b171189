"""The shared test harness: the modules test files import. A test module never imports another
test module; what two of them share lives here.

tests/conftest.py loads harness.fixtures as a pytest plugin and, being a conftest in tests/, is
what puts tests/ on sys.path under pytest (its default "prepend" import mode); the bench scripts,
which run outside pytest, add tests/ with one documented line each. Nothing else touches
sys.path (the ctest check_test_imports, tests/tools/check_test_imports.sh, enforces both).
tests/tools/ keeps the programs tests run (hub_server.py, the C tools) and the check scripts.

    node       a mesh-llm process (Node), HTTP on raw sockets, /proc helpers, wait_for, sh
    fixtures   the plugin: start_node, hub, netns, impaired (a test names them, no import)
    mesh       heartbeat 1 s settings, the dead-peer bound, the hostile peer, wait_converged
    split      the small split model, per-node environments and models dirs, split_pair
    failover   one model on replicas behind a passive client (heartbeat 400 ms)
    streams    a streamed answer read event by event (Stream, text_of)
    idle       idle nodes: start_idle, wait_idle
    hub        the fake Hugging Face hub (Hub) and the files it serves
    impaired   WHY_NOT: whether impaired networks can run here (asked once, on import)
    netimp     impaired networks between namespaces (mesh-netimp), also for bench/
    cpu_quota  a cgroup CPU quota for one node (test_split_speed, bench/split-speed)
    doc_run    runs a document's fenced command blocks (test_docs; also a script)
    soak       the chaos soak engine (tests/soak)
"""

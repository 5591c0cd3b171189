"""The memory ledger: no load path starts a model the node's memory cannot hold."""
import os
import threading
import time

from harness.node import http, model_path, wait_for
from harness.mesh import wait_converged
from harness.split import (SMALL, SMALL_CTX, SMALL_SIZE, env_for, gb, greedy, models_dir,
                           models_status, plan_of, text)


def test_model_bigger_than_offer_is_503_not_a_load(start_node, tmp_path):
    """--max-vram 0.0007 (0.7 MB) and the 1.2 MB model in --models-dir: a request for it is a
    503 naming the memory it needs and what is free; no llama-server is ever started."""
    n = start_node("--port", "0", "--max-vram", "0.0007",
                   "--models-dir", models_dir(tmp_path, "n", SMALL))
    assert models_status(n)[SMALL] == "needs_capacity"
    r = n.complete(SMALL)
    assert r.status == 503, r
    err = r.json()["error"]
    assert err["code"] == "insufficient_memory", err
    msg = err["message"]
    assert SMALL in msg and "needs" in msg and "700.0 kB" in msg and "free" in msg, msg
    # the explicit load path obeys the same ledger
    r = n.request("POST", "/api/v1/load", {"model_name": SMALL})
    assert r.status == 503 and r.json()["error"]["code"] == "insufficient_memory", r
    assert n.llama_children() == {}
    assert [p for p in n.status()["processes"] if p["kind"] == "llama-server"] == []
    # the node keeps serving: its health endpoint answers
    assert n.request("GET", "/health").status == 200


def test_context_counts_in_the_need(start_node, tmp_path):
    """The KV cache of the context a model loads with is part of its need: the same node that
    cannot hold stories260K at its trained 2048-token context holds it at 128 tokens."""
    size_mb = SMALL_SIZE / 1e6
    vram = gb(1.5 * SMALL_SIZE)  # 1.1 x size fits; size + KV(2048 tokens) = 2.5 MB does not
    big = start_node("--port", "0", "--max-vram", vram,
                     "--models-dir", models_dir(tmp_path, "big", SMALL))
    r = big.complete(SMALL)
    assert r.status == 503 and r.json()["error"]["code"] == "insufficient_memory", r
    assert "2048-token context" in r.json()["error"]["message"]
    small = start_node("--port", "0", "--max-vram", vram, *SMALL_CTX,
                       "--models-dir", models_dir(tmp_path, "small", SMALL))
    assert small.complete(SMALL).status == 200
    mem = small.status()["node"]["memory"]
    held = mem["held"]
    assert [(h["model"], h["kind"], h["loading"]) for h in held] == [(SMALL, "model", False)]
    # three slots (a fourth does not fit in 1.5 x the file), each with its own KV cache of 128
    # tokens, which llama.cpp pads to 256 cells
    assert held[0]["slots"] == 3 and held[0]["ctx_per_slot"] == 128, held
    assert held[0]["bytes"] == SMALL_SIZE + 3 * KV_SLOT, (held, size_mb)
    assert mem["free_bytes"] == mem["offered_bytes"] - held[0]["bytes"], mem


# stories260K's KV cache of a 128-token slot: llama.cpp pads a slot's context to 256 cells; 5
# layers with 4 KV heads of 8 dimensions, F16 K and V
KV_SLOT = 5 * 256 * (4 * 8 + 4 * 8) * 2


def test_slots_fit_the_memory(start_node, tmp_path):
    """Without --slots a model gets as many parallel slots as the memory free for it holds, up to
    4 and at least 1; --slots asks for a number, and one that does not fit is refused with the
    usual 503 naming the slots."""
    two = SMALL_SIZE + 2 * KV_SLOT  # room for two slots, not three
    n = start_node("--port", "0", "--max-vram", gb(two + 4096), *SMALL_CTX,
                   "--models-dir", models_dir(tmp_path, "two", SMALL))
    assert n.complete(SMALL).status == 200
    held = n.status()["node"]["memory"]["held"]
    assert [(h["slots"], h["ctx_per_slot"], h["bytes"]) for h in held] == [(2, 128, two)], held
    _, port, argv = n.child_for(SMALL)
    assert argv[argv.index("-np") + 1] == "2" and argv[argv.index("--ctx-size") + 1] == "256"
    assert [s["n_ctx"] for s in http(port, "GET", "/slots").json()] == [256, 256]  # padded
    m = n.request("GET", "/api/v1/models").json()["data"]
    assert [(x["slots"], x["ctx_per_slot"]) for x in m] == [(2, 128)], m
    n.stop()
    # asked for three where two fit: refused, the message names them
    m3 = start_node("--port", "0", "--max-vram", gb(two + 4096), *SMALL_CTX, "--slots", "3",
                    "--models-dir", models_dir(tmp_path, "three", SMALL))
    r = m3.complete(SMALL)
    assert r.status == 503 and r.json()["error"]["code"] == "insufficient_memory", r
    assert "3 slot(s) of a 128-token context" in r.json()["error"]["message"], r.json()
    assert "fewer --slots" in r.json()["error"]["message"], r.json()
    # and one asked for gets one, whatever the room
    m1 = start_node("--port", "0", *SMALL_CTX, "--slots", "1",
                    "--models-dir", models_dir(tmp_path, "one", SMALL))
    assert m1.complete(SMALL).status == 200
    _, port, argv = m1.child_for(SMALL)
    assert argv[argv.index("-np") + 1] == "1" and argv[argv.index("--ctx-size") + 1] == "128"
    assert [s["n_ctx"] for s in http(port, "GET", "/slots").json()] == [256]


def test_split_forms_under_requests_never_a_solo_load(start_node, tmp_path):
    """Two nodes offering 0.6 x the model's need each, requests arriving at both while the
    second one joins: they end in a split whose greedy text equals a solo node's, and at no
    moment does either node run the model alone (every llama-server has --rpc)."""
    vram = gb(0.6 * SMALL_SIZE)
    a = start_node("--port", "0", "--model", model_path(SMALL), *SMALL_CTX, "--max-vram", vram,
                   env=env_for(tmp_path, "a"))
    stop = threading.Event()
    solo_loads, statuses = [], []

    def watch(nodes):
        while not stop.is_set():
            for n in list(nodes):
                for pid, argv in n.llama_children().items():
                    if "--rpc" not in argv:
                        solo_loads.append((n.id[:8], pid, argv))
            time.sleep(0.02)

    def hammer(ports):
        body = {"model": SMALL, "prompt": "Once", "max_tokens": 2, "temperature": 0}
        while not stop.is_set():
            for p in list(ports):
                try:
                    statuses.append(http(p, "POST", "/v1/completions", body, timeout=60).status)
                except OSError:
                    pass

    nodes, ports = [a], [a.api_port]
    threads = [threading.Thread(target=watch, args=(nodes,), daemon=True),
               threading.Thread(target=hammer, args=(ports,), daemon=True)]
    for t in threads:
        t.start()
    try:
        b = start_node("--port", "0", "--models-dir", models_dir(tmp_path, "b", SMALL),
                       *SMALL_CTX, "--max-vram", vram, "--join", a.token,
                       env=env_for(tmp_path, "b"))
        nodes.append(b)
        ports.append(b.api_port)
        wait_converged([a, b])
        for n in (a, b):
            wait_for(lambda: models_status(n).get(SMALL) == "ready", timeout=90,
                     what=f"the split ready on {n.id[:8]}")
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=70)
    assert not solo_loads, solo_loads
    assert statuses, "no request was made during the join"
    assert set(statuses) <= {200, 503}, statuses
    roles = sorted(plan_of(n, SMALL)["role"] for n in (a, b))
    assert roles == ["host", "worker"], roles
    solo = start_node("--port", "0", "--model", model_path(SMALL), *SMALL_CTX,
                      env=env_for(tmp_path, "s"))
    want = text(greedy(solo, SMALL))
    for n in (a, b):
        assert text(greedy(n, SMALL)) == want, n.id[:8]
    # the worker's shard and the host's share are in their ledgers, within what they offer
    for n in (a, b):
        mem = n.status()["node"]["memory"]
        assert sum(h["bytes"] for h in mem["held"]) <= mem["offered_bytes"], mem
        assert {h["kind"] for h in mem["held"]} in ({"model"}, {"worker"}), mem

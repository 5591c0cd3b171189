"""Allocation, split groups over llama.cpp RPC through mesh tunnels, and re-election."""
import os
import signal
import subprocess
import time

from harness.mesh import wait_converged
from harness.node import http, model_path, wait_for
from harness.split import (PROMPT, SMALL, SMALL_CTX, SMALL_SIZE, SYNTH_BIN, TINY, env_for, gb,
                           greedy, models_dir, models_status, plan_of, split_pair, text)


def assignment(node):
    a = node.status()["node"].get("assignment")
    return (a["rule"], a["model"]) if a and a["rule"] else None


def test_allocation_picks_by_rule(start_node, tmp_path):
    """Nodes without --model holding both files: the heuristic decides, and says which rule."""
    a = start_node("--port", "0", "--model", model_path(SMALL), env=env_for(tmp_path, "a"))
    # D: SMALL is served, TINY is not and D has it and fits it → rule 2 "unserved"
    d = start_node("--port", "0", "--models-dir", models_dir(tmp_path, "d", SMALL, TINY),
                   "--join", a.token, env=env_for(tmp_path, "d"))
    wait_for(lambda: assignment(d) is not None, timeout=30, what="D's assignment")
    assert assignment(d) == ("unserved", TINY)
    wait_for(lambda: models_status(a).get(TINY) == "ready", timeout=30,
             what="D's model ready, seen from A")
    assert plan_of(d, TINY)["role"] == "replica"
    # E: both served solo; everything is covered → rule 5 "biggest": another replica of the
    # larger model (SMALL, 1.2 MB > TINY, 0.75 MB), which E fits
    e = start_node("--port", "0", "--models-dir", models_dir(tmp_path, "e", SMALL, TINY),
                   "--join", d.token, env=env_for(tmp_path, "e"))
    wait_for(lambda: assignment(e) is not None, timeout=30, what="E's assignment")
    assert assignment(e) == ("biggest", SMALL)
    wait_for(lambda: plan_of(e, SMALL)["role"] == "replica", timeout=30, what="E replica")
    # G: same files, but too little memory for either alone and nothing is split: standby
    g = start_node("--port", "0", "--models-dir", models_dir(tmp_path, "g", SMALL, TINY),
                   *SMALL_CTX, "--max-vram", gb(0.5 * SMALL_SIZE), "--join", a.token,
                   env=env_for(tmp_path, "g"))
    wait_converged([a, d, e, g])
    wait_for(lambda: g.status()["node"]["assignment"]["rule"] == "standby", timeout=30,
             what="G standing by")
    assert g.status()["plan"] == [] and g.status()["node"]["role"] == "worker"
    # and every node still answers for both models, through the mesh where needed
    for n in (a, d, e, g):
        for m in (SMALL, TINY):
            assert n.complete(m).status == 200, (n.id[:8], m)


def test_split_answers_like_solo(start_node, tmp_path):
    a, b = split_pair(start_node, tmp_path)
    assert assignment(b) == ("cant_run_without_me", SMALL)
    plans = {n.id: plan_of(n, SMALL) for n in (a, b)}
    host = a if plans[a.id]["role"] == "host" else b
    worker = b if host is a else a
    hp, wp = plans[host.id], plans[worker.id]
    assert hp["mode"] == "split" and wp["role"] == "worker" and wp["host"] == host.id
    assert [w["id"] for w in hp["workers"]] == [worker.id] and hp["launched"]
    # the host keeps the first layers on its CPU, the worker the rest and the output layer
    assert wp["layers"]["output"] and wp["layers"]["end"] == 5 and wp["layers"]["first"] >= 1
    # the host's llama-server reaches the worker's rpc-server through its local tunnel port
    port = hp["workers"][0]["tunnel_port"]
    llama = [p for p in host.status()["processes"] if p["kind"] == "llama-server"]
    assert len(llama) == 1, llama
    args = llama[0]["args"]
    assert args[args.index("--rpc") + 1] == f"127.0.0.1:{port}", args
    assert args[args.index("-ngl") + 1] == str(hp["ngl"])
    rpc = [p for p in worker.status()["processes"] if p["kind"] == "rpc-server"]
    assert len(rpc) == 1 and "127.0.0.1" in rpc[0]["args"], rpc
    # greedy text through the split, asked of either node, equals a solo node's
    solo = start_node("--port", "0", "--model", model_path(SMALL), env=env_for(tmp_path, "s"))
    want = text(greedy(solo, SMALL))
    assert len(want) > 20
    for n in (a, b):
        assert text(greedy(n, SMALL)) == want, n.id[:8]
    # the layers really live on the worker: bytes went through its end of the RPC tunnel
    assert worker.status()["rpc_tunnel"]["worker_rx"] > 0
    assert host.status()["rpc_tunnel"]["host_tx"] > 0


def test_forced_split(start_node, tmp_path):
    """--split: a group splits even though each node could hold the model alone."""
    a = start_node("--port", "0", "--model", model_path(SMALL), "--split",
                   env=env_for(tmp_path, "a"))
    b = start_node("--port", "0", "--models-dir", models_dir(tmp_path, "b", SMALL),
                   "--join", a.token, env=env_for(tmp_path, "b"))
    wait_converged([a, b])
    wait_for(lambda: models_status(b).get(SMALL) == "ready"
             and {(plan_of(n, SMALL) or {}).get("role") for n in (a, b)} == {"host", "worker"},
             timeout=60, what="a forced split")
    assert plan_of(a, SMALL)["mode"] == "split"
    solo = start_node("--port", "0", "--model", model_path(SMALL), env=env_for(tmp_path, "s"))
    want = text(greedy(solo, SMALL))
    assert text(greedy(a, SMALL)) == want and text(greedy(b, SMALL)) == want


def test_split_worker_gone_then_back(start_node, tmp_path):
    """The group shrinks below the model's need: 503 with the status, never a hang."""
    a, b = split_pair(start_node, tmp_path)
    want = text(greedy(a, SMALL))
    b.stop()
    wait_for(lambda: models_status(a).get(SMALL) == "needs_capacity", timeout=20,
             what="the model to need capacity once the group is too small")
    r = a.complete(SMALL)
    assert r.status == 503 and SMALL in r.json()["error"]["message"], r
    b2 = start_node("--port", "0", "--models-dir", models_dir(tmp_path, "b2", SMALL),
                    *SMALL_CTX, "--max-vram", gb(0.6 * SMALL_SIZE), "--join", a.token,
                    env=env_for(tmp_path, "b2"))
    wait_for(lambda: models_status(b2).get(SMALL) == "ready", timeout=60, what="split again")
    assert text(greedy(b2, SMALL)) == want


def test_worker_role_ends_rpc_server_stops(start_node, tmp_path):
    """The worker's role ends (its host left, alone it cannot run the model): its rpc-server
    stops instead of lingering with the host's layers in memory."""
    a, b = split_pair(start_node, tmp_path)
    host = a if plan_of(a, SMALL)["role"] == "host" else b
    worker = b if host is a else a
    rpc = [p for p in worker.status()["processes"] if p["kind"] == "rpc-server"]
    assert len(rpc) == 1, rpc
    pid = rpc[0]["pid"]
    host.stop()
    wait_for(lambda: (plan_of(worker, SMALL) or {}).get("role") == "waiting", timeout=30,
             what="the worker to wait once its host left")
    wait_for(lambda: not [p for p in worker.status()["processes"] if p["kind"] == "rpc-server"],
             timeout=30, what="the worker's rpc-server to stop")

    def gone():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False
    wait_for(gone, timeout=10, what=f"rpc-server pid {pid} to exit")


def test_host_killed_model_reelected(start_node, tmp_path):
    vram = gb(0.6 * SMALL_SIZE)
    a = start_node("--port", "0", "--model", model_path(SMALL), *SMALL_CTX, "--max-vram", vram,
                   env=env_for(tmp_path, "a"))
    others = [start_node("--port", "0", "--models-dir", models_dir(tmp_path, x, SMALL),
                         *SMALL_CTX, "--max-vram", vram, "--join", a.token, env=env_for(tmp_path, x))
              for x in ("b", "c")]
    nodes = [a] + others
    wait_converged(nodes)

    def host_of():
        hosts = [n for n in nodes if n.proc.poll() is None
                 and (plan_of(n, SMALL) or {}).get("role") == "host"]
        return hosts[0] if len(hosts) == 1 else None

    for n in nodes:
        wait_for(lambda: models_status(n).get(SMALL) == "ready", timeout=90,
                 what=f"ready on {n.id[:8]}")
    wait_for(lambda: host_of() is not None, timeout=30, what="one host")
    host = host_of()
    want = text(greedy(host, SMALL))
    host.proc.send_signal(signal.SIGKILL)
    host.proc.wait(timeout=10)
    rest = [n for n in nodes if n is not host]
    # until the model is re-elected and loaded, requests end quickly with 503 — never hang
    deadline = time.monotonic() + 90
    seen = []
    while True:
        assert time.monotonic() < deadline, f"no recovery; statuses {seen}"
        t0 = time.monotonic()
        r = http(rest[len(seen) % 2].api_port, "POST", "/v1/completions",
                 {"model": SMALL, "prompt": PROMPT, "max_tokens": 40, "temperature": 0,
                  "seed": 42}, timeout=60)
        took = time.monotonic() - t0
        seen.append(r.status)
        assert r.status in (200, 503), r
        assert took < 45, f"a request during the re-election took {took:.1f}s"
        if r.status == 200:
            break
        time.sleep(0.3)
    print("statuses during the re-election:", seen)
    assert text(r) == want
    new_host = host_of()
    assert new_host is not None and new_host is not host
    for n in rest:
        assert text(greedy(n, SMALL)) == want


def synth_model(tmp_path):
    """A random-weight llama GGUF whose weights are almost all in tensors > 10 MiB: 2 layers of
    1664x1664 F32 matrices (10.6 MiB each), tied output, Q4_0 embeddings (~156 MB)."""
    out = tmp_path / "synth.gguf"
    subprocess.run([SYNTH_BIN, "--template", model_path(SMALL), "--out", str(out), "--dim", "1664",
                    "--ffn", "1664", "--layers", "2", "--heads", "8", "--seed", "7", "--tied",
                    "--embd-type", "q4_0", "--name", "synth"], check=True, capture_output=True)
    return str(out)


def test_split_weights_not_sent_when_worker_has_file(start_node, tmp_path):
    synth = synth_model(tmp_path)
    size = os.path.getsize(synth)
    mdir = tmp_path / "models-b"
    mdir.mkdir()
    os.symlink(synth, mdir / "synth.gguf")
    # A offers more memory than B: A hosts, B is the worker; together they hold the model
    a = start_node("--port", "0", "--model", synth, "--max-vram", gb(0.6 * size), "--ctx-size",
                   "256", env=env_for(tmp_path, "a"))
    b = start_node("--port", "0", "--models-dir", str(mdir), "--max-vram", gb(0.55 * size),
                   "--ctx-size", "256", "--join", a.token, env=env_for(tmp_path, "b"))
    wait_for(lambda: models_status(b).get("synth") == "ready", timeout=120, what="split ready")
    wp = plan_of(b, "synth")
    assert wp["role"] == "worker" and wp["host"] == a.id, wp
    # B filled its rpc cache from its own file before A loaded: the big tensors never crossed
    assert wp["seeded_bytes_written"] + wp["seeded_bytes_present"] > 0.4 * size, wp
    rx = b.status()["rpc_tunnel"]["worker_rx"]
    print(f"bytes into the worker's rpc-server through the tunnel: {rx} of {size}")
    assert rx <= 0.01 * size, (rx, size)
    want = text(greedy(a, "synth", 16))
    b.stop()
    wait_for(lambda: models_status(a).get("synth") == "needs_capacity", timeout=30,
             what="the group too small again")
    # C has no copy of the file: it lends its memory and the weights come through the tunnel
    empty = tmp_path / "models-c"
    empty.mkdir()
    c = start_node("--port", "0", "--models-dir", str(empty), "--max-vram", gb(0.55 * size),
                   "--ctx-size", "256", "--join", a.token, env=env_for(tmp_path, "c"))
    wait_for(lambda: models_status(c).get("synth") == "ready", timeout=120, what="split again")
    cp = plan_of(c, "synth")
    assert cp["role"] == "worker" and not cp["has_file"], cp
    layers = cp["layers"]["end"] - cp["layers"]["first"]
    per_layer = 7 * 1664 * 1664 * 4
    rx = c.status()["rpc_tunnel"]["worker_rx"]
    print(f"without the file: {rx} bytes through the tunnel ({layers} layer(s))")
    assert layers >= 1 and rx >= layers * per_layer, (rx, layers)
    # and the answer is the same either way, and the same as one node alone
    assert text(greedy(c, "synth", 16)) == want
    solo = start_node("--port", "0", "--model", synth, "--ctx-size", "256",
                      env=env_for(tmp_path, "s"))
    assert text(greedy(solo, "synth", 16)) == want

"""The GPU path on a software Vulkan device (issue 28): the Vulkan flavour of the pinned llama.cpp
(scripts/llama.sh: ggml's backends as loadable modules, the Vulkan one prebuilt from the same
pin) runs on Mesa's lavapipe, the Vulkan driver Debian ships for machines without a GPU. The same
code a Vulkan GPU takes: device detection, the offer, the announcement, all layers on the device.

lavapipe is a CPU-type Vulkan device: llama.cpp hides it unless GGML_VK_VISIBLE_DEVICES names it,
so a node never takes it on its own (checked below); these tests name it.

`make test` sets the flavour up (MESH_LLM_FLAVOR=vulkan scripts/llama.sh) and passes its
directory as MESH_LLM_VULKAN_BIN_DIR. A directory that is not the Vulkan flavour (its setup fell
back to the CPU) fails the tests with the setup's reason: a GPU path that was never run is not a
pass."""
import os
import subprocess

import pytest

from harness.mesh import wait_converged
from harness.node import cmdline, model_path, wait_for
from harness.split import SMALL, SMALL_CTX, SMALL_SIZE, env_for, gb, models_dir, models_status, \
    plan_of, text

VK_DIR = os.environ.get("MESH_LLM_VULKAN_BIN_DIR", "")
LAVAPIPE = {"GGML_VK_VISIBLE_DEVICES": "0"}
PROMPT = "Once upon a time"
N_LAYERS = 5  # stories260K's repeating layers (+ the output layer: 6 offloaded)


@pytest.fixture(scope="module")
def vk_dir():
    assert VK_DIR, "MESH_LLM_VULKAN_BIN_DIR is not set: run through make test (make integration)"
    flavour = os.path.join(VK_DIR, "FLAVOUR")
    failed = os.path.join(os.path.dirname(VK_DIR), ".failed")
    if not os.path.exists(flavour) or open(flavour).read().strip() != "vulkan":
        why = open(failed).read() if os.path.exists(failed) else "no build there"
        pytest.fail(f"{VK_DIR} is not the Vulkan flavour of llama.cpp: {why}")
    return VK_DIR


def list_devices(d, env):
    e = dict(os.environ)
    e.pop("GGML_VK_VISIBLE_DEVICES", None)
    e.update(env)
    r = subprocess.run([os.path.join(d, "llama-server"), "--list-devices"], env=e,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout + r.stderr


def greedy_text(node, n=24):
    return text(node.complete(SMALL, prompt=PROMPT, max_tokens=n, seed=42))


def test_lavapipe_is_listed_only_when_named(vk_dir):
    named = list_devices(vk_dir, LAVAPIPE)
    assert "Vulkan0: llvmpipe" in named, named
    hidden = list_devices(vk_dir, {})
    assert "Vulkan0" not in hidden, hidden  # a CPU-type Vulkan device is not taken unasked


def test_node_on_vulkan_offers_the_device_and_answers_like_the_cpu(vk_dir, start_node, tmp_path):
    cpu = start_node("--port", "0", "--model", model_path(SMALL), *SMALL_CTX)
    wait_for(lambda: models_status(cpu).get(SMALL) == "ready", timeout=120, what="the CPU model")
    want = greedy_text(cpu)
    st = cpu.status()
    assert st["node"]["llama_flavour"] == "cpu"
    assert st["node"]["devices"] == []
    cpu.stop()

    # default settings, as a user runs it: no --max-vram, so the node asks llama-server
    vk = start_node("--port", "0", "--model", model_path(SMALL), *SMALL_CTX, "--verbose",
                    "--bin-dir", vk_dir, env=LAVAPIPE, ready_timeout=180)
    wait_for(lambda: models_status(vk).get(SMALL) == "ready", timeout=300,
             what="the model on the Vulkan device (shaders compile at load)")
    st = vk.status()
    node = st["node"]
    assert node["llama_flavour"] == "vulkan"
    assert len(node["devices"]) == 1, node["devices"]
    dev = node["devices"][0]
    assert dev["name"] == "Vulkan0" and dev["backend"] == "Vulkan", dev
    assert dev["description"].startswith("llvmpipe"), dev
    assert dev["total_bytes"] > 0 and 0 < dev["free_bytes"] <= dev["total_bytes"], dev
    # the offer is that device's free memory, not half the RAM
    assert node["memory"]["offered_bytes"] == dev["free_bytes"], node["memory"]
    # every layer on the device: llama.cpp's own report, from its output (--verbose)
    wait_for(lambda: f"offloaded {N_LAYERS + 1}/{N_LAYERS + 1} layers to GPU" in vk.stderr(),
             timeout=30, what="llama-server's offload report")
    assert "Vulkan0" in vk.stderr()
    got = greedy_text(vk)
    assert got == want, f"Vulkan: {got!r}\nCPU:    {want!r}"
    # seed 003's health: the model's device is the GPU class
    loaded = vk.request("GET", "/api/v1/health").json()["all_models_loaded"]
    assert [m["device"] for m in loaded] == ["gpu"], loaded
    # mesh-llm status shows the flavour and the device
    r = subprocess.run([vk.args[0], "status", "--console", str(vk.console_port)],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert "llama.cpp vulkan: Vulkan0 llvmpipe" in r.stdout, r.stdout


def test_peers_see_the_device_and_a_vulkan_host_splits_with_a_cpu_worker(vk_dir, start_node,
                                                                         tmp_path):
    """A Vulkan host and a CPU worker: the worker learns the host's device from gossip, and a
    model neither can hold alone is split between them and answers the solo text — with every
    layer offloaded, the host's own on its Vulkan device (election_device_layout)."""
    solo = start_node("--port", "0", "--model", model_path(SMALL), *SMALL_CTX)
    wait_for(lambda: models_status(solo).get(SMALL) == "ready", timeout=120, what="solo")
    want = greedy_text(solo, 40)
    solo.stop()

    vram = gb(0.6 * SMALL_SIZE)  # neither fits alone (1.1 x size), together they do
    env_a = dict(env_for(tmp_path, "a"), **LAVAPIPE)
    a = start_node("--port", "0", "--model", model_path(SMALL), *SMALL_CTX, "--max-vram",
                   gb(0.65 * SMALL_SIZE), "--verbose", "--bin-dir", vk_dir, env=env_a,
                   ready_timeout=180)  # more memory than b: the election's host
    b = start_node("--port", "0", "--models-dir", models_dir(tmp_path, "b", SMALL), *SMALL_CTX,
                   "--max-vram", vram, "--join", a.token, env=env_for(tmp_path, "b"))
    wait_converged([a, b])
    for n in (a, b):
        wait_for(lambda n=n: models_status(n).get(SMALL) == "ready", timeout=300,
                 what=f"the split model ready on {n.id[:8]}")
    p = plan_of(a, SMALL)
    assert p["mode"] == "split" and p["role"] == "host", p
    assert text(a.complete(SMALL, prompt=PROMPT, max_tokens=40, seed=42)) == want
    # a host with a device offloads every layer: the worker (first in llama.cpp's device order)
    # the first ones, the host the last ones and the output layer on Vulkan0
    _, _, argv = a.child_for(SMALL)
    assert argv[argv.index("-ngl") + 1] == str(N_LAYERS + 1), argv
    weights = argv[argv.index("--tensor-split") + 1].split(",")
    assert len(weights) == 2 and all(int(x) > 0 for x in weights), argv
    assert p["workers"][0]["first"] == 0, p
    wait_for(lambda: "Vulkan0 model buffer size" in a.stderr(), timeout=30,
             what="the host's layers on Vulkan0")
    # the worker sees the Vulkan node's device in its peer list (gossip, decoded and checked):
    # listed under --max-vram too, which sets only the offer
    mine = a.status()["node"]
    assert mine["llama_flavour"] == "vulkan"
    assert [d["name"] for d in mine["devices"]] == ["Vulkan0"], mine["devices"]
    wait_for(lambda: [q for q in b.status()["peers"] if q["id"] == a.id][0]["devices"] ==
             mine["devices"], timeout=30, what="the Vulkan device in the worker's peer list")
    assert [q for q in a.status()["peers"] if q["id"] == b.id][0]["devices"] == []


def test_partial_offload_from_the_plan_and_the_ledger_refusal(vk_dir, start_node, tmp_path):
    """--offload-ram: the device's memory (--max-vram caps it: 0.6 x the model) plus RAM for the
    layers beyond it. A model in between loads with -ngl from the ledger (floor(5 x 0.6 x size /
    its 1.1 x size need) = 2 of 5 layers on the device, llama.cpp's own count says 2/6 with the
    output layer on the CPU) and answers the CPU's text; one bigger than both together is the
    usual 503 and never starts a llama-server."""
    cpu = start_node("--port", "0", "--model", model_path(SMALL), *SMALL_CTX)
    wait_for(lambda: models_status(cpu).get(SMALL) == "ready", timeout=120, what="the CPU model")
    want = greedy_text(cpu)
    cpu.stop()

    part = gb(0.6 * SMALL_SIZE)
    vk = start_node("--port", "0", "--model", model_path(SMALL), *SMALL_CTX, "--verbose",
                    "--max-vram", part, "--offload-ram", part, "--bin-dir", vk_dir, env=LAVAPIPE,
                    ready_timeout=180)
    wait_for(lambda: models_status(vk).get(SMALL) == "ready", timeout=300, what="partial offload")
    err = vk.stderr()
    assert f"model {SMALL}: 2 of its {N_LAYERS} layers on the devices" in err, err
    wait_for(lambda: f"offloaded 2/{N_LAYERS + 1} layers to GPU" in vk.stderr(), timeout=30,
             what="llama-server's offload report")
    _, _, argv = vk.child_for(SMALL)
    assert argv[argv.index("-ngl") + 1] == "2", argv
    assert vk.status()["node"]["memory"]["offered_bytes"] == 2 * int(float(part) * 1e9)
    assert greedy_text(vk) == want
    vk.stop()

    small = gb(0.3 * SMALL_SIZE)  # 0.6 x size in all, the model needs 1.1 x
    big = start_node("--port", "0", "--max-vram", small, "--offload-ram", small,
                     "--models-dir", models_dir(tmp_path, "big", SMALL), "--bin-dir", vk_dir,
                     env=LAVAPIPE)
    assert models_status(big)[SMALL] == "needs_capacity"
    r = big.complete(SMALL)
    assert r.status == 503 and r.json()["error"]["code"] == "insufficient_memory", r
    assert big.llama_children() == {}
    assert big.request("GET", "/health").status == 200


def test_a_vulkan_worker_computes_its_layers_on_its_device(vk_dir, start_node, tmp_path):
    """A CPU host (more memory: the election's host) and a Vulkan worker: the worker's
    rpc-server serves its layers from the Vulkan device (its own device list says so) and the
    split answers the solo text."""
    solo = start_node("--port", "0", "--model", model_path(SMALL), *SMALL_CTX)
    wait_for(lambda: models_status(solo).get(SMALL) == "ready", timeout=120, what="solo")
    want = greedy_text(solo, 40)
    solo.stop()

    a = start_node("--port", "0", "--model", model_path(SMALL), *SMALL_CTX, "--max-vram",
                   gb(0.65 * SMALL_SIZE), env=env_for(tmp_path, "a"))
    b = start_node("--port", "0", "--models-dir", models_dir(tmp_path, "b", SMALL), *SMALL_CTX,
                   "--max-vram", gb(0.6 * SMALL_SIZE), "--join", a.token, "--verbose",
                   "--bin-dir", vk_dir, env=dict(env_for(tmp_path, "b"), **LAVAPIPE))
    wait_converged([a, b])
    for n in (a, b):
        wait_for(lambda n=n: models_status(n).get(SMALL) == "ready", timeout=300,
                 what=f"the split model ready on {n.id[:8]}")
    assert plan_of(a, SMALL)["role"] == "host" and plan_of(b, SMALL)["role"] == "worker"
    assert text(a.complete(SMALL, prompt=PROMPT, max_tokens=40, seed=42)) == want
    # the worker's rpc-server: the Vulkan flavour's, serving from Vulkan0
    rpc = [p for p in b.status()["processes"] if p["kind"] == "rpc-server"]
    assert rpc, b.status()["processes"]
    exe = cmdline(rpc[0]["pid"])[0]
    assert os.path.dirname(os.path.realpath(exe)) == os.path.realpath(vk_dir), exe
    wait_for(lambda: "Vulkan0: llvmpipe" in b.stderr(), timeout=30,
             what="the worker's rpc-server listing its Vulkan device")


def test_device_chooses_what_the_node_uses(vk_dir, start_node, tmp_path):
    """--device: the node offers, shows and gives its children only the devices named; none is
    the CPU only (half the RAM offered, llama-server told --device none) with the CPU's text; a
    name llama-server does not list stops the start with the names it does list."""
    cpu = start_node("--port", "0", "--model", model_path(SMALL), *SMALL_CTX)
    wait_for(lambda: models_status(cpu).get(SMALL) == "ready", timeout=120, what="the CPU model")
    want = greedy_text(cpu)
    cpu.stop()

    on = start_node("--port", "0", "--model", model_path(SMALL), *SMALL_CTX, "--device",
                    "Vulkan0", "--verbose", "--bin-dir", vk_dir, env=LAVAPIPE, ready_timeout=180)
    wait_for(lambda: models_status(on).get(SMALL) == "ready", timeout=300, what="on Vulkan0")
    wait_for(lambda: "Vulkan0 KV buffer size" in on.stderr(), timeout=30,
             what="the KV cache on Vulkan0")
    assert [d["name"] for d in on.status()["node"]["devices"]] == ["Vulkan0"]
    _, _, argv = on.child_for(SMALL)
    assert argv[argv.index("--device") + 1] == "Vulkan0", argv
    on.stop()

    off = start_node("--port", "0", "--model", model_path(SMALL), *SMALL_CTX, "--device", "none",
                     "--verbose", "--bin-dir", vk_dir, env=LAVAPIPE, ready_timeout=180)
    wait_for(lambda: models_status(off).get(SMALL) == "ready", timeout=300, what="CPU only")
    node = off.status()["node"]
    assert node["devices"] == [] and node["llama_flavour"] == "vulkan", node
    assert "half of the available RAM" in off.stderr()
    _, _, argv = off.child_for(SMALL)
    assert argv[argv.index("--device") + 1] == "none", argv
    # llama.cpp's own placement: weights and KV cache in CPU buffers, none on Vulkan0
    wait_for(lambda: "CPU KV buffer size" in off.stderr(), timeout=30, what="the KV cache line")
    assert "Vulkan0 model buffer" not in off.stderr() and "Vulkan0 KV" not in off.stderr()
    assert greedy_text(off) == want
    loaded = off.request("GET", "/api/v1/health").json()["all_models_loaded"]
    assert [m["device"] for m in loaded] == ["cpu"], loaded
    off.stop()

    bad = start_node("--port", "0", "--model", model_path(SMALL), "--device", "CUDA3",
                     "--bin-dir", vk_dir, env=LAVAPIPE, wait_ready=False)
    assert bad.proc.wait(timeout=60) == 1
    err = bad.stderr()
    assert "--device CUDA3: llama-server lists no device CUDA3; it lists Vulkan0 (llvmpipe" in err, err

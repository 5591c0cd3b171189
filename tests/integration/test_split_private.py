"""--split-private (seed 004 "boomerang"): a split host keeps the token embedding and the output
layer, so its workers hold repeating layers only and compute on hidden states: they never see
token ids nor logits.

The model has an output.weight of 16 MB (F32, vocabulary 32000 x 128), above llama.cpp's RPC
hash threshold (10 MiB): a tensor that large which reaches a worker's `ggml-rpc-server -c` is
written into its cache directory ($LLAMA_CACHE/rpc/, under the FNV-1a hash of its bytes), and
a worker with the file seeds the tensors of its layers there. So the worker's cache holds a file
with output.weight's exact bytes when, and only when, the output layer went to the worker. The
test runs the split both ways: without the flag the check finds the tensor (it can fail), with
it the tensor is absent, and the greedy text equals a solo node's both times."""
import os
import struct
import subprocess

from harness.node import http, model_path, wait_for
from harness.split import SYNTH_BIN, THRESHOLD, env_for, gb, models_status, plan_of, text

PROMPT = "Once upon a time"
ALLOW = {"X-Mesh-Private": "allow-host"}  # the private rule's consent (route_decide.h)
GGUF_ALIGN = 32
# GGUF metadata value types -> fixed sizes (8 = string, 9 = array are handled apart)
GGUF_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def private_model(tmp_path):
    """4 small layers (dim 128), F32 token_embd and output of 32000 x 128 (16.4 MB each)."""
    out = tmp_path / "priv.gguf"
    subprocess.run([SYNTH_BIN, "--template", model_path("llama-2-tiny-random"), "--out", str(out),
                    "--dim", "128", "--ffn", "256", "--layers", "4", "--heads", "8", "--seed", "5",
                    "--embd-type", "f32", "--name", "priv"], check=True, capture_output=True,
                   timeout=120)
    return str(out)


def f32_tensor_bytes(path, name):
    """The data of F32 tensor `name` in the GGUF at path (a minimal GGUF v3 reader)."""
    with open(path, "rb") as f:
        d = f.read()
    magic, _version, n_tensors, n_kv = struct.unpack_from("<4sIQQ", d, 0)
    assert magic == b"GGUF"
    off = 24
    align = GGUF_ALIGN

    def string(o):
        n = struct.unpack_from("<Q", d, o)[0]
        return d[o + 8:o + 8 + n].decode(), o + 8 + n

    def value(t, o):
        if t == 8:
            return string(o)
        if t == 9:
            at, n = struct.unpack_from("<IQ", d, o)
            o += 12
            for _ in range(n):
                _, o = value(at, o)
            return None, o
        v = struct.unpack_from({4: "<I", 5: "<i"}.get(t, "<%dx" % GGUF_SIZES[t]), d, o)
        return (v[0] if v else None), o + GGUF_SIZES[t]

    for _ in range(n_kv):
        key, off = string(off)
        t = struct.unpack_from("<I", d, off)[0]
        v, off = value(t, off + 4)
        if key == "general.alignment":
            align = v
    found = None
    for _ in range(n_tensors):
        tname, off = string(off)
        nd = struct.unpack_from("<I", d, off)[0]
        dims = struct.unpack_from("<%dQ" % nd, d, off + 4)
        off += 4 + 8 * nd
        typ, toff = struct.unpack_from("<IQ", d, off)
        off += 12
        if tname == name:
            assert typ == 0, (name, typ)  # F32
            n = 1
            for x in dims:
                n *= x
            found = (toff, 4 * n)
    assert found, name
    base = (off + align - 1) // align * align
    return d[base + found[0]:base + found[0] + found[1]]


def cache_holds(cache_dir, data):
    """Some file of the rpc-server cache directory holds exactly these bytes."""
    rpc = os.path.join(cache_dir, "rpc")
    if not os.path.isdir(rpc):
        return False
    for name in os.listdir(rpc):
        p = os.path.join(rpc, name)
        if os.path.isfile(p) and os.path.getsize(p) == len(data):
            with open(p, "rb") as f:
                if f.read() == data:
                    return True
    return False


def split_once(start_node, tmp_path, model, label, private, worker_has_file, extra_env=None):
    """A hosts (more memory), B is its worker; returns (A, B, B's LLAMA_CACHE) once ready."""
    size = os.path.getsize(model)
    mdir = tmp_path / f"models-{label}"
    mdir.mkdir()
    if worker_has_file:
        os.symlink(model, mdir / "priv.gguf")
    env_a, env_b = env_for(tmp_path, f"a-{label}"), env_for(tmp_path, f"b-{label}")
    env_a.update(extra_env or {})
    env_b.update(extra_env or {})
    # A keeps the input layer (token_embd, 46 % of this model) and with --split-private the
    # output layer too (another 46 %): the split counts them in its share alone, so it offers
    # the model's size (less than the 1.1 x need: still a split) and B a bit over half
    a = start_node("--port", "0", "--model", model, "--max-vram", gb(1.0 * size), "--ctx-size",
                   "256", *(["--split-private"] if private else []), env=env_a)
    b = start_node("--port", "0", "--models-dir", str(mdir), "--max-vram", gb(0.55 * size),
                   "--ctx-size", "256", "--join", a.token, env=env_b)
    wait_for(lambda: models_status(a).get("priv") == "ready", timeout=120, what="split ready")
    hp, wp = plan_of(a, "priv"), plan_of(b, "priv")
    assert hp["role"] == "host" and wp["role"] == "worker" and wp["host"] == a.id, (hp, wp)
    return a, b, env_b["LLAMA_CACHE"]


def test_split_private_worker_holds_no_output(start_node, tmp_path):
    model = private_model(tmp_path)
    out = f32_tensor_bytes(model, "output.weight")
    assert len(out) > THRESHOLD
    solo = start_node("--port", "0", "--model", model, "--ctx-size", "256",
                      env=env_for(tmp_path, "solo"))
    want = text(solo.complete("priv", prompt=PROMPT, max_tokens=16, seed=42))
    solo.stop()

    # without the flag: the worker (no file: every weight comes through the tunnel) holds the
    # output layer, and its rpc-server cached output.weight's bytes
    a, b, cache = split_once(start_node, tmp_path, model, "plain", False, False)
    wp = plan_of(b, "priv")
    assert wp["layers"]["output"], wp
    assert text(a.complete("priv", prompt=PROMPT, max_tokens=16, seed=42)) == want
    assert cache_holds(cache, out)
    assert b.status()["rpc_tunnel"]["worker_rx"] >= len(out)
    b.stop()
    a.stop()

    # --split-private on the host: the worker (with the file: it seeds its layers' big
    # tensors) holds no output layer; nothing of output.weight was seeded nor sent
    a, b, cache = split_once(start_node, tmp_path, model, "private", True, True)
    hp, wp = plan_of(a, "priv"), plan_of(b, "priv")
    assert not wp["layers"]["output"] and not hp["workers"][0]["output"], (hp, wp)
    llama = [p for p in a.status()["processes"] if p["kind"] == "llama-server"]
    assert len(llama) == 1 and "-ot" in llama[0]["args"], llama
    assert text(a.complete("priv", prompt=PROMPT, max_tokens=16, seed=42)) == want
    # entering at the worker, the request is read by the host: only with the client's consent
    # (the private rule; test_private_entry_elsewhere shows who reads what)
    assert b.complete("priv", prompt=PROMPT, max_tokens=16, seed=42).status == 403
    assert text(b.request("POST", "/v1/completions", {"model": "priv", "prompt": PROMPT,
                                                      "max_tokens": 16, "temperature": 0,
                                                      "seed": 42}, headers=ALLOW)) == want
    assert not cache_holds(cache, out)
    assert wp["seeded_bytes_written"] + wp["seeded_bytes_present"] == 0, wp
    assert b.status()["rpc_tunnel"]["worker_rx"] < len(out)
    # the memory accounting agrees: the host's ledger holds token_embd and output (the same
    # size here) besides its layers, within what it offers; the worker's holds layers only
    mem_a, mem_b = a.status()["node"]["memory"], b.status()["node"]["memory"]
    held_a = {(h["model"], h["kind"]): h["bytes"] for h in mem_a["held"]}
    held_b = {(h["model"], h["kind"]): h["bytes"] for h in mem_b["held"]}
    assert 2 * len(out) <= held_a[("priv", "model")] <= mem_a["offered_bytes"], mem_a
    assert held_b[("priv", "worker")] <= mem_b["offered_bytes"], mem_b
    assert held_a[("priv", "model")] + held_b[("priv", "worker")] < 1.2 * os.path.getsize(model)


# llama-server's GET /slots shows each slot's last prompt and generated text (detokenized) with
# this set in its environment (which a node's children inherit)
SLOTS_DEBUG = {"LLAMA_SERVER_SLOTS_DEBUG": "1"}


def slots_text(node, model):
    """What node's llama-server for model holds of its requests, from its own GET /slots (each
    slot's last prompt and generated text), or None when the node runs no llama-server for
    it."""
    c = node.child_for(model)
    if c is None:
        return None
    r = http(c[1], "GET", "/slots")
    assert r.status == 200, r
    return "\n".join(f"{sl.get('prompt', '')}\n{sl.get('generated', '')}" for sl in r.json())


def test_private_entry_elsewhere(start_node, tmp_path):
    """A request that enters at another node than the private split's host: at the worker, at
    a third node and at a --client it is refused (403 private_split, naming the host) and its marker reaches no
    llama-server anywhere; with the client's consent (X-Mesh-Private: allow-host) it is served,
    and the only llama-server that ever held its text is the host's. The workers run none (their
    rpc-server holds repeating layers only: no token_embd, no output, fewer bytes than either
    received); the host's --split-private request of its own still answers."""
    model = private_model(tmp_path)
    out = f32_tensor_bytes(model, "output.weight")
    a, b, cache = split_once(start_node, tmp_path, model, "entry", True, True, SLOTS_DEBUG)
    c = start_node("--port", "0", "--max-vram", "0.001", "--join", a.token,
                   env=dict(env_for(tmp_path, "c-entry"), **SLOTS_DEBUG))
    # a passive client: its route table (from A) marks A's host entry "private"
    d = start_node("--client", "--join", a.token, "--port", "0",
                   env=dict(env_for(tmp_path, "d-entry"), **SLOTS_DEBUG))

    def listed(node):
        return next((bool(m.get("hosts", True)) for m in
                     node.request("GET", "/v1/models").json()["data"] if m["id"] == "priv"),
                    False)

    # C routes the model once A's announcement (with its plan, "private": true) reached it; D
    # once its table lists A as the model's host
    wait_for(lambda: listed(c) and listed(d), timeout=60, what="C and D know the model")

    refused_marker, allowed_marker = "Zorblax", "Quixmop"
    for entry in (b, c, d):
        r = entry.complete("priv", prompt=f"{PROMPT} {refused_marker}", max_tokens=4)
        assert r.status == 403, (r.status, r.body)
        err = r.json()["error"]
        assert err["code"] == "private_split" and a.id[:12] in err["message"], err
    # the marker reached no llama-server: the host's holds no task with it, B and C run none
    assert all(slots_text(n, "priv") is None for n in (b, c, d))
    assert refused_marker not in (slots_text(a, "priv") or "")
    # a request of the host's own is served there (a control: the check below can see text)
    r = a.complete("priv", prompt=f"{PROMPT} Hostword", max_tokens=4)
    assert r.status == 200, r.body
    assert "Hostword" in slots_text(a, "priv")

    # with consent, from the third node and from the worker: served by the host, whose
    # llama-server is the only one that holds the text (the prompt and what it generated)
    for entry in (c, b, d):
        rx_before = b.status()["rpc_tunnel"]["worker_rx"]
        r = entry.request("POST", "/v1/completions", {"model": "priv", "max_tokens": 4,
                                                      "temperature": 0,
                                                      "prompt": f"{PROMPT} {allowed_marker}"},
                          headers=ALLOW)
        assert r.status == 200, (r.status, r.body)
        held = slots_text(a, "priv")
        assert allowed_marker in held and text(r) in held, (held, text(r))
        assert all(slots_text(n, "priv") is None for n in (b, c, d))
        # the worker computed the request's layers on hidden states: it received less than one
        # token_embd / output matrix's worth for the whole request (it holds neither)
        assert 0 < b.status()["rpc_tunnel"]["worker_rx"] - rx_before < len(out)
    assert refused_marker not in slots_text(a, "priv")
    assert not cache_holds(cache, out)
    assert not cache_holds(cache, f32_tensor_bytes(model, "token_embd.weight"))
    wp = plan_of(b, "priv")
    assert not wp["layers"]["output"], wp

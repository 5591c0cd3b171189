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

from harness.node import model_path, wait_for
from harness.split import SYNTH_BIN, THRESHOLD, env_for, gb, models_status, plan_of, text

PROMPT = "Once upon a time"
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


def split_once(start_node, tmp_path, model, label, private, worker_has_file):
    """A hosts (more memory), B is its worker; returns (A, B, B's LLAMA_CACHE) once ready."""
    size = os.path.getsize(model)
    mdir = tmp_path / f"models-{label}"
    mdir.mkdir()
    if worker_has_file:
        os.symlink(model, mdir / "priv.gguf")
    env_a, env_b = env_for(tmp_path, f"a-{label}"), env_for(tmp_path, f"b-{label}")
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
    assert text(b.complete("priv", prompt=PROMPT, max_tokens=16, seed=42)) == want
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

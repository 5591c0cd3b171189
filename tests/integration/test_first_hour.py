"""A new user's first hour (issue 26): a --model that cannot be served stops the start with the
file and why; a 404 lists the mesh's models, on an active node and on a passive client."""
import os
import re

import pytest

from harness.node import model_path, wait_for
from harness.mesh import ENV, wait_converged

S = "stories260K"
T = "TinyStories-656K-Q8_0"


def exits_with(n, timeout=60):
    """The node's exit status, after it stopped by itself (never a ready line)."""
    rc = n.proc.wait(timeout=timeout)
    assert not any(l.startswith("mesh-llm ready") for l in n.stdout_lines), n.stdout_lines
    return rc


def bad_file(tmp_path, kind):
    p = tmp_path / f"{kind}.gguf"
    good = open(model_path(S), "rb").read()
    p.write_bytes({
        "junk": bytes(range(256)) * 64,             # random-looking bytes
        "text": b"<html>404 Not Found</html>\n",  # what a wrong download link gives
        "version0": b"GGUF" + b"\0" * 64,          # not a GGUF llama.cpp reads
        "truncated": good[:len(good) // 3],        # a download cut short
    }[kind])
    return p


WHY = {"junk": "not a GGUF file", "text": "not a GGUF file", "version0": "GGUF version 0",
       "truncated": "truncated"}


# ---- friction 5: an explicit --model that cannot load ----

@pytest.mark.parametrize("kind", ["junk", "text", "version0", "truncated"])
def test_named_model_that_is_not_a_gguf_stops_the_start(start_node, tmp_path, kind):
    """It used to log a warning, print the ready line and serve nothing. Named next to a good
    model, it still stops the start: the user named that file."""
    bad = bad_file(tmp_path, kind)
    n = start_node("--port", "0", "--model", str(bad), "--model", model_path(S),
                   wait_ready=False)
    assert exits_with(n) == 1
    err = n.stderr()
    lines = [l for l in err.splitlines() if "ERROR" in l and str(bad) in l]
    assert len(lines) == 1 and WHY[kind] in lines[0], err
    assert "llama-server for model" not in err and "loading " not in err  # nothing started


def test_named_model_llama_cannot_load_stops_the_start(start_node):
    """A valid GGUF that llama-server cannot load (a tokenizer-only file: no tensors): once the
    load failed, the node stops with the file and llama.cpp's reason."""
    vocab = os.path.join(os.path.dirname(model_path(S)), "vocab", "ggml-vocab-gpt-2.gguf")
    n = start_node("--port", "0", "--model", vocab, wait_ready=False)
    assert exits_with(n, timeout=120) == 1
    lines = [l for l in n.stderr().splitlines() if "ERROR" in l and "node:" in l]
    assert any(vocab in l and "token_embd.weight" in l for l in lines), lines


def test_one_of_two_failing_in_llama_still_serves_the_other(start_node):
    vocab = os.path.join(os.path.dirname(model_path(S)), "vocab", "ggml-vocab-gpt-2.gguf")
    n = start_node("--port", "0", "--model", vocab, "--model", model_path(S),
                   "--max-loaded-models", "2")
    r = n.complete(S, max_tokens=2)
    assert r.status == 200, r


# ---- friction 6: "not found; available: …" lists the mesh's models ----

def available(r):
    assert r.status == 404, r
    msg = r.json()["error"]["message"]
    m = re.search(r"available: (.*)$", msg)
    assert m, msg
    return set(m.group(1).split(", "))


def test_not_found_lists_the_mesh_models(start_node):
    """On an active node the list had only its own models; on a passive client '(none)'."""
    a = start_node("--port", "0", "--model", model_path(S), env=ENV)
    b = start_node("--port", "0", "--model", model_path(T), "--join", a.token, env=ENV)
    c = start_node("--port", "0", "--client", "--join", a.token, "--headless", env=ENV)
    wait_converged([a, b])
    for n in (a, b, c):
        wait_for(lambda: {S, T} <= {m["id"] for m in n.request("GET", "/v1/models")
                                    .json()["data"]}, timeout=30, what="both models listed")
        assert available(n.complete("no-such-model")) == {S, T}, n.id


# ---- friction 8: ~/.models is served by default; models list judges FITS by the offer ----

def test_home_models_dir_is_served_on_demand(start_node, tmp_path):
    """A model downloaded earlier (it lands in ~/.models) was forgotten after a restart unless
    --models-dir named the directory. Now it is a known model, loaded on first use only."""
    home = tmp_path / "h"
    (home / ".models").mkdir(parents=True)
    os.symlink(model_path(S), home / ".models" / f"{S}.gguf")
    n = start_node("--port", "0", "--model", model_path(T), env={"HOME": str(home)})
    listed = {m["id"]: m["status"] for m in n.request("GET", "/v1/models").json()["data"]}
    assert listed.get(S) == "unloaded" and listed.get(T) == "ready", listed
    assert n.child_for(S) is None  # not loaded at start
    r = n.complete(S, max_tokens=2)
    assert r.status == 200, r
    assert n.child_for(S) is not None


def meminfo(key):
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise AssertionError(key)


def models_list(tmp_path, *args):
    import subprocess
    from harness.node import MESH_BIN, BIN_DIR
    env = dict(os.environ, HOME=str(tmp_path))
    extra = ["--bin-dir", BIN_DIR] if BIN_DIR else []
    p = subprocess.run([MESH_BIN, "models", "list", *extra, *args], capture_output=True,
                       text=True, timeout=60, env=env)
    assert p.returncode == 0, p.stderr
    rows = [l.split() for l in p.stdout.splitlines()[1:-1]]
    offer = float(re.search(r"offers: ([0-9.]+) GB", p.stdout.splitlines()[-1]).group(1)) * 1e9
    return {r[0]: (float(r[2]), r[5]) for r in rows}, offer


def test_models_list_fits_against_the_offer(tmp_path):
    """FITS was judged against the total RAM, which no node offers: a CPU node offers half of
    the available RAM (or --max-vram)."""
    rows, offer = models_list(tmp_path)
    assert 0 < offer <= 0.55 * meminfo("MemTotal"), offer  # was the whole of MemTotal
    rows, offer = models_list(tmp_path, "--max-vram", "2")
    assert offer == 2e9
    for name, (size_gb, fits) in rows.items():
        if size_gb > 2.0:
            assert fits == "no", name

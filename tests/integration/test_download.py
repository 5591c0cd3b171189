"""Model downloads from a fake Hugging Face hub (tests/tools/hub_server.py): resume after a cut,
hash mismatch, 404/401, SIGTERM then resume, a full disk, ORG/REPO:QUANT, "already there", and a
node serving an hf:// reference."""
import os
import shutil
import signal
import subprocess

import pytest

from harness.hub import CHUNK, STORIES, TINY, sha256
from harness.node import MESH_BIN, wait_for


def run_download(hub, ref, models_dir, env=None, timeout=60):
    e = dict(os.environ, HF_ENDPOINT=hub.url, MESH_LLM_DL_BACKOFF_MS="50")
    e.pop("HF_TOKEN", None)
    e.update(env or {})
    return subprocess.run([MESH_BIN, "download", ref, "--models-dir", str(models_dir)],
                          capture_output=True, text=True, env=e, timeout=timeout)


def test_download_resumes_after_a_cut(hub, tmp_path):
    hub.control(cut=300000)
    d = tmp_path / "models"
    r = run_download(hub, "hf://org/tiny-GGUF/stories260K.gguf", d)
    assert r.returncode == 0, r.stderr
    assert sha256(d / "stories260K.gguf") == sha256(STORIES)
    assert not (d / "stories260K.gguf.part").exists()
    size = os.path.getsize(STORIES)
    st = hub.stats()
    assert st["cdn_bytes"] <= size + CHUNK, st["cdn_bytes"]
    ranges = [q[3] for q in st["requests"] if q[2].startswith("/cdn/")]
    assert ranges == ["", "bytes=300000-"], ranges


def test_download_hash_mismatch_leaves_nothing(hub, tmp_path):
    hub.control(wrong=1)
    d = tmp_path / "models"
    r = run_download(hub, "hf://org/tiny-GGUF/stories260K.gguf", d)
    assert r.returncode == 1
    assert "sha256 mismatch" in r.stderr and sha256(STORIES) in r.stderr, r.stderr
    assert "deleted" in r.stderr
    assert os.listdir(d) == []


def test_download_404_and_401(hub, tmp_path):
    d = tmp_path / "models"
    r = run_download(hub, "hf://org/tiny-GGUF/missing.gguf", d)
    assert r.returncode == 1
    assert "hf://org/tiny-GGUF/missing.gguf: not found (HTTP 404)" in r.stderr, r.stderr
    hub.control(token="sekrit")
    r = run_download(hub, "hf://org/tiny-GGUF/stories260K.gguf", d)
    assert r.returncode == 1
    assert "hf://org/tiny-GGUF/stories260K.gguf: access denied (HTTP 401)" in r.stderr
    assert "set HF_TOKEN" in r.stderr, r.stderr
    r = run_download(hub, "hf://org/tiny-GGUF/stories260K.gguf", d, env={"HF_TOKEN": "wrong"})
    assert r.returncode == 1 and "HF_TOKEN was sent but not accepted" in r.stderr, r.stderr
    assert not os.path.exists(d / "stories260K.gguf")
    r = run_download(hub, "hf://org/tiny-GGUF/stories260K.gguf", d, env={"HF_TOKEN": "sekrit"})
    assert r.returncode == 0, r.stderr
    assert sha256(d / "stories260K.gguf") == sha256(STORIES)
    # the bearer token went to the hub only, never to the CDN it redirected to
    assert hub.stats()["cdn_auth"] == []


def test_download_sigterm_keeps_part_and_next_run_resumes(hub, tmp_path):
    hub.control(trickle=100000)
    d = tmp_path / "models"
    part = d / "stories260K.gguf.part"
    e = dict(os.environ, HF_ENDPOINT=hub.url, MESH_LLM_PROGRESS_MS="100")
    p = subprocess.Popen([MESH_BIN, "download", "hf://org/tiny-GGUF/stories260K.gguf",
                          "--models-dir", str(d)], stderr=subprocess.PIPE, text=True, env=e)
    try:
        wait_for(lambda: part.exists() and part.stat().st_size >= 100000, timeout=30,
                 what="some bytes in the .part file")
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 130, err
    assert "partial download is kept" in err
    assert "downloading hf://org/tiny-GGUF/stories260K.gguf" in err  # plain progress lines
    kept = part.stat().st_size
    assert 0 < kept < os.path.getsize(STORIES)
    assert not (d / "stories260K.gguf").exists()
    hub.control(trickle=0)
    r = run_download(hub, "hf://org/tiny-GGUF/stories260K.gguf", d)
    assert r.returncode == 0, r.stderr
    assert f"resuming at byte {kept}" in r.stderr
    assert sha256(d / "stories260K.gguf") == sha256(STORIES)
    ranges = [q[3] for q in hub.stats()["requests"] if q[2].startswith("/cdn/")]
    assert ranges[-1] == f"bytes={kept}-"


def test_download_full_disk(hub, tmp_path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    m = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if m.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {m.stderr.strip()}")
    try:
        r = run_download(hub, "hf://org/tiny-GGUF/stories260K.gguf", mnt)
        assert r.returncode == 1
        assert "not enough disk space for hf://org/tiny-GGUF/stories260K.gguf" in r.stderr, r.stderr
        assert os.listdir(mnt) == []
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def test_download_quant_pick_and_already_there(hub, tmp_path):
    d = tmp_path / "models"
    r = run_download(hub, "org/tiny-GGUF:Q8_0", d)
    assert r.returncode == 0, r.stderr
    assert f"downloaded to {d}/TinyStories-656K-Q8_0.gguf" in r.stdout
    assert sha256(d / "TinyStories-656K-Q8_0.gguf") == sha256(TINY)
    n = len(hub.stats()["requests"])
    r = run_download(hub, "hf://org/tiny-GGUF/TinyStories-656K-Q8_0.gguf", d)
    assert r.returncode == 0
    assert "already there" in r.stdout
    assert len(hub.stats()["requests"]) == n + 1  # the /_stats call only: nothing downloaded
    r = run_download(hub, "org/tiny-GGUF:Q2_K", d)
    assert r.returncode == 1 and "no GGUF file of quantization Q2_K" in r.stderr, r.stderr
    inst = subprocess.run([MESH_BIN, "models", "installed", "--models-dir", str(d)],
                          capture_output=True, text=True)
    assert "TinyStories-656K-Q8_0.gguf" in inst.stdout
    rm = subprocess.run([MESH_BIN, "models", "rm", "TinyStories-656K-Q8_0", "--models-dir",
                         str(d)], capture_output=True, text=True)
    assert rm.returncode == 0 and not (d / "TinyStories-656K-Q8_0.gguf").exists()


def test_download_same_file_name_from_another_repo_is_not_taken_for_it(hub, tmp_path):
    """Issue 33 item 5: org2's a.gguf is not "already there" because org1's a.gguf is."""
    other = hub.root / "org2" / "tiny-GGUF"
    other.mkdir(parents=True)
    shutil.copy(TINY, other / "stories260K.gguf")  # same name, other bytes
    d = tmp_path / "models"
    r = run_download(hub, "hf://org/tiny-GGUF/stories260K.gguf", d)
    assert r.returncode == 0, r.stderr
    r = run_download(hub, "hf://org2/tiny-GGUF/stories260K.gguf", d)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "already there" not in r.stdout
    assert "came from hf://org/tiny-GGUF/stories260K.gguf" in r.stderr, r.stderr
    assert sha256(d / "stories260K.gguf") == sha256(STORIES)
    # the same source again is there already
    r = run_download(hub, "hf://org/tiny-GGUF/stories260K.gguf", d)
    assert r.returncode == 0 and "already there" in r.stdout, r.stdout + r.stderr
    rm = subprocess.run([MESH_BIN, "models", "rm", "stories260K", "--models-dir", str(d)],
                        capture_output=True, text=True)
    assert rm.returncode == 0, rm.stderr
    r = run_download(hub, "hf://org2/tiny-GGUF/stories260K.gguf", d)
    assert r.returncode == 0, r.stderr
    assert sha256(d / "stories260K.gguf") == sha256(TINY)


def test_download_non_gguf_body_is_not_saved(hub, tmp_path):
    """Issue 33 item 5: a 200 whose body is not a GGUF file (an HTML page) is an error, and
    nothing is saved as a model, even though its size and hash match what the hub said."""
    repo = hub.root / "org" / "tiny-GGUF"
    (repo / "page.gguf").write_bytes(b"<!doctype html><html><body>Sign in</body></html>\n" * 50)
    d = tmp_path / "models"
    r = run_download(hub, "hf://org/tiny-GGUF/page.gguf", d)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "not a GGUF model" in r.stderr, r.stderr
    assert os.listdir(d) == []


def test_download_trickle_counts_as_a_stall(hub, tmp_path):
    """Issue 33 item 6: a CDN trickling 100 B/s is below the default minimum rate (1 KiB/s over
    the stall window): retried, then given up, instead of downloading for hours."""
    hub.control(trickle=100)
    d = tmp_path / "models"
    r = run_download(hub, "hf://org/tiny-GGUF/stories260K.gguf", d,
                     env={"MESH_LLM_DL_STALL_MS": "2000", "MESH_LLM_DL_RETRIES": "1"},
                     timeout=90)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "slower than 1024 bytes/s for 2 s" in r.stderr, r.stderr
    assert "gave up after 1 retries" in r.stderr
    assert not (d / "stories260K.gguf").exists()


def test_download_401_from_a_url_that_is_not_the_hub(hub, tmp_path):
    """Issue 33 item 12: HF_TOKEN goes to the hub only, so a 401 from another server must not
    say it was sent."""
    hub.control(token="sekrit")
    d = tmp_path / "models"
    url = hub.url + "/org/tiny-GGUF/resolve/main/stories260K.gguf"
    # the hub is elsewhere (nothing is sent there): this URL's server is not the hub
    r = run_download(hub, url, d, env={"HF_TOKEN": "sekrit", "HF_ENDPOINT": "http://127.0.0.2:9"})
    assert r.returncode == 1, r.stdout + r.stderr
    assert "access denied (HTTP 401)" in r.stderr, r.stderr
    assert "HF_TOKEN was sent" not in r.stderr, r.stderr
    assert "not the hub" in r.stderr


def test_models_rm_refuses_a_part_being_downloaded(hub, tmp_path):
    """Issue 33 item 12: 'models rm' does not delete the .part another process is writing."""
    hub.control(trickle=20000)
    d = tmp_path / "models"
    part = d / "stories260K.gguf.part"
    e = dict(os.environ, HF_ENDPOINT=hub.url)
    e.pop("HF_TOKEN", None)
    p = subprocess.Popen([MESH_BIN, "download", "hf://org/tiny-GGUF/stories260K.gguf",
                          "--models-dir", str(d)], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, env=e)
    try:
        wait_for(lambda: part.exists() and part.stat().st_size > 0, timeout=30,
                 what="the download writing its .part")
        rm = subprocess.run([MESH_BIN, "models", "rm", "stories260K", "--models-dir", str(d)],
                            capture_output=True, text=True)
        assert rm.returncode == 1, rm.stdout + rm.stderr
        assert "being downloaded by another process" in rm.stderr, rm.stderr
        assert part.exists()
    finally:
        p.kill()
        p.wait(timeout=10)
    rm = subprocess.run([MESH_BIN, "models", "rm", "stories260K", "--models-dir", str(d)],
                        capture_output=True, text=True)
    assert rm.returncode == 0 and not part.exists(), rm.stdout + rm.stderr


def test_models_list_and_search():
    r = subprocess.run([MESH_BIN, "models", "list", "--max-vram", "1.5"], capture_output=True,
                       text=True)
    assert r.returncode == 0
    rows = {l.split()[0]: l for l in r.stdout.splitlines()[1:] if l and not l.startswith("memory")}
    assert len(rows) >= 10
    assert rows["Qwen2.5-0.5B-Instruct-Q4_K_M"].split()[5] == "yes"  # FITS in 1.5 GB
    assert rows["Qwen2.5-7B-Instruct-Q4_K_M"].split()[5] == "no"
    r = subprocess.run([MESH_BIN, "models", "search", "rerank"], capture_output=True, text=True)
    names = [l.split()[0] for l in r.stdout.splitlines()[1:] if l and not l.startswith("memory")]
    assert names == ["bge-reranker-v2-m3-Q4_K_M"]


def model_entry(node, name):
    r = node.request("GET", "/v1/models")
    assert r.status == 200, r
    return next((m for m in r.json()["data"] if m["id"] == name), None)


def test_node_serves_an_hf_reference(hub, tmp_path, start_node):
    home = tmp_path / "userhome"
    home.mkdir()
    n = start_node("--model", "hf://org/tiny-GGUF/stories260K.gguf", "--port", "0",
                   env={"HF_ENDPOINT": hub.url, "HOME": str(home)}, ready_timeout=120)
    wait_for(lambda: (model_entry(n, "stories260K") or {}).get("status") == "ready", 120,
             0.2, "the downloaded model to load")
    assert sha256(home / ".models" / "stories260K.gguf") == sha256(STORIES)
    r = n.complete("stories260K")
    assert r.status == 200, r.body
    assert r.json()["choices"][0]["text"]


def test_node_downloads_in_the_background(hub, tmp_path, start_node):
    """--model REF: the node is ready at once; while the (trickled) download runs /v1/models
    shows it downloading with progress, a request gets 503 + Retry-After, /api/status shows the
    bytes moving; then the model loads and serves."""
    hub.control(trickle=200000)
    home = tmp_path / "userhome"
    home.mkdir()
    n = start_node("--model", "hf://org/tiny-GGUF/stories260K.gguf", "--port", "0",
                   env={"HF_ENDPOINT": hub.url, "HOME": str(home)}, ready_timeout=30)
    size = os.path.getsize(STORIES)
    m = wait_for(lambda: model_entry(n, "stories260K"), 10, 0.1, "the model in /v1/models")
    assert m["status"] == "downloading", m
    assert m["source"] == "hf://org/tiny-GGUF/stories260K.gguf"
    r = n.complete("stories260K")
    assert r.status == 503, r.body
    assert r.json()["error"]["code"] == "model_downloading"
    assert int(r.headers["retry-after"]) >= 1

    def dl():
        d = n.status().get("downloads") or []
        return d[0] if d else None
    first = wait_for(lambda: (lambda d: d if d and d["bytes"] > 0 else None)(dl()), 20, 0.1,
                     "download bytes")
    assert first["model"] == "stories260K" and first["ref"].startswith("hf://")
    assert first["total"] == size
    later = wait_for(lambda: (lambda d: d if d and d["bytes"] > first["bytes"] else None)(dl()),
                     20, 0.1, "download bytes to move")
    assert later["bytes"] <= size
    m = model_entry(n, "stories260K")
    assert m["status"] == "downloading" and 0 < m["progress"]["bytes"] <= size, m
    assert m["progress"]["total"] == size
    hub.control(trickle=0)
    wait_for(lambda: (model_entry(n, "stories260K") or {}).get("status") == "ready", 120, 0.2,
             "the downloaded model to load")
    assert n.status().get("downloads") == []
    r = n.complete("stories260K")
    assert r.status == 200, r.body


def test_node_too_small_refuses_to_download(hub, tmp_path, start_node):
    """--model CATALOG_NAME on a node offering less than 1.1 x the model's size: nothing is
    fetched, the log and /api/status say why, the node runs on."""
    home = tmp_path / "userhome"
    home.mkdir()
    n = start_node("--model", "Qwen2.5-0.5B-Instruct-Q4_K_M", "--max-vram", "0.2", "--port", "0",
                   env={"HF_ENDPOINT": hub.url, "HOME": str(home)}, ready_timeout=30)
    errs = wait_for(lambda: n.status().get("download_errors"), 10, 0.1, "the refusal")
    assert errs[0]["ref"] == "Qwen2.5-0.5B-Instruct-Q4_K_M"
    assert "not downloading" in errs[0]["error"] and "--max-vram" in errs[0]["error"]
    assert "not downloading Qwen2.5-0.5B-Instruct-Q4_K_M" in n.stderr()
    assert n.status()["downloads"] == []
    assert hub.stats()["cdn_bytes"] == 0
    assert not (home / ".models").exists() or not any((home / ".models").iterdir())
    assert n.request("GET", "/v1/models").status == 200


BIG_MB = 24  # several of the downloader's 8 MiB hash steps


@pytest.fixture
def big(hub):
    """A deterministic 24 MiB file in the fake hub (org/big-GGUF/big.gguf)."""
    import random
    d = hub.root / "org" / "big-GGUF"
    d.mkdir(parents=True)
    rnd = random.Random(14)
    with open(d / "big.gguf", "wb") as f:
        f.write(b"GGUF")  # a download saved as .gguf must start with the magic
        for _ in range(BIG_MB):
            f.write(rnd.randbytes(1 << 20))
    return d / "big.gguf"


def test_download_big_file_cut_then_resumed(hub, big, tmp_path):
    """A file hashed in several thread-pool steps while it is written, cut after 12 MiB (a part
    bigger than one step, hashed again at the resume): the result matches the hub's hash, and
    the hub sent no more than the file plus one chunk."""
    hub.control(cut=12 << 20)
    d = tmp_path / "models"
    r = run_download(hub, "hf://org/big-GGUF/big.gguf", d)
    assert r.returncode == 0, r.stderr
    assert sha256(d / "big.gguf") == sha256(big)
    assert hub.stats()["cdn_bytes"] <= os.path.getsize(big) + CHUNK
    # stopped at the cut by an outside hand this time: the next run hashes the part, resumes
    part = d / "big2.gguf.part"
    with open(big, "rb") as src, open(part, "wb") as dst:
        dst.write(src.read(17 << 20))
    shutil.copy(big, big.parent / "big2.gguf")
    r = run_download(hub, "hf://org/big-GGUF/big2.gguf", d)
    assert r.returncode == 0, r.stderr
    assert f"resuming at byte {17 << 20}" in r.stderr
    assert sha256(d / "big2.gguf") == sha256(big)


def test_download_big_file_server_ignores_range(hub, big, tmp_path):
    """The CDN answers a resume with the whole file (200): the part is truncated and hashed
    again from its start, even with a hash step running; the file is right."""
    hub.control(cut=10 << 20, norange=1)
    d = tmp_path / "models"
    r = run_download(hub, "hf://org/big-GGUF/big.gguf", d)
    assert r.returncode == 0, r.stderr
    assert sha256(d / "big.gguf") == sha256(big)
    ranges = [q[3] for q in hub.stats()["requests"] if q[2].startswith("/cdn/")]
    assert ranges == ["", f"bytes={10 << 20}-"], ranges


def test_download_big_file_wrong_content(hub, big, tmp_path):
    hub.control(wrong=1)
    d = tmp_path / "models"
    r = run_download(hub, "hf://org/big-GGUF/big.gguf", d)
    assert r.returncode == 1 and "sha256 mismatch" in r.stderr, r.stderr
    assert os.listdir(d) == []


@pytest.mark.parametrize("endpoint,why", [("http://nonexistent.invalid/", "resolve"),
                                          ("http://127.0.0.1:9", "connect")])
def test_download_offline_fails_fast(tmp_path, endpoint, why):
    """Issue 26.9: a hub that cannot be reached (a host name that does not resolve, a port where
    nothing listens) fails at once with a clear message: no 15 s of retries printing
    `0.0 / 0.0 MB`, and no claim of a .part file that does not exist."""
    import time
    d = tmp_path / "models"
    e = dict(os.environ, HF_ENDPOINT=endpoint, MESH_LLM_PROGRESS_MS="100")
    e.pop("HF_TOKEN", None)
    t0 = time.monotonic()
    r = subprocess.run([MESH_BIN, "download", "hf://org/tiny-GGUF/stories260K.gguf",
                        "--models-dir", str(d)], capture_output=True, text=True, env=e,
                       timeout=120)
    took = time.monotonic() - t0
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "cannot reach " + endpoint.rstrip("/") in r.stderr and why in r.stderr.lower(), r.stderr
    assert "retrying" not in r.stderr and "0.0 / 0.0 MB" not in r.stdout + r.stderr, r.stderr
    assert ".part" not in r.stderr and os.listdir(d) == [], (r.stderr, os.listdir(d))
    assert took < 10, took  # the old code retried for 15 s (5 retries with backoff)

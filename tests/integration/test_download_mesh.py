"""Downloads decided by the mesh (allocation rule 4 "download and serve"), with the fake hub of
test_download.py: a node too small for the model it asks for refuses to download it and says why,
announces where it comes from (model_source); a joiner with room downloads it from that source,
the whole mesh sees it `downloading` with progress, then the joiner serves it to the asker."""
import os

from harness.node import wait_for
from harness.hub import STORIES, sha256
from harness.mesh import ENV, wait_converged

REF = "hf://org/tiny-GGUF/stories260K.gguf"
NAME = "stories260K"


def listed(node, name):
    r = node.request("GET", "/v1/models")
    assert r.status == 200, r
    return next((m for m in r.json()["data"] if m["id"] == name), None)


def test_joiner_downloads_and_serves_what_a_small_node_asks_for(hub, tmp_path, start_node):
    home_a, home_b = tmp_path / "home_a", tmp_path / "home_b"
    home_a.mkdir()
    home_b.mkdir()
    size = os.path.getsize(STORIES)
    # A offers 1 MB: serving the 1.19 MB model needs 1.1 x that. It learns the size from the
    # hub's answer and refuses before writing anything.
    a = start_node("--port", "0", "--model", REF, "--max-vram", "0.001",
                   env=dict(ENV, HF_ENDPOINT=hub.url, HOME=str(home_a)), ready_timeout=30)
    errs = wait_for(lambda: a.status().get("download_errors"), 20, 0.1, "A's refusal")
    assert errs[0]["ref"] == REF, errs
    assert "not downloading" in errs[0]["error"] and "--max-vram" in errs[0]["error"], errs
    assert "not downloading " + REF in a.stderr()
    assert a.status()["downloads"] == []
    assert not (home_a / ".models").exists() or list((home_a / ".models").iterdir()) == []
    # the mesh lists it as requested, with its size (from the hub) and nobody downloading it
    m = wait_for(lambda: listed(a, NAME), 10, 0.1, "the requested model in /v1/models")
    assert m["requested"] is True and m["size"] == size and m["status"] != "downloading", m

    # B joins with room and no model: rule 4 gives it the model, fetched from A's model_source.
    # The hub trickles so the download is seen in progress across the mesh.
    hub.control(trickle=100000)  # 12 s for the file: the checks below run while it trickles
    b = start_node("--port", "0", "--join", a.token,
                   env=dict(ENV, HF_ENDPOINT=hub.url, HOME=str(home_b), MESH_LLM_PROGRESS_MS="500"),
                   ready_timeout=30)
    wait_converged([a, b])

    def downloading_on_a():
        e = listed(a, NAME)
        if not e or e["status"] != "downloading" or e["progress"]["bytes"] == 0:
            return None
        cat = {c["name"]: c for c in a.status()["catalog"]}
        return (e, cat[NAME]) if "downloading" in cat[NAME] else None
    e, c = wait_for(downloading_on_a, 30, 0.1, "A to see B downloading the model")
    assert e["progress"]["node"] == b.id and e["progress"]["total"] == size, e
    assert 0 < e["progress"]["bytes"] <= size
    assert c["downloading"]["node"] == b.id and c["downloading"]["total"] == size, c
    st = b.status()
    assert st["node"]["assignment"] == {"rule": "download_and_serve", "model": NAME}, st["node"]
    assert [d["ref"] for d in st["downloads"]] == [REF], st["downloads"]
    # a request meanwhile, at B or at A: 503 + Retry-After saying where it downloads
    for n, where in ((b, "this node"), (a, "node " + b.id[:12])):
        r = n.complete(NAME)
        assert r.status == 503 and int(r.headers["retry-after"]) >= 1, r
        err = r.json()["error"]
        assert err["code"] == "model_downloading" and where in err["message"], err
    hub.control(trickle=0)

    # B serves it; A's request goes to B
    wait_for(lambda: (listed(a, NAME) or {}).get("status") == "ready", 120, 0.2,
             "the model ready in A's catalog")
    assert listed(a, NAME)["hosts"] == [b.id]
    assert sha256(home_b / ".models" / "stories260K.gguf") == sha256(STORIES)
    r = a.complete(NAME)
    assert r.status == 200, r
    assert r.headers.get("x-mesh-node") == b.id, r.headers
    assert r.json()["choices"][0]["text"]
    # A still has no copy: it never downloaded what it cannot serve
    assert not (home_a / ".models" / "stories260K.gguf").exists()
    assert "download_and_serve" in b.stderr()


def test_load_api_with_a_reference_downloads_then_loads(hub, tmp_path, start_node):
    """POST /api/v1/load {"model_name": hf://…}: 202 with the download's progress, then the model
    loads and answers; a second load of the same ref loads the model by its name; bad refs and a
    model too big for the node are clear 400s; a ref the hub does not have ends in
    download_errors naming the ref."""
    from harness.node import model_path
    home = tmp_path / "userhome"
    home.mkdir()
    n = start_node("--model", model_path("stories260K"), "--port", "0", "--max-vram", "1",
                   env={"HF_ENDPOINT": hub.url, "HOME": str(home)}, ready_timeout=60)
    tiny_ref = "hf://org/tiny-GGUF/TinyStories-656K-Q8_0.gguf"
    tiny = "TinyStories-656K-Q8_0"
    r = n.request("POST", "/api/v1/load", {"model_name": tiny_ref})
    assert r.status == 202, r
    b = r.json()
    assert b["status"] == "downloading" and b["model"] == tiny and b["ref"] == tiny_ref, b
    assert "progress" in b and tiny in b["message"], b
    wait_for(lambda: (listed(n, tiny) or {}).get("status") == "ready", 120, 0.2,
             "the downloaded model to load")
    r = n.complete(tiny)
    assert r.status == 200, r
    assert r.json()["choices"][0]["text"]
    # again: the model is here now, the load answers like any load
    r = n.request("POST", "/api/v1/load", {"model_name": tiny_ref})
    assert r.status == 200 and "already loaded" in r.json()["message"], r
    # errors, in the OpenAI shape
    r = n.request("POST", "/api/v1/load", {"model_name": "hf://org"})
    assert r.status == 400 and r.json()["error"]["code"] == "invalid_model_reference", r
    assert "hf://org" in r.json()["error"]["message"], r
    r = n.request("POST", "/api/v1/load", {"model_name": "no-such-model"})
    assert r.status == 404 and r.json()["error"]["code"] == "model_not_found", r
    r = n.request("POST", "/api/v1/load", {"model_name": "Qwen2.5-7B-Instruct-Q4_K_M"})
    assert r.status == 400, r
    err = r.json()["error"]
    assert err["code"] == "model_too_large" and "--max-vram" in err["message"], err
    r = n.request("POST", "/api/v1/load", {"model_name": "hf://org/tiny-GGUF/missing.gguf"})
    assert r.status == 202, r
    e = wait_for(lambda: next((x for x in n.status()["download_errors"]
                               if x["ref"] == "hf://org/tiny-GGUF/missing.gguf"), None),
                 30, 0.1, "the failed download in /api/status")
    assert "not found (HTTP 404)" in e["error"], e
    assert hub.stats()["cdn_bytes"] == os.path.getsize(
        os.path.join(os.path.dirname(STORIES), "TinyStories-656K-Q8_0.gguf"))


def test_node_sigterm_mid_download_then_restart_resumes(hub, tmp_path, start_node):
    """A node stopped (SIGTERM) while it downloads keeps the .part; started again with the same
    --model REF it resumes with a Range request from there, and the hub sends no more than the
    file once plus one chunk of the fake CDN."""
    from harness.hub import CHUNK
    home = tmp_path / "userhome"
    home.mkdir()
    part = home / ".models" / "stories260K.gguf.part"
    env = {"HF_ENDPOINT": hub.url, "HOME": str(home)}
    hub.control(trickle=100000)
    n = start_node("--model", REF, "--port", "0", env=env, ready_timeout=30)
    wait_for(lambda: part.exists() and part.stat().st_size >= 100000, 30, 0.05,
             "some bytes in the .part file")
    assert n.stop() == 0, n.stderr()
    kept = part.stat().st_size
    size = os.path.getsize(STORIES)
    assert 0 < kept < size
    assert not (home / ".models" / "stories260K.gguf").exists()
    hub.control(trickle=0)
    n2 = start_node("--model", REF, "--port", "0", env=env, ready_timeout=30)
    wait_for(lambda: (listed(n2, NAME) or {}).get("status") == "ready", 120, 0.2,
             "the resumed model to load")
    assert sha256(home / ".models" / "stories260K.gguf") == sha256(STORIES)
    ranges = [q[3] for q in hub.stats()["requests"] if q[2].startswith("/cdn/")]
    assert ranges[-1] != "" and int(ranges[-1][len("bytes="):-1]) >= kept, ranges
    assert hub.stats()["cdn_bytes"] <= size + CHUNK
    assert n2.complete(NAME).status == 200
    # started a third time, the file is there: nothing is fetched, and a joiner sees where the
    # model comes from (its model_source)
    n2.stop()
    n3 = start_node("--model", REF, "--port", "0", env=env, ready_timeout=30)
    assert "downloading" not in n3.stderr()
    j = start_node("--port", "0", "--join", n3.token, "--max-vram", "0.0001", env=ENV,
                   ready_timeout=30)
    wait_converged([n3, j])
    peer = next(p for p in j.status()["peers"] if p["id"] == n3.id)
    assert peer["model_source"] == {NAME: {"ref": REF, "size_bytes": size}}, peer


def test_node_wrong_content_leaves_no_file_and_no_model(hub, tmp_path, start_node):
    """The hub serves bytes that do not match its hash: the node deletes the part, says so in
    /api/status download_errors, and the model is not in the mesh's catalog."""
    home = tmp_path / "userhome"
    home.mkdir()
    hub.control(wrong=1)
    n = start_node("--model", REF, "--port", "0",
                   env={"HF_ENDPOINT": hub.url, "HOME": str(home),
                        "MESH_LLM_DL_BACKOFF_MS": "50"}, ready_timeout=30)
    e = wait_for(lambda: n.status().get("download_errors"), 60, 0.1, "the hash mismatch")
    assert e[0]["ref"] == REF and "sha256 mismatch" in e[0]["error"], e
    assert listed(n, NAME) is None
    assert NAME not in [c["name"] for c in n.status().get("catalog", [])]
    assert not (home / ".models").exists() or list((home / ".models").iterdir()) == []
    assert n.complete(NAME).status == 404


def test_catalog_file_on_disk_is_announced_and_fetched_by_a_joiner(hub, tmp_path, start_node):
    """A node holding a catalog model's file (same file name) announces the catalog name as its
    model_source; a joiner with room and no file downloads it from the hub by that name (rule 5
    "biggest" with a download: another replica) and serves it."""
    import shutil
    qfile = "qwen2.5-0.5b-instruct-q4_k_m.gguf"
    qname = "qwen2.5-0.5b-instruct-q4_k_m"
    repo = hub.root / "Qwen" / "Qwen2.5-0.5B-Instruct-GGUF"
    repo.mkdir(parents=True)
    shutil.copy(STORIES, repo / qfile)  # the fake hub's copy: a tiny model under that name
    mine = tmp_path / "a_models"
    mine.mkdir()
    shutil.copy(STORIES, mine / qfile)
    home_b = tmp_path / "home_b"
    home_b.mkdir()
    a = start_node("--port", "0", "--model", str(mine / qfile), env=ENV, ready_timeout=60)
    b = start_node("--port", "0", "--join", a.token,
                   env=dict(ENV, HF_ENDPOINT=hub.url, HOME=str(home_b)), ready_timeout=30)
    wait_converged([a, b])
    peer_a = next(p for p in b.status()["peers"] if p["id"] == a.id)
    assert peer_a["model_source"] == {
        qname: {"ref": "Qwen2.5-0.5B-Instruct-Q4_K_M", "size_bytes": os.path.getsize(STORIES)}
    }, peer_a
    wait_for(lambda: (home_b / ".models" / qfile).exists(), 60, 0.1, "B to download the file")
    assert sha256(home_b / ".models" / qfile) == sha256(STORIES)
    wait_for(lambda: b.id in ((listed(a, qname) or {}).get("hosts") or []), 60, 0.2,
             "B to serve the model as another replica")
    st = b.status()["node"]["assignment"]
    assert st == {"rule": "biggest", "model": qname}, st
    r = b.complete(qname)
    assert r.status == 200, r


def test_failed_mesh_download_is_given_up(hub, tmp_path, start_node):
    """The source a small node announces is gone from the hub: the joiner's download fails with
    a 404, it gives the model up (stands by) and does not try it again, while a node that joins
    after the file is back downloads and serves it."""
    home_a, home_b, home_c = (tmp_path / h for h in ("home_a", "home_b", "home_c"))
    for h in (home_a, home_b, home_c):
        h.mkdir()
    a = start_node("--port", "0", "--model", REF, "--max-vram", "0.001",
                   env=dict(ENV, HF_ENDPOINT=hub.url, HOME=str(home_a)), ready_timeout=30)
    wait_for(lambda: a.status().get("download_errors"), 20, 0.1, "A's refusal")
    hosted = hub.root / "org" / "tiny-GGUF" / "stories260K.gguf"
    os.rename(hosted, hosted.with_suffix(".away"))
    b = start_node("--port", "0", "--join", a.token,
                   env=dict(ENV, HF_ENDPOINT=hub.url, HOME=str(home_b)), ready_timeout=30)
    wait_for(lambda: "its download failed; this node gives it up" in b.stderr(), 60, 0.1,
             "B to give the model up")
    errs = b.status()["download_errors"]
    assert errs and errs[0]["ref"] == REF and "not found (HTTP 404)" in errs[0]["error"], errs
    asks = lambda: sum(1 for q in hub.stats()["requests"] if "stories260K.gguf" in q[2])
    before = asks()
    os.rename(hosted.with_suffix(".away"), hosted)
    c = start_node("--port", "0", "--join", a.token,
                   env=dict(ENV, HF_ENDPOINT=hub.url, HOME=str(home_c)), ready_timeout=30)
    wait_for(lambda: c.id in ((listed(a, NAME) or {}).get("hosts") or []), 120, 0.2,
             "C to download and serve the model")
    # C asked the hub for it (its 302 and the CDN's answer); B, ticking every 250 ms all along,
    # never asked again
    assert asks() == before + 2, hub.stats()["requests"]
    assert b.status()["node"]["assignment"]["rule"] == "standby"
    assert not (home_b / ".models" / "stories260K.gguf").exists()


def test_download_errors_keep_earlier_errors_of_a_model(hub, tmp_path, start_node):
    """Issue 33 item 12: download_errors keeps a bounded list of a model's errors, not only the
    latest: a 401, then a hash mismatch for the same ref, are both there (oldest first)."""
    from harness.node import model_path
    home = tmp_path / "userhome"
    home.mkdir()
    n = start_node("--model", model_path("stories260K"), "--port", "0",
                   env={"HF_ENDPOINT": hub.url, "HOME": str(home),
                        "MESH_LLM_DL_BACKOFF_MS": "50"}, ready_timeout=60)
    ref = "hf://org/tiny-GGUF/TinyStories-656K-Q8_0.gguf"

    def failed(count):
        e = next((x for x in n.status()["download_errors"] if x["ref"] == ref), None)
        return e if e and len(e.get("errors", [])) >= count else None
    hub.control(token="sekrit")
    r = n.request("POST", "/api/v1/load", {"model_name": ref})
    assert r.status == 202, r
    wait_for(lambda: next((x for x in n.status()["download_errors"] if x["ref"] == ref), None),
             30, 0.1, "the 401 in /api/status")
    hub.control(token="", wrong=1)
    r = n.request("POST", "/api/v1/load", {"model_name": ref})
    assert r.status == 202, r
    e = wait_for(lambda: failed(2), 60, 0.1, "both errors in /api/status")
    assert len(e["errors"]) == 2, e
    assert "access denied (HTTP 401)" in e["errors"][0], e
    assert "sha256 mismatch" in e["errors"][1], e
    assert e["error"] == e["errors"][1]


def test_a_member_cannot_make_a_joiner_download_a_url(hub, tmp_path, start_node):
    """Issue 33 item 11: a node announcing --model http://…/x.gguf (which it cannot hold) does
    not make a joiner without --model fetch that URL: only the hub's and the catalog's
    references are followed for others; MESH_LLM_DL_FOLLOW_URLS=1 on the joiner allows it."""
    home_a, home_b, home_c = (tmp_path / h for h in ("home_a", "home_b", "home_c"))
    for h in (home_a, home_b, home_c):
        h.mkdir()
    url = hub.url + "/org/tiny-GGUF/resolve/main/stories260K.gguf"
    a = start_node("--port", "0", "--model", url, "--max-vram", "0.001",
                   env=dict(ENV, HF_ENDPOINT=hub.url, HOME=str(home_a)), ready_timeout=30)
    wait_for(lambda: a.status().get("download_errors"), 20, 0.1, "A's refusal")
    n_req = len(hub.stats()["requests"])
    b = start_node("--port", "0", "--join", a.token,
                   env=dict(ENV, HF_ENDPOINT=hub.url, HOME=str(home_b)), ready_timeout=30)
    wait_converged([a, b])
    wait_for(lambda: "standing by as a worker" in b.stderr(), 30, 0.2,
             "B to decide it has no source to follow")
    assert b.status()["node"]["assignment"]["rule"] == "standby", b.status()["node"]
    assert b.status()["downloads"] == []
    assert len(hub.stats()["requests"]) == n_req + 1  # the /_stats call above only
    assert not (home_b / ".models" / "stories260K.gguf").exists()
    # a node whose own configuration allows URLs follows it
    c = start_node("--port", "0", "--join", a.token,
                   env=dict(ENV, HF_ENDPOINT=hub.url, HOME=str(home_c),
                            MESH_LLM_DL_FOLLOW_URLS="1"), ready_timeout=30)
    wait_for(lambda: (home_c / ".models" / "stories260K.gguf").exists(), 60, 0.2,
             "C to download the URL")
    assert sha256(home_c / ".models" / "stories260K.gguf") == sha256(STORIES)

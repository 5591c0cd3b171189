"""A model's vision projector downloaded with it and shared with its replicas (issue 34 item 5,
seed 004 "Distributed mmproj"), with the fake hub of test_download.py (harness/hub.py) on
127.0.0.1 serving stories260K and scripts/vision-model.sh's projector for it.

The three references that bring a projector (docs/models.md "Vision models"): ORG/REPO:QUANT
takes the repo's mmproj file as llama.cpp's -hf does (the one naming the model's quantization,
else F16, ...), hf://ORG/REPO/FILE.gguf?mmproj=PROJECTOR.gguf names it, and a catalog entry of
a vision model carries it. The projector lands beside the model as mmproj-<model>.gguf (never
listed as a model of its own), the node serves the model with it, and an image is answered
with its embeddings in the prompt (harness/vision.py: >= 16 more prompt tokens). A node that
gets the model through the mesh (the asker's model_source) gets the projector with it, and its
replica is announced as taking images and answers them for the asker."""
import os
import shutil
import subprocess

from harness.hub import STORIES, sha256
from harness.mesh import ENV, wait_converged
from harness.node import MESH_BIN, wait_for
from harness.vision import answered_with_image, projector_file

REPO = "org/vis-GGUF"
MODEL_FILE = "stories260K-F32.gguf"
NAME = "stories260K-F32"
PROJ_FILE = "mmproj-stories260K-F16.gguf"
LOCAL_PROJ = "mmproj-stories260K-F32.gguf"  # model_ref_mmproj_local


def vision_repo(hub, root=REPO, model_file=MODEL_FILE, proj_file=PROJ_FILE):
    """The hub's repo of the vision model: the model, its real projector and a broken one of
    another quantization (a wrong pick fails to load). Returns the real projector's path."""
    d = hub.root / root
    d.mkdir(parents=True, exist_ok=True)
    shutil.copy(STORIES, d / model_file)
    proj = projector_file()
    shutil.copy(proj, d / proj_file)
    (d / "mmproj-stories260K-Q8_0.gguf").write_bytes(b"GGUF")
    (d / "README.md").write_text("a vision model\n")
    return proj


def entry(node, name):
    r = node.request("GET", "/v1/models")
    assert r.status == 200, r
    return next((m for m in r.json()["data"] if m["id"] == name), None)


def ready(node, name, timeout=120):
    wait_for(lambda: (entry(node, name) or {}).get("status") == "ready", timeout, 0.2,
             f"{name} downloaded and ready")


def assert_projector_beside(models, proj, source):
    """The projector downloaded into the models directory beside the model, from source."""
    assert sha256(models / LOCAL_PROJ) == sha256(proj)
    assert (models / f"{LOCAL_PROJ}.source").read_text().strip() == source
    assert sha256(models / MODEL_FILE) == sha256(STORIES)
    assert not (models / "mmproj-stories260K-Q8_0.gguf").exists()


def fetched(hub, file):
    return [r for r in hub.stats()["requests"] if r[2].endswith("/" + file)]


def test_quant_reference_brings_the_repos_projector(hub, tmp_path, start_node):
    proj = vision_repo(hub)
    home = tmp_path / "home"
    home.mkdir()
    n = start_node("--port", "0", "--model", f"{REPO}:F32",
                   env={"HF_ENDPOINT": hub.url, "HOME": str(home)}, ready_timeout=60)
    ready(n, NAME)
    models = home / ".models"
    assert_projector_beside(models, proj, f"hf://{REPO}/{PROJ_FILE}")
    assert fetched(hub, PROJ_FILE) and not fetched(hub, "mmproj-stories260K-Q8_0.gguf")
    assert f"vision projector {models / LOCAL_PROJ}" in n.stderr()
    # the projector is no model of its own; the model takes images
    ids = [m["id"] for m in n.request("GET", "/v1/models").json()["data"]]
    assert ids == [NAME], ids
    r = n.request("POST", "/api/show", {"model": NAME})
    assert r.status == 200 and "vision" in r.json()["capabilities"], r
    r = answered_with_image(n, NAME)
    assert r.headers["x-mesh-route"] == "local", r.headers
    n.stop()

    # a restart finds both on disk: nothing is downloaded again, the model still reads images
    before = len(hub.stats()["requests"])
    n = start_node("--port", "0", "--model", f"{REPO}:F32",
                   env={"HF_ENDPOINT": hub.url, "HOME": str(home)}, ready_timeout=60)
    ready(n, NAME)
    assert not [r for r in hub.stats()["requests"][before:] if "/resolve/" in r[2]]
    answered_with_image(n, NAME)


def test_catalog_vision_model_comes_with_its_projector(hub, tmp_path, start_node):
    """The catalog's SmolVLM entry names its projector: the test model's bytes stand in for the
    catalog's files on the fake hub."""
    repo, file = "ggml-org/SmolVLM-256M-Instruct-GGUF", "SmolVLM-256M-Instruct-Q8_0.gguf"
    proj = vision_repo(hub, repo, file, "mmproj-SmolVLM-256M-Instruct-Q8_0.gguf")
    home = tmp_path / "home"
    home.mkdir()
    name = "SmolVLM-256M-Instruct-Q8_0"
    n = start_node("--port", "0", "--model", name, "--max-vram", "8",
                   env={"HF_ENDPOINT": hub.url, "HOME": str(home)}, ready_timeout=60)
    ready(n, name)
    local = home / ".models" / f"mmproj-{name}.gguf"
    assert sha256(local) == sha256(proj)
    assert (home / ".models" / f"mmproj-{name}.gguf.source").read_text().strip() == \
        f"hf://{repo}/mmproj-SmolVLM-256M-Instruct-Q8_0.gguf"
    answered_with_image(n, name)
    # `mesh-llm models rm` takes the projector with the model
    r = subprocess.run([MESH_BIN, "models", "rm", name], capture_output=True, text=True,
                       env=dict(os.environ, HOME=str(home)), timeout=60)
    assert r.returncode == 0, r.stderr
    assert f"removed {local}" in r.stdout, r.stdout
    assert not local.exists() and not (home / ".models" / file).exists()


def test_mesh_download_brings_the_projector_to_the_replica(hub, tmp_path, start_node):
    """A is too small for the model it asks for (hf://…?mmproj=): it announces the reference as
    the model's source; B joins with room, downloads the model and its projector from that
    source, serves it with the projector (announced as taking images), and an image sent to A
    is answered by B's replica with the image read."""
    proj = vision_repo(hub)
    ref = f"hf://{REPO}/{MODEL_FILE}?mmproj={PROJ_FILE}"
    home_a, home_b = tmp_path / "home_a", tmp_path / "home_b"
    home_a.mkdir()
    home_b.mkdir()
    a = start_node("--port", "0", "--model", ref, "--max-vram", "0.001",
                   env=dict(ENV, HF_ENDPOINT=hub.url, HOME=str(home_a)), ready_timeout=60)
    errs = wait_for(lambda: a.status().get("download_errors"), 30, 0.1, "A's refusal")
    assert errs[0]["ref"] == ref and "not downloading" in errs[0]["error"], errs
    assert not fetched(hub, PROJ_FILE)  # refused before the projector too
    b = start_node("--port", "0", "--join", a.token,
                   env=dict(ENV, HF_ENDPOINT=hub.url, HOME=str(home_b)), ready_timeout=60)
    wait_converged([a, b])
    ready(b, NAME)
    assert b.status()["node"]["assignment"] == {"rule": "download_and_serve", "model": NAME}
    assert_projector_beside(home_b / ".models", proj, f"hf://{REPO}/{PROJ_FILE}")
    assert not (home_a / ".models").exists() or list((home_a / ".models").iterdir()) == []

    def vision_on_a():
        for p in a.status()["peers"]:
            if p["id"] == b.id:
                return {m["name"]: m.get("vision", False) for m in p["available_models"]}
        return None
    got = wait_for(lambda: (lambda v: v if v and NAME in v else None)(vision_on_a()), 60, 0.2,
                   "B's replica announced to A")
    assert got[NAME] is True, got
    ready(a, NAME, timeout=60)
    r = answered_with_image(a, NAME)
    assert r.headers["x-mesh-node"] == b.id, r.headers

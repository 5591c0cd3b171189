"""Images and vision projectors (issue 17 item 5, --mmproj; issues 32 and 34 item 5): a request
with image content for a model served without a projector is a 400 that says so — OpenAI-shaped
on the OpenAI endpoints, Anthropic-shaped on /v1/messages — decided by the node that receives it
before anything is routed (also for a model a peer serves), and the node keeps serving. A node
given --mmproj for a model announces that it takes images (available_models[].vision).

With a projector (scripts/vision-model.sh: random weights for stories260K, 16 embeddings per
image), images are answered end to end: OpenAI image_url parts and Ollama's images, on the node
that serves the model, through a --client and through a replica of the model that has no
projector. The proof that the image was read is llama-server's own count: the prompt of a
request with an image is at least IMAGE_TOKENS longer than the same text alone (an image that
never reached the projector adds at most its marker)."""
import os
import shutil

import pytest

from harness import vision
from harness.node import http, model_path, wait_for
from harness.vision import IMAGE_TOKENS, PICTURE, QUESTION, projector_file

S = "stories260K"
T = "TinyStories-656K-Q8_0"
ENV = {"MESH_LLM_ROUTE_REFRESH_MS": "200"}
PNG = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwAD" \
      "hgGAWjR9awAAAABJRU5ErkJggg=="


@pytest.fixture(scope="module")
def projector():
    return projector_file()


def vision_config(tmp_path, proj):
    """A config file whose models entry gives stories260K its projector, as a user writes it."""
    conf = tmp_path / "vision.conf"
    conf.write_text(f'models = ( {{ model = "{os.path.abspath(model_path(S))}"; '
                    f'mmproj = "{proj}"; }} );\n')
    return str(conf)


def chat(node, image, **extra):
    return vision.chat(node, S, image, **extra)


def answered_with_image(node, **extra):
    return vision.answered_with_image(node, S, **extra)


def chat_image(model):
    return {"model": model, "max_tokens": 4, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "What is in this picture?"},
        {"type": "image_url", "image_url": {"url": PNG}}]}]}


def messages_image(model):
    return {"model": model, "max_tokens": 4, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                     "data": PNG.split(",", 1)[1]}},
        {"type": "text", "text": "What is in this picture?"}]}]}


def responses_image(model):
    return {"model": model, "max_output_tokens": 4, "input": [{"role": "user", "content": [
        {"type": "input_text", "text": "What is in this picture?"},
        {"type": "input_image", "image_url": PNG}]}]}


def assert_refused(node, model):
    r = node.request("POST", "/v1/chat/completions", chat_image(model))
    assert r.status == 400, r
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["code"] == "model_not_multimodal", err
    assert f"model '{model}' cannot read images" in err["message"] and "--mmproj" in err["message"]
    r = node.request("POST", "/v1/responses", responses_image(model))
    assert r.status == 400 and r.json()["error"]["code"] == "model_not_multimodal", r
    r = node.request("POST", "/v1/messages", messages_image(model))
    assert r.status == 400, r
    a = r.json()
    assert a["type"] == "error" and a["error"]["type"] == "invalid_request_error", a
    assert "cannot read images" in a["error"]["message"], a
    # text only: served as usual
    text = {"model": model, "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]}
    r = node.request("POST", "/v1/chat/completions", text)
    assert r.status == 200, r


def requests_served(node, model):
    """Requests node counted for model (any endpoint, status, route)."""
    r = http(node.console_port, "GET", "/metrics")
    total = 0
    for line in r.body.decode().splitlines():
        if line.startswith(f'mesh_llm_requests_total{{model="{model}"'):
            total += int(float(line.rsplit(" ", 1)[1]))
    return total


def test_images_refused_without_projector(start_node):
    n = start_node("--port", "0", "--model", model_path(S))
    assert_refused(n, S)
    # counted as the node's own 400s; only the text request reached llama-server
    for ep in ("chat", "responses", "messages"):
        assert n.metric(f'mesh_llm_requests_total{{model="{S}",endpoint="{ep}",code="400",'
                        'route="local"}') == 1, ep
    assert n.metric(f'mesh_llm_requests_total{{model="{S}",endpoint="chat",code="200",'
                    'route="local"}') == 1
    assert n.metric(f'mesh_llm_time_to_first_token_seconds_count{{model="{S}"}}') == 1


def test_images_refused_before_routing_to_a_peer(start_node):
    """B serves another model; a request with images for A's model is refused by B itself:
    A never sees it. Through a passive --client the host's own check answers it."""
    a = start_node("--port", "0", "--model", model_path(S), env=ENV)
    b = start_node("--port", "0", "--model", model_path(T), "--join", a.token, env=ENV)
    wait_for(lambda: any(m["id"] == S and m["status"] == "ready"
                         for m in b.request("GET", "/v1/models").json()["data"]),
             timeout=60, what=f"{S} ready as seen from b")
    before = requests_served(a, S)
    assert_refused(b, S)
    assert requests_served(a, S) == before + 1  # only the text request went to a
    c = start_node("--port", "0", "--client", "--join", a.token, env=ENV)
    wait_for(lambda: any(m["id"] == S and m["status"] == "ready"
                         for m in c.request("GET", "/v1/models").json()["data"]),
             timeout=60, what=f"{S} ready as seen from the client")
    assert_refused(c, S)


def test_projector_announced(start_node, tmp_path):
    """--mmproj MODEL=PATH: the node announces that the model takes images and passes the file to
    the model's llama-server. (A broken stand-in file shows where it goes, by failing to load
    there; test_image_answered loads a real one.)"""
    d = tmp_path / "models"
    d.mkdir()
    shutil.copyfile(model_path(T), d / f"{T}.gguf")
    proj = tmp_path / "projector.gguf"
    proj.write_bytes(b"GGUF")
    a = start_node("--port", "0", "--model", model_path(S), env=ENV)
    b = start_node("--port", "0", "--models-dir", str(d), "--mmproj", f"{T}={proj}",
                   "--join", a.token, env=ENV)

    def announced():
        for p in a.status()["peers"]:
            if p["id"] == b.id:
                return {m["name"]: m.get("vision", False) for m in p["available_models"]}
        return None
    got = wait_for(lambda: announced() and T in announced() and announced(), timeout=30,
                   what="b's announcement")
    assert got[T] is True, got
    assert a.status()["catalog"]  # a keeps working
    # a's own model has no projector: not announced as taking images
    mine = {m["name"]: m.get("vision", False) for p in b.status()["peers"] if p["id"] == a.id
            for m in p["available_models"]}
    assert mine.get(S) is False, mine
    assert "vision projector" in b.stderr() and str(proj) in b.stderr()
    # the projector goes to the model's llama-server (--mmproj): loading the stand-in fails there,
    # in its multimodal loader, and the request gets the load error
    r = b.request("POST", "/v1/completions", {"model": T, "prompt": "Once", "max_tokens": 2})
    assert r.status >= 500 and r.json()["error"]["code"] == "model_load_failed", r
    wait_for(lambda: f"failed to load model '{proj}'" in b.stderr(), timeout=30,
             what="llama-server's projector loader to name the file")


def test_image_answered(start_node, tmp_path, projector):
    """A node given a projector in its config file's models entry: the model is announced as
    taking images (Ollama's capabilities, the gossip), and an image is answered on the OpenAI API
    (image_url, data URI) and on Ollama's (/api/chat images, base64), read by the projector."""
    n = start_node("--config", vision_config(tmp_path, projector), "--port", "0")
    assert "vision projector" in n.stderr() and projector in n.stderr()
    r = n.request("POST", "/api/show", {"model": S})
    assert r.status == 200 and "vision" in r.json()["capabilities"], r
    r = answered_with_image(n)
    assert r.headers["x-mesh-node"] == n.id and r.headers["x-mesh-route"] == "local", r.headers

    def ollama(images):
        msg = {"role": "user", "content": QUESTION}
        if images:
            msg["images"] = [PICTURE]
        r = n.request("POST", "/api/chat", {"model": S, "stream": False, "messages": [msg],
                                            "options": {"num_predict": 4}})
        assert r.status == 200, r
        o = r.json()
        assert o["done"] is True and o["message"]["role"] == "assistant", o
        assert isinstance(o["message"]["content"], str) and o["eval_count"] >= 1, o
        return o["prompt_eval_count"]
    text_only = ollama(False)
    assert ollama(True) >= text_only + IMAGE_TOKENS


def test_image_routed_to_the_projector(start_node, tmp_path, projector):
    """A has stories260K with its projector, B the same model without one. An image sent to B is
    not answered by B's llama-server: B's router sends it to A (the copy with a projector); text
    stays on B. A passive --client spreads requests over both hosts (its table does not say which
    has a projector): every image is answered with the image read, by A, whichever host the
    client picked (B passes it on)."""
    a = start_node("--config", vision_config(tmp_path, projector), "--port", "0", env=ENV)
    b = start_node("--port", "0", "--model", model_path(S), "--join", a.token, env=ENV)

    def vision_of_peers(node):
        return {p["id"]: {m["name"]: m.get("vision", False) for m in p["available_models"]}
                for p in node.status()["peers"]}
    wait_for(lambda: vision_of_peers(b).get(a.id, {}).get(S) is True, timeout=60,
             what="a's projector announced to b")
    r = answered_with_image(b)
    assert r.headers["x-mesh-node"] == a.id, r.headers
    t = chat(b, False)
    assert t.status == 200 and t.headers["x-mesh-node"] == b.id, t.headers

    c = start_node("--port", "0", "--client", "--join", a.token, env=ENV)

    def hosts_seen():
        for m in c.request("GET", "/v1/models").json()["data"]:
            if m["id"] == S and m["status"] == "ready":
                return m
        return None
    wait_for(hosts_seen, timeout=60, what=f"{S} ready as seen from the client")
    # stickiness keys spread the requests over the client's ring of hosts; X-Mesh-Node names the
    # node whose llama-server answered: always a's, never b's
    for user in (f"u{i}" for i in range(10)):
        r = answered_with_image(c, user=user)
        assert r.headers["x-mesh-node"] == a.id, (user, r.headers)

"""Images and vision projectors (issue 17 item 5, --mmproj): a request with image content for a
model served without a projector is a 400 that says so — OpenAI-shaped on the OpenAI endpoints,
Anthropic-shaped on /v1/messages — decided by the node that receives it before anything is
routed (also for a model a peer serves), and the node keeps serving. A node given --mmproj for a
model announces that it takes images (available_models[].vision)."""
import shutil

from harness.node import http, model_path, wait_for

S = "stories260K"
T = "TinyStories-656K-Q8_0"
ENV = {"MESH_LLM_ROUTE_REFRESH_MS": "200"}
PNG = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwAD" \
      "hgGAWjR9awAAAABJRU5ErkJggg=="


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
    the model's llama-server. (The shared models have no projector: a stand-in file shows where
    it goes, by failing to load there.)"""
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

"""Images for the vision tests (test_vision.py, test_vision_download.py): a real PNG made here,
an OpenAI chat with or without it, and the proof that the image was read — llama-server's own
count: the prompt of a request with an image is at least IMAGE_TOKENS longer than the same text
alone (an image that never reached the projector adds at most its marker). The projector is
scripts/vision-model.sh's (random weights for stories260K, 16 embeddings per image)."""
import base64
import struct
import zlib

from harness.node import made_model

IMAGE_TOKENS = 16  # (56 / 14)²: the projector's image size over its patch size
QUESTION = "What is in this picture?"


def png(w, h):
    """A real RGB PNG (a colour gradient), made here: w x h, 8 bits per channel."""
    rows = b"".join(b"\0" + b"".join(bytes((x * 255 // w, y * 255 // h, 96)) for x in range(w))
                    for y in range(h))

    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data +
                struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


PICTURE = base64.b64encode(png(40, 30)).decode()


def projector_file():
    """The path of the synthetic projector for stories260K (made once, cached)."""
    return made_model("vision-model.sh", "vision")


def chat(node, model, image, **extra):
    content = [{"type": "text", "text": QUESTION}]
    if image:
        content.append({"type": "image_url",
                        "image_url": {"url": "data:image/png;base64," + PICTURE}})
    body = {"model": model, "max_tokens": 4, "messages": [{"role": "user", "content": content}]}
    return node.request("POST", "/v1/chat/completions", dict(body, **extra))


def answered_with_image(node, model, **extra):
    """An OpenAI chat with a picture is answered, and its prompt holds the image's embeddings:
    IMAGE_TOKENS more than the same text alone. Returns the answer's response."""
    t = chat(node, model, False, **extra)
    assert t.status == 200, t
    r = chat(node, model, True, **extra)
    assert r.status == 200, r
    o = r.json()
    assert o["object"] == "chat.completion" and o["model"] == model, o
    c = o["choices"][0]
    assert c["message"]["role"] == "assistant" and isinstance(c["message"]["content"], str), o
    assert c["finish_reason"] in ("length", "stop") and o["usage"]["completion_tokens"] >= 1, o
    text_only = t.json()["usage"]["prompt_tokens"]
    assert o["usage"]["prompt_tokens"] >= text_only + IMAGE_TOKENS, (o["usage"], text_only)
    return r

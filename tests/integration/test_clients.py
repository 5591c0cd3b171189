"""Official client libraries (npm openai, @anthropic-ai/sdk; tests/js/clients.mjs) against a solo
node and through a --client node: chat, streamed chat, a function-calling exchange, a tool call
the model produces (tool_choice "required": llama-server's grammar), embeddings,
the Responses API, Anthropic messages (streamed and not), count_tokens, and an Anthropic-shaped
error for an unknown model."""
import json
import os
import shutil
import subprocess

import pytest

from harness.node import ROOT, model_path, wait_for

LLM = "stories260K"
EMB = "TinyStories-656K-Q8_0"
JS = os.path.join(ROOT, "tests", "js")
ENV = {"MESH_LLM_ROUTE_REFRESH_MS": "200"}

pytestmark = pytest.mark.skipif(
    not shutil.which("node") or not os.path.isdir(os.path.join(JS, "node_modules", "openai")),
    reason="needs node and tests/js/node_modules (scripts/deps.sh test)")


def run_case(port, case):
    r = subprocess.run(["node", os.path.join(JS, "clients.mjs"), f"http://127.0.0.1:{port}", case,
                        LLM, EMB], capture_output=True, text=True, timeout=120, cwd=JS)
    if r.returncode != 0:
        return None, r.stderr.strip()[-1500:]
    return json.loads(r.stdout.strip().splitlines()[-1]), None


def check(case, out):
    """The one right answer for each case; returns a problem or None."""
    if case == "chat":
        ok = out["text"] and out["finish"] == "length" and out["usage"]["completion_tokens"] == 8
    elif case == "chat_stream":
        ok = out["text"] and out["finish"] == "length" and out["chunks"] >= 8
    elif case == "tools":
        ok = out["role"] == "assistant" and out["finish"] in ("length", "tool_calls") and (
            out["text"] or out["tool_calls"])
    elif case == "tool_call":
        calls = out["calls"]
        ok = out["finish"] == "tool_calls" and len(calls) == 1 and calls[0]["id"] and \
            calls[0]["type"] == "function" and calls[0]["name"] == "get_weather" and \
            isinstance(calls[0]["args"], dict) and isinstance(calls[0]["args"].get("city"), str)
    elif case == "embeddings":
        ok = out["n"] == 2 and out["dim"] == 128  # TinyStories-656K: embedding length 128
    elif case == "responses":
        ok = out["status"] in ("completed", "incomplete") and out["text"] and \
            out["usage"]["output_tokens"] == 8
    elif case == "messages":
        ok = out["type"] == "message" and out["role"] == "assistant" and out["text"] and \
            out["stop"] == "max_tokens" and out["usage"]["output_tokens"] == 8
    elif case == "messages_stream":
        ok = out["text"] and out["first"] == "message_start" and out["last"] == "message_stop"
    elif case == "count_tokens":
        ok = isinstance(out["input_tokens"], int) and out["input_tokens"] > 0
    elif case == "messages_unknown_model":
        ok = out["status"] == 404 and out["type"] == "error" and \
            out["error_type"] == "not_found_error" and "no-such-model" in out["message"]
    else:
        ok = False
    return None if ok else f"{case}: unexpected {out}"


CASES = ["chat", "chat_stream", "tools", "tool_call", "embeddings", "responses", "messages", "messages_stream",
         "count_tokens", "messages_unknown_model"]


def run_all(port):
    problems, outs = [], {}
    for case in CASES:
        out, err = run_case(port, case)
        if err:
            problems.append(f"{case}: client failed: {err}")
            continue
        outs[case] = out
        p = check(case, out)
        if p:
            problems.append(p)
    return problems, outs


# The story models carry no chat template; this one has function calling (see its comment)
TEMPLATE = os.path.join(ROOT, "tests", "integration", "data", "tool_calls.jinja")


def host_args():
    return ("--port", "0", "--model", model_path(LLM), "--model", model_path(EMB) + ":embedding",
            "--llamacpp-args", f"--chat-template-file {TEMPLATE}")


def test_official_clients_solo(start_node):
    n = start_node(*host_args(), env=ENV)
    problems, outs = run_all(n.api_port)
    assert not problems, "\n".join(problems)
    # the same greedy answer by both APIs of one model
    assert outs["chat"]["text"] == outs["chat_stream"]["text"]


def test_official_clients_through_client_node(start_node):
    h = start_node(*host_args(), env=ENV)
    c = start_node("--port", "0", "--client", "--join", h.token, env=ENV)

    def both_ready():
        r = c.request("GET", "/v1/models")
        st = {m["id"]: m.get("status") for m in r.json()["data"]} if r.status == 200 else {}
        return st.get(LLM) == "ready" and st.get(EMB) == "ready"
    wait_for(both_ready, timeout=30, what="the client node to see both models ready")
    problems, outs = run_all(c.api_port)
    assert not problems, "\n".join(problems)
    solo, _ = run_case(h.api_port, "chat")
    assert outs["chat"]["text"] == solo["text"]  # greedy: the host's own answer, byte for byte

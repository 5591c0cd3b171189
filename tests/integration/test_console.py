"""The web console (GET / on the console port) in a real browser: headless Chromium driven by
puppeteer-core (tests/js/browser.mjs) against real nodes. Screenshots of each state are written
into the test's tmp dir (paths printed)."""
import json
import os
import socket
import subprocess
import time

import pytest

from harness.node import ROOT, http, model_path, wait_for
from harness.idle import start_idle
from harness.mesh import DEAD_BOUND_S, ENV

A_MODEL = "stories260K"
B_MODEL = "TinyStories-656K-Q8_0"
JS_DIR = os.path.join(ROOT, "tests", "js")
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")


class Browser:
    """One headless Chromium page, steered through tests/js/browser.mjs (one JSON per line)."""

    def __init__(self, tmp_path):
        if not os.path.exists(os.path.join(JS_DIR, "node_modules", "puppeteer-core")):
            pytest.fail("tests/js/node_modules lacks puppeteer-core: run scripts/deps.sh test")
        if not os.access(CHROMIUM, os.X_OK):
            pytest.fail(f"{CHROMIUM} not found: run scripts/deps.sh test")
        self.tmp = tmp_path
        self.err = open(tmp_path / "browser.stderr", "wb")
        self.p = subprocess.Popen(["node", "browser.mjs"], cwd=JS_DIR, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=self.err,
                                  env=dict(os.environ, CHROMIUM=CHROMIUM))

    def do(self, cmd, **kw):
        kw["cmd"] = cmd
        self.p.stdin.write((json.dumps(kw) + "\n").encode())
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:
            pytest.fail(f"the browser driver exited: {open(self.err.name).read()[-2000:]}")
        r = json.loads(line)
        if not r["ok"]:
            raise AssertionError(f"{cmd} {kw}: {r['error']}")
        return r["value"]

    def wait(self, js, timeout, what):
        try:
            return self.do("wait", js=js, timeout=int(timeout * 1000))
        except AssertionError as e:
            self.shot("failed")
            pytest.fail(f"page: timed out after {timeout}s waiting for {what} ({e})")

    def shot(self, name):
        path = str(self.tmp / f"console-{name}.png")
        self.do("screenshot", path=path)
        print(f"screenshot: {path}")
        return path

    def close(self):
        try:
            self.p.stdin.write(b'{"cmd":"quit"}\n')
            self.p.stdin.flush()
            self.p.wait(timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            self.p.kill()
            self.p.wait(timeout=10)
        self.err.close()


@pytest.fixture
def browser(tmp_path):
    b = Browser(tmp_path)
    yield b
    b.close()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def node_states_js():
    return ("Object.fromEntries([...document.querySelectorAll('#topology .node')]"
            ".map(g => [g.dataset.id, g.dataset.state]))")


def test_console_mesh_chat_and_death(start_node, browser, tmp_path):
    a = start_node("--port", "0", "--model", model_path(A_MODEL), env=ENV)
    b = start_node("--port", "0", "--model", model_path(B_MODEL), "--join", a.token, env=ENV)
    c = start_node("--port", "0", "--model", model_path(A_MODEL), "--join", b.token, env=ENV)
    cport = a.console_port
    origin = f"http://127.0.0.1:{cport}"

    r = http(cport, "GET", "/")
    assert r.status == 200 and r.headers["content-type"].startswith("text/html"), r
    assert "frame-ancestors 'none'" in r.headers["content-security-policy"]

    browser.do("open", url=f"{origin}/")
    # 3 nodes (this one and two alive peers) and both models ready, without reloading
    ids = {a.id, b.id, c.id}
    browser.wait(f"(() => {{ const s = {node_states_js()};"
                 f" return Object.keys(s).length === 3 && {json.dumps(sorted(ids))}"
                 f".every(i => s[i] === 'self' || s[i] === 'alive'); }})()",
                 timeout=60, what="3 nodes alive in the topology")
    ready = ("(() => { const st = m => { const r = document.querySelector("
             "`#catalog tr[data-model=\"${m}\"] .status`); return r && r.textContent; };"
             f" return st({json.dumps(A_MODEL)}) === 'ready' && st({json.dumps(B_MODEL)}) === 'ready'; }})()")
    browser.wait(ready, timeout=60, what="both models ready in the catalog")
    # the RTT matrix: every pair of the 3 nodes has a measured, announced RTT
    browser.wait("[...document.querySelectorAll('#rtt-matrix td.rtt')]"
                 ".filter(td => /^[0-9]+$/.test(td.textContent)).length === 6",
                 timeout=60, what="the 3 x 3 RTT matrix")
    assert browser.do("eval", js="document.getElementById('conn').dataset.mode") == "live"
    # each ready model with its free slots: this node's (its status) and a peer's (announced)
    for nid in (a.id, c.id):
        browser.wait(f"(() => {{ const g = document.querySelector('#topology .node[data-id=\"{nid}\"]');"
                     f" return g && /{A_MODEL} \\(\\d+\\/\\d+ slots free\\)/"
                     ".test(g.querySelector('.models').textContent); })()",
                     timeout=30, what="the node's model labelled with its free slots")
    assert browser.do("eval", js="document.getElementById('self-id').textContent") == a.id
    assert browser.do("eval", js="document.getElementById('self-token').textContent") == a.token
    browser.shot("mesh")

    # chat with b's model: the reply streams in, and the page names b as the node that served
    browser.do("eval", js=f"(() => {{ const s = document.getElementById('chat-model');"
                          f" s.value = {json.dumps(B_MODEL)}; return s.value; }})()")
    browser.do("type", selector="#chat-input", text="Once upon a time")
    browser.do("click", selector="#chat-send")
    node = browser.wait("document.getElementById('chat-meta').dataset.node", timeout=60,
                        what="the chat answer and the node that served it")
    assert node == b.id
    reply = browser.do("eval", js="document.querySelector('#chat-log .msg.assistant .text')"
                                  ".textContent")
    assert len(reply.strip()) > 0
    meta = browser.do("eval", js="document.getElementById('chat-meta').textContent")
    assert f"answered by {b.id[:8]}" in meta and "tokens/s" in meta
    # the node's own request log agrees, and the page shows it
    log = a.status()["requests"]
    assert (log[0]["model"], log[0]["node"], log[0]["route"]) == (B_MODEL, b.id, "tunnel")
    browser.wait("document.querySelectorAll('#requests tbody tr').length >= 1", timeout=10,
                 what="the request in the page's log")
    browser.shot("chat")

    # kill -9 one node: the page turns it dead within the detection bound
    t0 = time.monotonic()
    c.proc.kill()
    c.proc.wait(timeout=10)
    browser.wait(f"{node_states_js()}[{json.dumps(c.id)}] === 'dead'", timeout=DEAD_BOUND_S + 10,
                 what="the killed node dead on the page")
    elapsed = time.monotonic() - t0
    print(f"kill -9 -> dead on the page after {elapsed:.2f}s (bound {DEAD_BOUND_S:.2f}s)")
    assert elapsed <= DEAD_BOUND_S + 2.5  # + one coalescing gap and the page's own work
    states = browser.do("eval", js=node_states_js())
    assert states[b.id] == "alive" and states[a.id] == "self"
    browser.shot("dead")

    # phone width: the same page, nothing wider than the screen
    browser.do("open", url=f"{origin}/", width=390, height=844)
    browser.wait(f"{node_states_js()}[{json.dumps(b.id)}] === 'alive'", timeout=20,
                 what="the page at phone width")
    overflow = browser.do("eval", js="document.documentElement.scrollWidth")
    assert overflow <= 390, f"page is {overflow}px wide at a 390px viewport"
    browser.shot("phone")
    # no script errors, no failed requests
    errors = browser.do("log")
    assert errors == [], errors


def test_console_falls_back_to_polling(start_node, browser):
    # the event stream fails at once (a stand-in EventSource that errors): the page polls
    # /api/status and still follows the mesh
    a = start_node("--port", "0", "--own-mesh", env=ENV)
    browser.do("init", js="window.EventSource = class { constructor() { setTimeout(() =>"
                          " this.onerror && this.onerror(new Event('error')), 0); } close() {} };")
    browser.do("open", url=f"http://127.0.0.1:{a.console_port}/")
    browser.wait("document.getElementById('conn').dataset.mode === 'polling' &&"
                 f" document.getElementById('self-id').textContent === {json.dumps(a.id)}",
                 timeout=20, what="polling mode showing the node")
    b = start_node("--port", "0", "--join", a.token, env=ENV)
    browser.wait(f"{node_states_js()}[{json.dumps(b.id)}] === 'alive'", timeout=30,
                 what="a peer that joined later, through polling")
    assert browser.do("eval", js="document.getElementById('conn').dataset.mode") == "polling"


def test_console_idle_node_joins_from_the_form(start_node, browser):
    # a mesh of two nodes with a model each; a third node starts idle (too little memory to be
    # given a model) and is joined from its console's form
    a = start_node("--port", "0", "--model", model_path(A_MODEL), env=ENV)
    b = start_node("--port", "0", "--model", model_path(B_MODEL), "--join", a.token, env=ENV)
    i = start_idle(start_node, "--max-vram", "0.001")
    r = i.request("POST", "/v1/completions", {"model": A_MODEL, "prompt": "x", "max_tokens": 2})
    assert r.status == 503, r  # idle: not in a mesh yet
    browser.do("open", url=f"http://127.0.0.1:{i.console_port}/")
    browser.wait("document.getElementById('conn').dataset.mode === 'idle' &&"
                 f" document.getElementById('self-id').textContent === {json.dumps(i.id)}",
                 timeout=20, what="the idle node's page")
    assert browser.do("eval", js=f"{node_states_js()}") == {i.id: "self"}
    browser.shot("idle")
    browser.do("eval", js=f"(() => {{ document.getElementById('join-token').value ="
                          f" {json.dumps(a.token)}; return true; }})()")
    browser.do("click", selector="#join-send")
    browser.wait("document.getElementById('join-result').dataset.ok === '1'", timeout=20,
                 what="the join accepted")
    browser.wait(f"(() => {{ const s = {node_states_js()};"
                 f" return s[{json.dumps(a.id)}] === 'alive' && s[{json.dumps(b.id)}] === 'alive'; }})()",
                 timeout=60, what="the mesh on the page")
    ready = ("(() => { const st = m => { const r = document.querySelector("
             "`#catalog tr[data-model=\"${m}\"] .status`); return r && r.textContent; };"
             f" return st({json.dumps(A_MODEL)}) === 'ready' && st({json.dumps(B_MODEL)}) === 'ready'; }})()")
    browser.wait(ready, timeout=60, what="both models ready on the joined node's page")
    browser.wait("document.getElementById('conn').dataset.mode === 'live' &&"
                 " document.getElementById('idle-banner').hidden", timeout=20,
                 what="live, without the idle banner, once joined")
    browser.shot("joined")
    # the inference port answers now, through the mesh
    wait_for(lambda: i.request("POST", "/v1/completions",
                               {"model": B_MODEL, "prompt": "Once", "max_tokens": 4}).status == 200,
             timeout=60, what="the joined node's inference port to answer")
    r = i.complete(A_MODEL, max_tokens=4)
    assert r.status == 200 and r.headers["x-mesh-node"] == a.id, r
    assert browser.do("log") == []


# ---- issue 26, friction 10: the first hour in the console ----

def visible(sel):
    return f"(() => {{ const e = document.querySelector({json.dumps(sel)}); return !!e && !e.hidden" \
           f" && e.getBoundingClientRect().height > 0; }})()"


def test_console_asks_for_the_api_key_and_keeps_it_in_the_tab(start_node, browser, tmp_path):
    """With --api-key-file the page said "node unreachable" and showed nothing else."""
    key = tmp_path / "key"
    key.write_text("s3cret-console-key\n")
    a = start_node("--port", "0", "--model", model_path(A_MODEL), "--api-key-file", str(key),
                   env=ENV)
    browser.do("open", url=f"http://127.0.0.1:{a.console_port}/")
    browser.wait(f"{visible('#key-panel')} && document.getElementById('conn').dataset.mode"
                 " === 'locked'", timeout=20, what="the page to ask for the API key")
    browser.shot("key")
    browser.do("type", selector="#key-input", text="s3cret-console-key")
    browser.do("click", selector="#key-send")
    browser.wait("document.getElementById('conn').dataset.mode === 'live' &&"
                 f" document.getElementById('self-id').textContent === {json.dumps(a.id)} &&"
                 f" document.getElementById('key-panel').hidden", timeout=20,
                 what="the node's page once the key is given")
    assert browser.do("eval", js="sessionStorage.getItem('mesh-llm-api-key')") == \
        "s3cret-console-key"
    assert browser.do("eval", js="localStorage.length") == 0  # this tab only
    browser.wait(f"(() => {{ const r = document.querySelector('#catalog tr[data-model="
                 f"{json.dumps(A_MODEL)}] .status'); return r && r.textContent === 'ready'; }})()",
                 timeout=60, what="the model ready")
    # the chat sends the key too; the answer names this node once
    browser.do("type", selector="#chat-input", text="Once upon a time")
    browser.do("click", selector="#chat-send")
    node = browser.wait("document.getElementById('chat-meta').dataset.node", timeout=60,
                        what="the chat answer")
    assert node == a.id
    meta = browser.do("eval", js="document.getElementById('chat-meta').textContent")
    assert meta.count("(this node)") == 1, meta  # it was printed twice
    # a reload in the same tab keeps the key: straight to the node's page
    browser.do("open", url=f"http://127.0.0.1:{a.console_port}/")
    browser.wait("document.getElementById('conn').dataset.mode === 'live' &&"
                 f" document.getElementById('self-id').textContent === {json.dumps(a.id)}",
                 timeout=20, what="the page after a reload")
    assert browser.do("eval", js="document.getElementById('key-panel').hidden") is True


def test_console_idle_node_says_idle_and_join_first(start_node, browser):
    """An idle node showed a green "live" badge, no "join a mesh first" and called itself a
    worker."""
    i = start_idle(start_node)
    browser.do("open", url=f"http://127.0.0.1:{i.console_port}/")
    browser.wait(f"document.getElementById('self-id').textContent === {json.dumps(i.id)}",
                 timeout=20, what="the idle node's page")
    assert browser.do("eval", js="document.getElementById('conn').dataset.mode") == "idle"
    assert browser.do("eval", js=visible("#idle-banner")) is True
    assert "join one first" in browser.do("eval", js="document.getElementById('idle-banner')"
                                                     ".textContent")
    assert browser.do("eval", js="document.getElementById('self-role').textContent") == "idle"
    role = browser.do("eval", js="document.querySelector('#topology .node').dataset.role")
    assert role == "idle"
    assert browser.do("log") == []


def test_standby_is_shown_as_standby_not_left(start_node, browser):
    """A node that joined without a model and stands by (passive) showed as a grey "left" node
    on the seed, and `mesh-llm status` said "left" with a live RTT; its own page showed only
    itself."""
    a = start_node("--port", "0", "--model", model_path(A_MODEL), env=ENV)
    b = start_node("--port", "0", "--join", a.token, "--max-vram", "0.001", env=ENV)
    wait_for(lambda: any(p["id"] == b.id for p in a.status().get("passive", [])), timeout=60,
             what="the joiner standing by (checking in with the seed)")
    wait_for(lambda: {p["id"]: p["state"] for p in a.status()["peers"]}.get(b.id) == "standby",
             timeout=20, what="the seed to list the standby as standby")
    r = subprocess.run([os.environ.get("MESH_LLM_BIN", os.path.join(ROOT, "build", "mesh-llm")),
                        "status", "--console", str(a.console_port)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    line = [l for l in r.stdout.splitlines() if b.id[:12] in l]
    assert line and "standby" in line[0] and "left" not in line[0], r.stdout
    browser.do("open", url=f"http://127.0.0.1:{a.console_port}/")
    browser.wait(f"{node_states_js()}[{json.dumps(b.id)}] === 'standby'", timeout=20,
                 what="the standby on the seed's page")
    browser.shot("seed-standby")
    # the joiner's page draws the mesh it routes to, from its routing table
    browser.do("open", url=f"http://127.0.0.1:{b.console_port}/")
    browser.wait(f"(() => {{ const s = {node_states_js()}; return s[{json.dumps(b.id)}] ==="
                 f" 'self' && s[{json.dumps(a.id)}] === 'alive'; }})()", timeout=30,
                 what="the seed on the joiner's page")
    browser.shot("joiner")
    assert browser.do("log") == []

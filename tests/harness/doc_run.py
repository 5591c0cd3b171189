#!/usr/bin/env python3
"""Runs the runnable shell blocks of one Markdown file, in order, as a user would (the doc test,
tests/integration/test_docs.py, starts it inside a network namespace of its own).

Blocks (fence info string):
  ```sh test            run with bash -eo pipefail; must exit 0 (curl fails on an HTTP error)
  ```sh test expect=S   the same, and its output must contain S: rerun (it must be idempotent)
                        until it does, at most EXPECT_WAIT_S (for what a node does just after
                        its ready line, e.g. publish a listing)
  ```sh test-node ...   one command that starts a node: started in the background, its
                        "mesh-llm ready"/"mesh-llm idle" line awaited; words after test-node:
                          TOKEN     export $TOKEN = the ready line's token= for later blocks
                          machine2  "another machine": its own MESH_LLM_HOME and free ports
                          fresh     stop every node started so far first (a new example)
Nodes run until a "fresh" node block or the end of the file; they are stopped by process group.

usage: doc_run.py FILE.md --root REPO --work DIR --bin MESH_LLM_BINARY
Exit 0 when every block ran; 1 (with what failed) otherwise.
"""
import argparse
import ctypes
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

FENCE = re.compile(r"^(`{3,})(.*)$")
READY = re.compile(r"^mesh-llm (ready|idle) ")
LIBC = ctypes.CDLL(None, use_errno=True)


def die_with_runner():
    """In the child before exec: SIGKILL it when this runner dies (even by SIGKILL, as when the
    test's timeout ends it), so no node outlives the doc test."""
    LIBC.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


NODE_WAIT_S = 240   # ASan binaries on a busy 2-core machine start slowly
BLOCK_WAIT_S = 300
EXPECT_WAIT_S = 60


def blocks(text):
    """[(line, section, info words, code)] for every fenced block."""
    out, section, lines, i = [], 0, text.split("\n"), 0
    while i < len(lines):
        if lines[i].startswith("## "):
            section += 1
        m = FENCE.match(lines[i])
        if m:
            fence, info, start = m.group(1), m.group(2).split(), i + 1
            j = start
            while j < len(lines) and not lines[j].startswith(fence):
                j += 1
            out.append((start, section, info, "\n".join(lines[start:j]) + "\n"))
            i = j
        i += 1
    return out


class Node:
    def __init__(self, cmd, env, cwd, log):
        self.log_path = log
        self.err = open(log, "wb")
        self.p = subprocess.Popen(["bash", "-c", cmd], env=env, cwd=cwd, stdout=subprocess.PIPE,
                                  stderr=self.err, start_new_session=True,
                                  preexec_fn=die_with_runner)
        self.line = None
        self.seen = threading.Event()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        for raw in self.p.stdout:
            s = raw.decode(errors="replace").rstrip("\n")
            if self.line is None and READY.match(s):
                self.line = s
                self.seen.set()
        self.seen.set()

    def wait_ready(self):
        self.seen.wait(NODE_WAIT_S)
        return self.line

    def stop(self):
        if self.p.poll() is None:
            try:
                os.killpg(self.p.pid, signal.SIGTERM)
                self.p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.p.pid, signal.SIGKILL)
                self.p.wait(timeout=10)
            except ProcessLookupError:
                pass
        self.err.close()

    def stderr_tail(self, n=4000):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")[-n:]


class Helper:
    """A stand-in server (fake hub, Nostr relay): started once, its first stdout line parsed."""

    def __init__(self, argv, cwd, log):
        self.err = open(log, "wb")
        self.p = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=self.err,
                                  start_new_session=True, preexec_fn=die_with_runner)
        self.first = self.p.stdout.readline().decode().strip()
        threading.Thread(target=self.p.stdout.read, daemon=True).start()
        if not self.first:
            raise SystemExit(f"doc_run: {argv[1]} did not start (see {log})")

    def stop(self):
        if self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGKILL)
            self.p.wait(timeout=10)
        self.err.close()


def setup(root, work, mesh_bin, models):
    """The user's world: a fresh HOME, mesh-llm and a failing-on-HTTP-error curl on PATH, the
    hub and relay stand-ins (nothing leaves the namespace)."""
    home = os.path.join(work, "home")
    bindir = os.path.join(work, "bin")
    os.makedirs(home)
    os.makedirs(bindir)
    os.symlink(mesh_bin, os.path.join(bindir, "mesh-llm"))
    curl = shutil.which("curl")
    with open(os.path.join(bindir, "curl"), "w") as f:
        f.write(f'#!/bin/sh\nexec {curl} --fail-with-body --silent --show-error "$@"\n')
    os.chmod(os.path.join(bindir, "curl"), 0o755)
    # the hub stand-in: the documented hf:// reference, holding a small real model
    repo = os.path.join(work, "hub", "Qwen", "Qwen2.5-0.5B-Instruct-GGUF")
    os.makedirs(repo)
    shutil.copy(os.path.join(models, "stories260K.gguf"),
                os.path.join(repo, "qwen2.5-0.5b-instruct-q4_k_m.gguf"))
    # the catalog's vision model (docs/guide.md "Vision models"): the same small model and the
    # vision tests' projector for it (scripts/vision-model.sh, made once into the cache)
    cache = os.environ.get("MESH_LLM_CACHE") or os.path.expanduser("~/.cache/mesh-llm")
    synth = os.path.join(os.path.dirname(os.path.abspath(mesh_bin)), "mesh-gguf-synth")
    proj = subprocess.run(["sh", os.path.join(root, "scripts", "vision-model.sh"), synth,
                           os.path.join(cache, "vision")], capture_output=True, text=True)
    if proj.returncode == 0:
        vis = os.path.join(work, "hub", "ggml-org", "SmolVLM-256M-Instruct-GGUF")
        os.makedirs(vis)
        shutil.copy(os.path.join(models, "stories260K.gguf"),
                    os.path.join(vis, "SmolVLM-256M-Instruct-Q8_0.gguf"))
        shutil.copy(proj.stdout.strip(), os.path.join(vis, "mmproj-SmolVLM-256M-Instruct-Q8_0.gguf"))
    helpers = []
    hub = Helper([sys.executable, os.path.join(root, "tests", "tools", "hub_server.py"),
                  "--root", os.path.join(work, "hub")], root, os.path.join(work, "hub.log"))
    helpers.append(hub)
    hub_port = dict(kv.split("=") for kv in hub.first.split())["hub"]
    # no MESH_LLM_* at all (not even MESH_LLM_BIN_DIR): the binary finds its llama.cpp by itself,
    # as a user's does; the relay and hub below are the only pointers, to the local stand-ins
    env = {k: v for k, v in os.environ.items() if not k.startswith("MESH_LLM_")}
    env.pop("HF_TOKEN", None)
    # the coding agents (docs/agents.md), as a user's `npm i -g` would put them on PATH, and
    # the stand-in for a model agents can use (scripts/agent-model.sh, made once into the cache)
    agents_bin = os.path.join(root, "tests", "agents", "node_modules", ".bin")
    path = bindir + os.pathsep + env.get("PATH", "/usr/bin:/bin")
    if os.path.isdir(agents_bin):
        path += os.pathsep + agents_bin
    made = subprocess.run(["sh", os.path.join(root, "scripts", "agent-model.sh"), synth,
                           os.path.join(cache, "agents")], capture_output=True, text=True,
                          env=dict(env, MESH_LLM_TEST_MODELS=models))
    if made.returncode == 0:
        os.makedirs(os.path.join(home, "models"))
        os.symlink(made.stdout.strip(), os.path.join(home, "models", "agent-tools-32k.gguf"))
    env.update(HOME=home, PATH=path, HF_ENDPOINT=f"http://127.0.0.1:{hub_port}")
    # one compute thread per llama-server child, as the other integration tests (harness/node.py)
    env.setdefault("LLAMA_ARG_THREADS", "1")
    env["MESH_LLM_PORTMAP"] = "0"  # nothing to this machine's router (the network rule)
    js = os.path.join(root, "tests", "js")
    relay = Helper(["node", os.path.join(js, "relay.mjs")], js, os.path.join(work, "relay.log"))
    helpers.append(relay)
    port = dict(kv.split("=", 1) for kv in relay.first.split()[2:])["port"]
    env["MESH_LLM_NOSTR_RELAYS"] = f"ws://127.0.0.1:{port}"
    return env, helpers


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--root", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--models", required=True)
    a = ap.parse_args()
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    env, helpers = setup(a.root, a.work, a.bin, a.models)
    nodes, failed, n_node = [], None, 0
    with open(a.file) as f:
        items = [b for b in blocks(f.read()) if b[2][:1] == ["sh"] and len(b[2]) > 1
                 and b[2][1] in ("test", "test-node")]
    try:
        for line, _, info, code in items:
            where = f"{os.path.basename(a.file)}:{line}"
            if info[1] == "test-node" and "fresh" in info[2:]:
                for n in nodes:
                    n.stop()
                nodes = []
            print(f"== {where} ({' '.join(info[1:])})\n{code}", flush=True)
            if info[1] == "test":
                expect = [w[7:] for w in info[2:] if w.startswith("expect=")]
                deadline = time.monotonic() + EXPECT_WAIT_S
                while True:
                    try:
                        r = subprocess.run(["bash", "-eo", "pipefail", "-c", code], env=env,
                                           cwd=a.root, capture_output=True, text=True,
                                           timeout=BLOCK_WAIT_S)
                    except subprocess.TimeoutExpired:
                        failed = f"{where}: did not finish within {BLOCK_WAIT_S} s"
                        break
                    out = r.stdout + r.stderr
                    if r.returncode != 0 or all(e in out for e in expect) \
                            or time.monotonic() > deadline:
                        break
                    time.sleep(0.5)
                if failed:
                    break
                print(r.stdout[-3000:], r.stderr[-3000:], flush=True)
                if r.returncode != 0:
                    failed = f"{where}: exit {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
                    break
                missing = [e for e in expect if e not in out]
                if missing:
                    failed = f"{where}: output lacks {missing} after {EXPECT_WAIT_S} s"
                    break
                continue
            n_node += 1
            nenv, cmd = dict(env), code.rstrip("\n")
            if "machine2" in info[2:]:
                nenv["MESH_LLM_HOME"] = os.path.join(a.work, f"machine2-{n_node}")
                cmd += " --port 0 --console 0"
            node = Node(cmd, nenv, a.root, os.path.join(a.work, f"node{n_node}.log"))
            nodes.append(node)
            ready = node.wait_ready()
            if not ready:
                failed = (f"{where}: no ready line within {NODE_WAIT_S} s "
                          f"(exit {node.p.poll()})\n{node.stderr_tail()}")
                break
            print(ready, flush=True)
            if "TOKEN" in info[2:]:
                m = re.search(r" token=(\S+)", ready)
                if not m:
                    failed = f"{where}: TOKEN asked for, but the ready line has none: {ready}"
                    break
                env["TOKEN"] = m.group(1)
    finally:
        for n in nodes:
            n.stop()
        for h in helpers:
            h.stop()
    if not failed:  # a sanitizer build's reports (make asan) fail the run (harness/fixtures.py)
        for i in range(1, n_node + 1):
            with open(os.path.join(a.work, f"node{i}.log"), "rb") as f:
                err = f.read().decode(errors="replace")
            for marker in ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:"):
                if marker in err:
                    k = err.index(marker)
                    failed = f"node {i}: sanitizer report\n{err[max(0, k - 200):k + 3000]}"
    if failed:
        print(f"DOC TEST FAILED at {failed}", flush=True)
        return 1
    print(f"doc_run: {len(items)} runnable blocks of {a.file} passed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

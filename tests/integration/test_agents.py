"""The coding-agent launchers (issue 32): mesh-llm claude|codex|opencode|pi.

With stand-in agents (a script on PATH that records its argv and environment): each launcher
finds the node through its console, picks a model, passes the user's arguments through, and
hands over the base URL, the model and the node's key (from $MESH_LLM_API_KEY, never on argv
nor in a file); the errors a user meets (no node, an unknown --model, the agent not installed).

With the real clients (tests/agents, pinned; scripts/deps.sh test installs them): each runs
non-interactively through its launcher against a node serving a synthesized model with a 32k
context and a chat template that takes tools (scripts/agent-model.sh; the agents' first requests
are 7,000-10,000 tokens), in a network namespace whose only link is a veth to the node's host
(nothing leaves the machine), with HOME and XDG_* in the test's directory: it exits 0 with the
model's reply, the node's metrics and request log show the requests it made, no request reached
a path the node lacks, and the real user's agent settings are untouched.
"""
import json
import os
import re
import signal
import socket
import stat
import subprocess

import pytest

from harness.node import (BIN_DIR, MESH_BIN, ROOT, http, made_model, model_path, pid_alive,
                          wait_for)

AGENTS_BIN = os.path.join(ROOT, "tests", "agents", "node_modules", ".bin")
KEY = "agent-test-key-5b1e0c"
AUTH = {"Authorization": f"Bearer {KEY}"}
REPLY = "Hello from the mesh"  # what the synthesized model answers (scripts/agent-model.sh)
PKG = {"claude": "@anthropic-ai/claude-code", "codex": "@openai/codex",
       "opencode": "opencode-ai", "pi": "@mariozechner/pi-coding-agent"}
# the arguments of a non-interactive run, and the API endpoint (metrics label) it uses
RUNS = {
    "claude": (["-p", "Say hello"], "messages"),
    "codex": (["exec", "--skip-git-repo-check", "Say hello"], "responses"),
    "opencode": (["run", "Say hello"], "chat"),
    "pi": (["-p", "Say hello"], "chat"),
}
# where each agent keeps its settings by default: none may change
USER_PLACES = [".claude", ".claude.json", ".codex", ".config/opencode", ".local/share/opencode",
               ".local/state/opencode", ".cache/opencode", ".pi"]

FAKE = """#!/usr/bin/python3
import json, os, sys, time, urllib.request
got = {"argv": sys.argv, "env": dict(os.environ), "pid": os.getpid()}
if os.environ.get("FAKE_AGENT_FETCH"):  # what the node answers while the agent runs
    key = os.environ.get("MESH_AGENT_API_KEY") or os.environ.get("ANTHROPIC_AUTH_TOKEN")
    req = urllib.request.Request(os.environ["FAKE_AGENT_FETCH"],
                                 headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(req, timeout=30) as r:
        got["fetched"] = {"status": r.status, "body": json.loads(r.read())}
with open(os.environ["FAKE_AGENT_OUT"] + ".tmp", "w") as f:
    json.dump(got, f)
os.rename(os.environ["FAKE_AGENT_OUT"] + ".tmp", os.environ["FAKE_AGENT_OUT"])
if os.environ.get("FAKE_AGENT_SLEEP"):
    time.sleep(float(os.environ["FAKE_AGENT_SLEEP"]))
"""


def user_env(tmp_path, path):
    """A user's environment inside the test's directory: HOME, XDG_*, TMPDIR; the node's key
    in $MESH_LLM_API_KEY; no key of another provider."""
    home = tmp_path / "user"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MESH_LLM_", "ANTHROPIC_", "OPENAI_", "CODEX_", "OPENCODE_",
                                "PI_", "XDG_", "CLAUDE_"))}
    for d in ("config", "data", "state", "cache", "tmp"):
        (home / f".{d}").mkdir(parents=True, exist_ok=True)
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"),
               XDG_DATA_HOME=str(home / ".data"), XDG_STATE_HOME=str(home / ".state"),
               XDG_CACHE_HOME=str(home / ".cache"), TMPDIR=str(home / ".tmp"),
               PATH=path + os.pathsep + "/usr/bin:/bin", MESH_LLM_API_KEY=KEY,
               MESH_LLM_NOSTR_RELAYS="none")
    return env, home


def launch(agent, args, env, cwd, prefix=(), timeout=60):
    return subprocess.run([*prefix, MESH_BIN, agent, *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=timeout, stdin=subprocess.DEVNULL)


@pytest.fixture
def fake_agents(tmp_path):
    d = tmp_path / "fakebin"
    d.mkdir()
    for name in PKG:
        p = d / name
        p.write_text(FAKE)
        p.chmod(0o755)
    return str(d)


@pytest.mark.parametrize("agent", list(PKG))
def test_launcher_hands_the_agent_the_mesh(agent, start_node, tmp_path, fake_agents):
    node = start_node("--model", model_path("stories260K"), "--port", "0",
                      env={"MESH_LLM_API_KEY": KEY})
    env, home = user_env(tmp_path, fake_agents)
    out = tmp_path / "fake.json"
    env["FAKE_AGENT_OUT"] = str(out)
    user_args = ["--flag", "two words", "--", "-x"]
    r = launch(agent, ["--console", str(node.console_port), *user_args], env, str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "model stories260K" in r.stderr and f"127.0.0.1:{node.api_port}" in r.stderr
    got = json.loads(out.read_text())
    argv, e = got["argv"], got["env"]
    assert os.path.basename(argv[0]) == agent
    assert argv[-len(user_args):] == user_args, argv  # passed through, in order, last
    assert not any(KEY in a for a in argv), "the key is on the agent's argv"
    base = f"http://127.0.0.1:{node.api_port}"
    cfg_dir = home / ".mesh-llm" / "agents" / agent
    assert cfg_dir.is_dir() and stat.S_IMODE(cfg_dir.stat().st_mode) == 0o700
    if agent == "claude":
        assert e["ANTHROPIC_BASE_URL"] == base and e["ANTHROPIC_AUTH_TOKEN"] == KEY
        assert e["ANTHROPIC_MODEL"] == e["ANTHROPIC_SMALL_FAST_MODEL"] == "stories260K"
        assert e["CLAUDE_CONFIG_DIR"] == str(cfg_dir)
        assert e["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
        assert "ANTHROPIC_API_KEY" not in e
    else:
        assert e["MESH_AGENT_API_KEY"] == KEY
    if agent == "codex":
        overrides = [argv[i + 1] for i, a in enumerate(argv[:-len(user_args)]) if a == "-c"]
        assert f'model_providers.mesh.base_url="{base}/v1"' in overrides
        assert 'model_provider="mesh"' in overrides and 'model="stories260K"' in overrides
        assert 'model_providers.mesh.env_key="MESH_AGENT_API_KEY"' in overrides
        assert e["CODEX_HOME"] == str(cfg_dir)
    if agent == "opencode":
        c = json.loads(e["OPENCODE_CONFIG_CONTENT"])
        assert c["model"] == "mesh/stories260K"
        assert c["provider"]["mesh"]["options"]["baseURL"] == f"{base}/v1"
        assert KEY not in e["OPENCODE_CONFIG_CONTENT"]
        assert e["OPENCODE_CONFIG_DIR"] == str(cfg_dir)
    if agent == "pi":
        assert argv[1:5] == ["--provider", "mesh", "--model", "stories260K"]
        mj = cfg_dir / "models.json"
        assert stat.S_IMODE(mj.stat().st_mode) == 0o600
        prov = json.loads(mj.read_text())["providers"]["mesh"]
        assert prov["baseUrl"] == f"{base}/v1" and prov["apiKey"] == "MESH_AGENT_API_KEY"
        assert KEY not in mj.read_text()
        assert e["PI_CODING_AGENT_DIR"] == str(cfg_dir) and e["PI_OFFLINE"] == "1"

    # --model: an unknown name is refused with the list; a known one wins
    r = launch(agent, ["--console", str(node.console_port), "--model", "nope"], env,
               str(tmp_path))
    assert r.returncode == 1 and "no model 'nope'" in r.stderr and "stories260K" in r.stderr
    # --api names the API directly
    r = launch(agent, ["--api", base, "--model", "stories260K", "x"], env, str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert json.loads(out.read_text())["argv"][-1] == "x"
    r = launch(agent, ["--port", str(node.api_port), "y"], env, str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert json.loads(out.read_text())["argv"][-1] == "y"


def test_launcher_errors(start_node, tmp_path, fake_agents):
    env, _ = user_env(tmp_path, str(tmp_path / "empty"))
    # no node: what to run instead
    free = start_node("--model", model_path("stories260K"), "--port", "0")
    dead_console = free.console_port
    free.cleanup()
    r = launch("claude", ["--console", str(dead_console), "-p", "hi"], env, str(tmp_path))
    assert r.returncode == 1 and "mesh-llm claude --model" in r.stderr, r.stderr
    # a node, but the agent is not installed: how to install it
    node = start_node("--model", model_path("stories260K"), "--port", "0")
    for agent, pkg in PKG.items():
        r = launch(agent, ["--console", str(node.console_port)], env, str(tmp_path))
        assert r.returncode == 127 and f"npm i -g {pkg}" in r.stderr, r.stderr
    r = subprocess.run([MESH_BIN, "help", "claude"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("Usage: mesh-llm claude ")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def started_pid(stderr):
    m = re.search(r"no node runs here: started one \(pid (\d+)\)", stderr)
    assert m, f"the launcher did not say it started a node:\n{stderr}"
    return int(m.group(1))


def session_env(tmp_path, fake_agents):
    """A user's environment in which the launcher's node finds llama.cpp and runs its children
    on one thread (as the harness's nodes do), on ports of the test's own."""
    env, home = user_env(tmp_path, fake_agents)
    if BIN_DIR:
        env["MESH_LLM_BIN_DIR"] = BIN_DIR
    env["LLAMA_ARG_THREADS"] = "1"
    env["FAKE_AGENT_OUT"] = str(tmp_path / "fake.json")
    api, console = free_port(), free_port()
    env["FAKE_AGENT_FETCH"] = f"http://127.0.0.1:{api}/v1/models"
    return env, home, ["--port", str(api), "--console", str(console)]


def test_launcher_starts_a_node_for_the_session(tmp_path, fake_agents):
    """No node runs: --model FILE starts one (its output shown while it loads), the agent runs
    against it, and the node stops when the agent exits; --keep-node leaves it running."""
    env, home, ports = session_env(tmp_path, fake_agents)
    r = launch("pi", [*ports, "--model", model_path("stories260K"), "--", "-p", "hi"], env,
               str(tmp_path), timeout=180)
    assert r.returncode == 0, r.stderr
    pid = started_pid(r.stderr)
    assert "  node | " in r.stderr and "model stories260K" in r.stderr, r.stderr
    got = json.loads((tmp_path / "fake.json").read_text())
    assert got["argv"][1:5] == ["--provider", "mesh", "--model", "stories260K"], got["argv"]
    assert got["argv"][-2:] == ["-p", "hi"]
    # while the agent ran, the node it was given served the model
    assert got["fetched"]["status"] == 200
    rows = {m["id"]: m["status"] for m in got["fetched"]["body"]["data"]}
    assert rows.get("stories260K") == "ready", rows
    # the launcher returned after the node had stopped (it reaped it)
    assert not pid_alive(pid), f"the node {pid} still runs after the agent exited"
    log = (home / ".mesh-llm" / "agents" / "node.log").read_text()
    assert "bye" in log and "Terminated received" in log, log[-2000:]
    assert stat.S_IMODE((home / ".mesh-llm" / "agents" / "node.log").stat().st_mode) == 0o600

    # --keep-node: the node outlives the agent, and says how to stop it
    r = launch("codex", [*ports, "--keep-node", "--model", model_path("stories260K"), "x"], env,
               str(tmp_path), timeout=180)
    assert r.returncode == 0, r.stderr
    pid = started_pid(r.stderr)
    try:
        assert f"kill {pid}" in r.stderr, r.stderr
        assert pid_alive(pid)
        api = int(ports[1])
        assert http(api, "GET", "/v1/models", headers=AUTH).status == 200
        # a second launch finds that node: it starts none
        r = launch("pi", [*ports, "y"], env, str(tmp_path))
        assert r.returncode == 0 and "started one" not in r.stderr, r.stderr
        assert json.loads((tmp_path / "fake.json").read_text())["argv"][-1] == "y"
    finally:
        os.kill(pid, signal.SIGTERM)
    wait_for(lambda: not pid_alive(pid), timeout=30, what="the kept node to stop")

    # neither --model nor --join: the node the config file describes
    (home / ".mesh-llm" / "config").write_text(
        f"models = ( {{ model = \"{model_path('TinyStories-656K-Q8_0')}\"; }} );\n")
    r = launch("opencode", [*ports, "run", "z"], env, str(tmp_path), timeout=180)
    assert r.returncode == 0, r.stderr
    pid = started_pid(r.stderr)
    assert "settings read from" in r.stderr and "model TinyStories-656K-Q8_0" in r.stderr
    assert json.loads((tmp_path / "fake.json").read_text())["fetched"]["status"] == 200
    assert not pid_alive(pid)
    # a model that cannot load: the node's own error, and the launcher's exit status 1
    (home / ".mesh-llm" / "config").unlink()
    r = launch("pi", [*ports, "--model", str(tmp_path / "missing.gguf")], env, str(tmp_path))
    assert r.returncode == 1, r.stderr
    assert "  node | mesh-llm: error: " in r.stderr and "before it served a model" in r.stderr


def test_launcher_joins_a_mesh_for_the_session(start_node, tmp_path, fake_agents):
    """--join TOKEN starts a client node that joins the mesh (the token never on an argv), and
    the agent gets the mesh's model through it."""
    seed = start_node("--model", model_path("stories260K"), "--port", "0",
                      env={"MESH_LLM_API_KEY": KEY})
    env, home, ports = session_env(tmp_path, fake_agents)
    tok = tmp_path / "token"
    tok.write_text(seed.token + "\n")
    tok.chmod(0o600)
    proc = subprocess.Popen([MESH_BIN, "claude", *ports, "--join", seed.token, "-p", "hi"],
                            env=env, cwd=str(tmp_path), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    pid = started_pid(err)
    assert "--client" in err and "(joining the mesh of --join)" in err, err
    got = json.loads((tmp_path / "fake.json").read_text())
    assert got["env"]["ANTHROPIC_MODEL"] == "stories260K"
    assert got["fetched"]["status"] == 200
    assert seed.token not in " ".join(got["argv"])
    assert "MESH_LLM_JOIN" not in got["env"], "the token reached the agent's environment"
    assert not pid_alive(pid)
    # --join @FILE, and a launcher killed outright: its node stops with it (SIGTERM)
    env["FAKE_AGENT_SLEEP"] = "120"
    (tmp_path / "fake.json").unlink()
    proc = subprocess.Popen([MESH_BIN, "pi", *ports, "--join", f"@{tok}"], env=env,
                            cwd=str(tmp_path), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    agent = None
    try:
        wait_for(lambda: (tmp_path / "fake.json").exists(), timeout=120,
                 what="the agent to run beside the started node")
        agent = json.loads((tmp_path / "fake.json").read_text())["pid"]
        assert json.loads((tmp_path / "fake.json").read_text())["fetched"]["status"] == 200
        proc.kill()
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
        if agent and pid_alive(agent):
            os.kill(agent, signal.SIGKILL)  # the stand-in agent, orphaned by the kill
    err = proc.stderr.read()
    pid = started_pid(err)
    wait_for(lambda: not pid_alive(pid), timeout=30,
             what="the node to stop with the launcher that started it")


@pytest.fixture(scope="module")
def agent_model():
    return made_model("agent-model.sh", "agents")


def snapshot(root):
    """(exists, mtime) of each agent's default settings place under root, recursively."""
    out = {}
    for p in USER_PLACES:
        full = os.path.join(root, p)
        if not os.path.lexists(full):
            out[p] = None
            continue
        newest = os.lstat(full).st_mtime_ns
        for d, _, files in os.walk(full):
            for f in files:
                try:
                    newest = max(newest, os.lstat(os.path.join(d, f)).st_mtime_ns)
                except OSError:
                    pass
        out[p] = newest
    return out


def endpoint_counts(node):
    r = http(node.console_port, "GET", "/metrics", headers=AUTH)
    assert r.status == 200, r
    counts = {}
    for m in re.finditer(r'^mesh_llm_requests_total\{model="[^"]*",endpoint="([^"]+)",'
                         r'code="(\d+)",route="[^"]*"\} (\S+)$', r.body.decode(), re.M):
        k = (m.group(1), m.group(2))
        counts[k] = counts.get(k, 0) + float(m.group(3))
    return counts


@pytest.mark.parametrize("agent", list(PKG))
def test_real_agent_through_the_mesh(agent, start_node, tmp_path, netns, agent_model):
    if not os.access(os.path.join(AGENTS_BIN, agent), os.X_OK):
        pytest.skip(f"{PKG[agent]} is not installed in tests/agents (scripts/deps.sh test)")
    ns, host_addr = netns
    node = start_node("--model", agent_model, "--port", "0", "--listen-all", "-v",
                      env={"MESH_LLM_API_KEY": KEY})
    env, home = user_env(tmp_path, AGENTS_BIN)
    work = tmp_path / "project"
    work.mkdir()
    real_home = os.path.expanduser("~")
    before = snapshot(real_home)
    args, endpoint = RUNS[agent]
    r = launch(agent, ["--api", f"http://{host_addr}:{node.api_port}", *args], env, str(work),
               prefix=["ip", "netns", "exec", ns], timeout=600)
    assert r.returncode == 0, f"{agent} exited {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-5000:]}"
    assert REPLY in r.stdout, f"no reply in {agent}'s output:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    counts = endpoint_counts(node)
    assert counts.get((endpoint, "200"), 0) >= 1, counts
    assert all(code == "200" for _, code in counts), counts
    st = http(node.console_port, "GET", "/api/status", headers=AUTH)
    assert st.status == 200, st
    reqs = st.json()["requests"]
    assert reqs and all(q["status"] == 200 for q in reqs), reqs
    # everything it asks for must exist (Claude Code's first HEAD / too: Ollama's 200)
    missing = re.findall(r"no endpoint at (\S+ \S+)", node.stderr())
    assert not missing, f"{agent} asked for what the node lacks: {missing}"
    assert (home / ".mesh-llm" / "agents" / agent).is_dir()
    assert snapshot(real_home) == before, "an agent wrote into the real user's settings"
    # what it wrote outside its settings directory: under the test's HOME only (by
    # construction), listed for the record (opencode keeps its sessions in its data directory)
    wrote = sorted(os.path.relpath(os.path.join(d, f), home) for d, _, fs in os.walk(home)
                   for f in fs if not os.path.join(d, f).startswith(str(home / ".mesh-llm")))
    print(f"{agent}: {sum(counts.values()):.0f} request(s) {sorted(counts)}; wrote outside its "
          f"settings: {sorted({'/'.join(w.split('/')[:3]) for w in wrote})}")

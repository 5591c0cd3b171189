"""Running from anywhere and installing (docs/install.md): the binary finds its pinned llama.cpp
by itself (no MESH_LLM_BIN_DIR, no --bin-dir, a clean environment, another working directory);
make install / uninstall into a temporary prefix; the systemd user unit (systemd-analyze verify);
mesh-llm service; one node per MESH_LLM_HOME; nothing logged after a fatal start-up error."""
import os
import shutil
import socket
import subprocess

import pytest

from harness.node import BIN_DIR, MESH_BIN, ROOT, Node, model_path, pid_alive, wait_for
from harness.idle import wait_idle

MODEL = "stories260K"
BUILD = os.path.dirname(os.path.abspath(MESH_BIN))  # build/ or build-asan/: make install's BUILD


def clean_env(home):
    """What `env -i HOME=home PATH=/usr/bin:/bin` gives, plus no public Nostr relays and no
    port mapping (nothing leaves the machine) and one llama.cpp thread (harness.node.Node's reasons). home exists."""
    os.makedirs(home, exist_ok=True)
    return {"HOME": str(home), "PATH": "/usr/bin:/bin", "MESH_LLM_NOSTR_RELAYS": "none",
            "MESH_LLM_PORTMAP": "0", "LLAMA_ARG_THREADS": "1"}


def home_env(home):
    """clean_env with make's MESH_LLM_BIN_DIR (when the harness has one): for the tests of
    something else than finding llama.cpp."""
    return dict(clean_env(home), **({"MESH_LLM_BIN_DIR": BIN_DIR} if BIN_DIR else {}))


def start(start_node, tmp_path, name, args, env, binary=None, wait_ready=True):
    """A node (the start_node fixture: cleaned up, its stderr checked for sanitizer reports) with
    exactly env, run from a directory that is not the source tree."""
    elsewhere = tmp_path / (name + "-cwd")
    elsewhere.mkdir()
    return start_node(*args, clean_env=env, binary=binary, cwd=str(elsewhere),
                      wait_ready=wait_ready, ready_timeout=120)


def chat(n):
    r = n.request("POST", "/v1/chat/completions",
                  {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}],
                   "max_tokens": 8})
    assert r.status == 200, r
    assert r.json()["choices"][0]["message"]["content"], r
    return r


def run(args, env=None, cwd=None, timeout=300):
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)


def test_runs_from_anywhere_with_a_clean_environment(start_node, tmp_path):
    """--model, idle mode and --join all start with no MESH_LLM_BIN_DIR and PATH=/usr/bin:/bin
    (the bug: the binary looked for llama.cpp in a cache directory the build no longer used)."""
    a = start(start_node, tmp_path, "a", ["--model", model_path(MODEL), "--port", "0"],
              clean_env(tmp_path / "home-a"))
    chat(a)
    server = next(iter(a.llama_children().values()))[0]
    assert not server.startswith("/usr/"), server  # the pinned build, not something on PATH
    idle = start(start_node, tmp_path, "idle", ["--port", "0"], clean_env(tmp_path / "home-i"),
                 wait_ready=False)
    wait_idle(idle, timeout=60)
    b = start(start_node, tmp_path, "b", ["--port", "0", "--bind-port", "0", "--join", a.token],
              clean_env(tmp_path / "home-b"))
    assert b.token != a.token
    wait_for(lambda: b.complete(MODEL).status == 200, timeout=60, what="B serving through A")


def test_plain_make_builds_llama_cpp_too():
    """`make` (target all) builds everything a node needs: mesh-llm and the pinned llama.cpp
    (the bug: it built mesh-llm only, and the "not found" advice said to run make)."""
    dry = run(["make", "--no-print-directory", "-n", "-C", ROOT, f"BUILD={BUILD}"], timeout=120)
    assert dry.returncode == 0 and "scripts/llama.sh" in dry.stdout, dry.stdout + dry.stderr
    make("all")
    with open(os.path.join(BUILD, "llama-bin-dir")) as f:
        assert os.access(os.path.join(f.read().strip(), "llama-server"), os.X_OK)


def installed_files(root):
    return sorted(os.path.relpath(os.path.join(d, f), root)
                  for d, _, fs in os.walk(root) for f in fs)


def make(target, **vars):
    args = ["make", "--no-print-directory", "-C", ROOT, target, f"BUILD={BUILD}"]
    args += [f"{k}={v}" for k, v in vars.items()]
    p = run(args, timeout=1200)
    assert p.returncode == 0, p.stdout + p.stderr
    return p


def verify_unit(path, manpath=None):
    """systemd-analyze verify: exit 0 and no complaint about the unit (it runs `man` for the
    unit's Documentation=man:mesh-llm(1): manpath is where the installed page is)."""
    assert shutil.which("systemd-analyze"), "no systemd-analyze: scripts/deps.sh test installs systemd"
    env = dict(os.environ, MANPATH=str(manpath)) if manpath else None
    p = run(["systemd-analyze", "verify", str(path)], env=env, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "mesh-llm.service" not in p.stdout + p.stderr, p.stdout + p.stderr


def test_make_install_serves_from_a_moved_prefix_and_uninstall_leaves_nothing(start_node, tmp_path):
    prefix = tmp_path / "prefix"
    make("install", PREFIX=prefix)
    files = installed_files(prefix)
    assert files == ["bin/mesh-llm", "lib/systemd/user/mesh-llm.service",
                     "libexec/mesh-llm/cpu/FLAVOUR", "libexec/mesh-llm/cpu/ggml-rpc-server",
                     "libexec/mesh-llm/cpu/llama-server", "share/man/man1/mesh-llm.1"], files
    assert (prefix / "libexec/mesh-llm/cpu/FLAVOUR").read_text().strip() == "cpu"
    unit = (prefix / "lib/systemd/user/mesh-llm.service").read_text()
    assert f"ExecStart={prefix}/bin/mesh-llm " in unit, unit
    assert "Documentation=man:mesh-llm(1)" in unit, unit
    verify_unit(prefix / "lib/systemd/user/mesh-llm.service", manpath=prefix / "share/man")
    man = run(["man", "-l", "-Tutf8", "--warnings", str(prefix / "share/man/man1/mesh-llm.1")],
              timeout=60)
    assert man.returncode == 0 and "--bin-dir" in man.stdout, man.stdout + man.stderr

    # the installed binary uses the installed llama.cpp, found relative to itself: a moved
    # prefix still works
    moved = tmp_path / "moved"
    os.rename(prefix, moved)
    n = start(start_node, tmp_path, "n", ["--model", model_path(MODEL), "--port", "0"],
              clean_env(tmp_path / "home"), binary=str(moved / "bin/mesh-llm"))
    chat(n)
    server = next(iter(n.llama_children().values()))[0]
    assert server == str(moved / "libexec/mesh-llm/cpu/llama-server"), server
    assert n.stop() == 0
    os.rename(moved, prefix)

    make("uninstall", PREFIX=prefix)
    assert installed_files(prefix) == [], installed_files(prefix)


def test_make_install_honours_destdir(tmp_path):
    stage = tmp_path / "stage"
    make("install", PREFIX="/opt/mesh", DESTDIR=stage)
    assert os.access(stage / "opt/mesh/bin/mesh-llm", os.X_OK)
    assert os.access(stage / "opt/mesh/libexec/mesh-llm/cpu/llama-server", os.X_OK)
    unit = (stage / "opt/mesh/lib/systemd/user/mesh-llm.service").read_text()
    assert "ExecStart=/opt/mesh/bin/mesh-llm " in unit, unit  # the final place, not the stage
    make("uninstall", PREFIX="/opt/mesh", DESTDIR=stage)
    assert installed_files(stage) == []


def test_service_install_status_uninstall(start_node, tmp_path):
    home = tmp_path / "home"
    env = clean_env(home)
    p = run([MESH_BIN, "service", "install"], env=env)
    assert p.returncode == 0, p.stderr
    assert "systemctl --user daemon-reload && systemctl --user enable --now mesh-llm" in p.stdout
    unit = home / ".config/systemd/user/mesh-llm.service"
    text = unit.read_text()
    conf = home / ".config/mesh-llm/config"
    assert f"ExecStart={os.path.realpath(MESH_BIN)} --config %h/.config/mesh-llm/config" in text, text
    assert (conf.stat().st_mode & 0o777) == 0o600  # it may come to hold a join token
    p = run([MESH_BIN, "config", "check", str(conf)], env=env)
    assert p.returncode == 0 and "OK" in p.stdout, p.stdout + p.stderr
    verify_unit(unit)

    p = run([MESH_BIN, "service", "status"], env=env)
    assert p.returncode == 0 and f"{unit} (installed)" in p.stdout, p.stdout + p.stderr
    assert "node: none running" in p.stdout, p.stdout
    # what the unit's ExecStart runs: the written (all-comments) config starts an idle node
    n = start(start_node, tmp_path, "n", ["--config", str(conf), "--port", "0"], env,
              wait_ready=False)
    wait_idle(n, timeout=60)
    p = run([MESH_BIN, "service", "status"], env=env)
    assert f"node: running, pid {n.pid}," in p.stdout, p.stdout + p.stderr

    p = run([MESH_BIN, "service", "uninstall"], env=env)
    assert p.returncode == 0 and not unit.exists(), p.stdout + p.stderr
    p = run([MESH_BIN, "service", "bogus"], env=env)
    assert p.returncode == 2 and "usage" in p.stderr, p.stderr


def test_second_node_on_the_same_home_is_refused(start_node, tmp_path):
    """The bug: a second node on ~/.mesh-llm started with the first's node id."""
    env = home_env(tmp_path / "home")
    a = start(start_node, tmp_path, "a", ["--port", "0"], env, wait_ready=False)
    wait_idle(a, timeout=60)
    p = run([MESH_BIN, "--port", "0", "--console", "0"], env=env, timeout=60)
    home = tmp_path / "home" / ".mesh-llm"
    assert p.returncode == 1, p.stderr
    assert f"(pid {a.pid}) is already running with the state directory {home}" in p.stderr
    assert f"MESH_LLM_HOME={home}-2 mesh-llm --port 0 --console 0 --bind-port 0" in p.stderr
    assert "starting" not in p.stderr, p.stderr  # refused before anything else
    assert pid_alive(a.pid)
    # commands that only read are not refused
    for cmd in (["status", "--console", str(a.console_port)], ["models", "list"],
                ["service", "status"]):
        p = run([MESH_BIN, *cmd], env=env, timeout=60)
        assert p.returncode == 0, (cmd, p.stdout + p.stderr)
    # the lock goes with the process: a restart on the same home starts
    assert a.stop() == 0
    again = start(start_node, tmp_path, "again", ["--port", "0"], env, wait_ready=False)
    wait_idle(again, timeout=60)
    assert again.id == a.id  # the same home, the same node


def test_second_local_node_with_its_own_home_joins(start_node, tmp_path):
    """docs/install.md's recipe: MESH_LLM_HOME=<other dir> and free ports."""
    env = home_env(tmp_path / "home")
    a = start(start_node, tmp_path, "a", ["--model", model_path(MODEL), "--port", "0"], env)
    b = start(start_node, tmp_path, "b", ["--port", "0", "--console", "0", "--bind-port", "0",
                                     "--join", a.token],
              dict(env, MESH_LLM_HOME=str(tmp_path / "home" / ".mesh-llm-2")))
    assert b.id != a.id
    wait_for(lambda: b.complete(MODEL).status == 200, timeout=60, what="B serving through A")


@pytest.mark.parametrize("flag,what", [("--port", "port"), ("--console", "console port")])
def test_fatal_startup_error_is_the_last_line(tmp_path, flag, what):
    """The bug: 'INFO speed: compute speed ...' followed 'port N is already in use'."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        ports = {"--port": "0", "--console": "0", flag: str(port)}
        args = [a for kv in ports.items() for a in kv]
        p = run([MESH_BIN, "--model", model_path(MODEL), *args], env=home_env(tmp_path),
                timeout=120)
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    assert p.returncode == 1, p.stderr
    assert f"{what} {port} is already in use" in lines[-1], p.stderr
    assert not any("speed" in l for l in lines), p.stderr

"""Doc tests: the commands README.md and docs/*.md show are run, so the docs cannot rot.

Every fenced block marked ```sh test / ```sh test-node (docs/testing.md, "Doc tests") is run in
order by tests/harness/doc_run.py, inside a network namespace of its own (so the documented
default ports 9337/3131 are free and nothing leaves the machine), with a fresh HOME, the built
binary as `mesh-llm` on PATH, and local stand-ins for the hub and a Nostr relay. Any docs/*.md
added later is picked up by the glob. Also: README.md stays a guide (<= 250 lines), no shell block
shows a mesh-llm or curl command without being run, and the start-up log names the console and
API URLs next to the unchanged ready line (DESIGN.md section 4)."""
import glob
import os
import re
import subprocess
import sys

import pytest

from harness import doc_run
from harness.node import BIN_DIR, MESH_BIN, MODELS, ROOT, http

DOCS = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
SHELL = {"sh", "bash", "shell", "console"}
MARKERS = {"test", "test-node"}
COMMAND = re.compile(r"^\s*(\$ )?([A-Z_]+=\S+ )*(mesh-llm|curl)( |$)", re.M)


def runnable(path):
    with open(path) as f:
        return [b for b in doc_run.blocks(f.read()) if b[2][:2] in (["sh", "test"],
                                                                     ["sh", "test-node"])]


def run_doc(path, tmp_path, timeout=1500):
    """doc_run.py on PATH inside a new network namespace (user namespace when not root)."""
    work = tmp_path / "work"
    work.mkdir()
    ns = ["unshare", "--net"] + ([] if os.geteuid() == 0 else ["--map-root-user"])
    env = dict(os.environ)
    if BIN_DIR:
        env["MESH_LLM_BIN_DIR"] = BIN_DIR
    return subprocess.run(ns + [sys.executable, os.path.join(ROOT, "tests", "harness", "doc_run.py"),
                                path, "--root", ROOT, "--work", str(work), "--bin", MESH_BIN,
                                "--models", os.path.abspath(MODELS)],
                          capture_output=True, text=True, timeout=timeout, env=env)


def test_readme_is_a_short_guide():
    with open(os.path.join(ROOT, "README.md")) as f:
        lines = f.read().split("\n")
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; move detail to docs/"
    text = "\n".join(lines)
    for must in ("make run MODEL=", "make test", "http://127.0.0.1:3131", '"max_tokens"',
                 "MESH_LLM_HOME=", "--join $TOKEN", "docs/README.md"):
        assert must in text, must


def test_every_shown_command_is_run():
    """A shell block with a mesh-llm or curl command must be marked runnable; markers are known
    ones (a typo would silently skip a block)."""
    bad = []
    for path in DOCS:
        with open(path) as f:
            for line, _, info, code in doc_run.blocks(f.read()):
                name = f"{os.path.relpath(path, ROOT)}:{line}"
                if info[:1] == ["sh"] and len(info) > 1 and info[1] not in MARKERS:
                    bad.append(f"{name}: unknown marker {info[1]!r}")
                elif info[1:2] == ["test"] and [w for w in info[2:] if not w.startswith("expect=")]:
                    bad.append(f"{name}: unknown test option {info[2:]}")
                elif info[1:2] == ["test-node"] and set(info[2:]) - {"TOKEN", "machine2", "fresh"}:
                    bad.append(f"{name}: unknown test-node option {info[2:]}")
                elif (info[:1] == [] or info[0] in SHELL) and info[1:2] != ["test"] \
                        and info[1:2] != ["test-node"] and COMMAND.search(code):
                    bad.append(f"{name}: shows a mesh-llm/curl command but is not marked "
                               "```sh test / ```sh test-node")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("path", [p for p in DOCS if runnable(p)],
                         ids=lambda p: os.path.relpath(p, ROOT))
def test_doc_commands_run(path, tmp_path):
    r = run_doc(path, tmp_path)
    assert r.returncode == 0, f"{r.stdout[-6000:]}\n{r.stderr[-3000:]}"
    assert f"{len(runnable(path))} runnable blocks" in r.stdout


def test_doc_test_fails_when_a_command_fails(tmp_path):
    """The harness is not a rubber stamp: a failing command, an HTTP error from curl and a node
    that exits before its ready line each fail the run."""
    cases = {
        "bad_flag": "```sh test\nmesh-llm --no-such-option\n```\n",
        "http_404": "```sh test-node\nmesh-llm --model ../shared/models/stories260K.gguf\n```\n"
                    "```sh test\ncurl localhost:9337/v1/no-such-endpoint\n```\n",
        "node_dies": "```sh test-node\nmesh-llm --model /nonexistent/x.gguf\n```\n",
    }
    for name, text in cases.items():
        doc = tmp_path / f"{name}.md"
        doc.write_text("## case\n\n" + text)
        sub = tmp_path / name
        sub.mkdir()
        r = run_doc(str(doc), sub, timeout=600)
        assert r.returncode == 1 and "DOC TEST FAILED" in r.stdout, (name, r.stdout[-3000:])


def test_startup_output_names_console_and_api(start_node):
    """Start-up log: "open http://127.0.0.1:<console>" and the API base URL; the ready line
    stays exactly DESIGN.md section 4's."""
    n = start_node("--model", os.path.join(MODELS, "stories260K.gguf"), "--port", "0")
    st = n.status()["node"]
    api, console = st["api_port"], st["console_port"]
    err = n.stderr()
    assert f"open http://127.0.0.1:{console}" in err, err[-3000:]
    assert f"http://127.0.0.1:{api}/v1" in err, err[-3000:]
    ready = [s for s in n.stdout_lines if s.startswith("mesh-llm ready ")]
    assert len(ready) == 1 and re.fullmatch(
        r"mesh-llm ready api=%d console=%d quic=\d+ id=[0-9a-f]{64} token=[A-Za-z0-9_-]+"
        % (api, console), ready[0]), n.stdout_lines
    assert http(console, "GET", "/").status == 200


# docs other helpers of issue 26 add (install, CLI and config reference, timings): linked before
# they land; remove a name once its file is in docs/
PENDING = set()


def anchors(path):
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    out, seen = set(), {}
    with open(path) as f:
        text = re.sub(r"^(`{3,}).*?^\1", "", f.read(), flags=re.M | re.S)
    for h in re.findall(r"^#{1,6} (.+)$", text, re.M):
        a = re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
        n = seen.get(a, 0)
        seen[a] = n + 1
        out.add(a if n == 0 else f"{a}-{n}")
    return out


def test_links_between_docs_resolve():
    """Every relative link of README.md and docs/*.md names a file that exists and, with
    #anchor, a heading it has: moving text between files must not leave dead links."""
    bad = []
    for path in DOCS:
        with open(path) as f:
            text = re.sub(r"^(`{3,}).*?^\1", "", f.read(), flags=re.M | re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, frag = target.partition("#")
            full = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
            rel = os.path.relpath(full, ROOT)
            if not os.path.exists(full):
                if rel not in PENDING:
                    bad.append(f"{os.path.relpath(path, ROOT)}: {target}: no such file")
            elif frag and full.endswith(".md") and frag not in anchors(full):
                bad.append(f"{os.path.relpath(path, ROOT)}: {target}: no such heading")
    assert not bad, "\n".join(bad)

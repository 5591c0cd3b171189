"""Serving features configured on llama-server (issue 17 item 5): speculative decoding with a
draft model (--draft, --no-draft, the catalog's pairings) and its acceptance counts in
/api/v1/stats and /metrics.

A draft must share the target's vocabulary. The shared models all have different vocabularies
(512, 2048 and 32000 tokens), so the draft here is a copy of the target's file: the same
vocabulary, and a real llama-server drafting and verifying tokens (acceptance is then high but
the counts are llama-server's own)."""
import shutil

from harness.node import model_path, wait_for

S = "stories260K"
T = "TinyStories-656K-Q8_0"  # another vocabulary (2048 tokens)


def draft_args(argv):
    return argv[argv.index("--model-draft") + 1] if "--model-draft" in argv else None


def check_drafted(n, model):
    """A greedy completion through n drafts and accepts tokens; returns the stats."""
    r = n.complete(model, max_tokens=48, ignore_eos=True)
    assert r.status == 200, r
    assert r.json()["choices"][0]["text"]
    st = n.request("GET", "/api/v1/stats").json()
    assert st["model"] == model, st
    assert st["draft_tokens"] > 0 and st["draft_accepted_tokens"] > 0, st
    assert st["draft_accepted_tokens"] <= st["draft_tokens"]
    assert 0 < st["draft_acceptance_rate"] <= 1, st
    spec = st["speculative"][model]
    assert spec["draft_tokens"] >= st["draft_tokens"] and spec["accepted_tokens"] > 0, spec
    assert n.metric(f'mesh_llm_draft_tokens_total{{model="{model}"}}') == spec["draft_tokens"]
    assert n.metric(f'mesh_llm_draft_accepted_tokens_total{{model="{model}"}}') == \
        spec["accepted_tokens"]
    return st


def test_draft_flag(start_node, tmp_path):
    draft = tmp_path / "stories-draft.gguf"
    shutil.copyfile(model_path(S), draft)
    n = start_node("--port", "0", "--model", model_path(S), "--draft", str(draft))
    _, _, argv = n.child_for(S)
    assert draft_args(argv) == str(draft), argv
    assert "--spec-draft-n-max" in argv
    st = check_drafted(n, S)
    assert st["speculative"][S]["draft"] == str(draft)
    assert f"model {S}: speculative decoding with draft {draft}" in n.stderr()


def test_no_draft_means_no_counts(start_node):
    """The same request on a node without a draft: llama-server reports no draft counts and the
    node shows none (the counts above come from the draft, not from elsewhere)."""
    n = start_node("--port", "0", "--model", model_path(S))
    assert draft_args(n.child_for(S)[2]) is None
    r = n.complete(S, max_tokens=48, ignore_eos=True)
    assert r.status == 200, r
    st = n.request("GET", "/api/v1/stats").json()
    assert st["model"] == S and "draft_tokens" not in st and st["speculative"] == {}, st
    assert n.metric(f'mesh_llm_draft_tokens_total{{model="{S}"}}') is None


def test_catalog_pairing_and_no_draft(start_node, tmp_path):
    """A model whose file is a catalog model's file gets the catalog's draft when the draft's
    file is next to it (here both are copies of one tiny model under the catalog's file
    names); --no-draft turns it off."""
    d = tmp_path / "models"
    d.mkdir()
    target = d / "qwen2.5-1.5b-instruct-q4_k_m.gguf"
    draft = d / "qwen2.5-0.5b-instruct-q4_k_m.gguf"
    shutil.copyfile(model_path(S), target)
    shutil.copyfile(model_path(S), draft)
    name = "qwen2.5-1.5b-instruct-q4_k_m"
    n = start_node("--port", "0", "--model", str(target))
    assert draft_args(n.child_for(name)[2]) == str(draft)
    assert "(the catalog's pairing)" in n.stderr()
    check_drafted(n, name)
    n.stop()
    m = start_node("--port", "0", "--model", str(target), "--no-draft")
    assert draft_args(m.child_for(name)[2]) is None


def test_draft_refused_when_missing(start_node, tmp_path):
    import subprocess
    from harness.node import MESH_BIN
    r = subprocess.run([MESH_BIN, "--model", model_path(S), "--draft",
                        str(tmp_path / "nope.gguf")], capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and "--draft" in r.stderr and "no such file" in r.stderr, r.stderr


def test_incompatible_draft_warned(start_node):
    """A draft of another vocabulary: llama-server serves without speculation and says so in
    its log; the node shows that line as a warning (no -v needed) and reports no draft counts."""
    n = start_node("--port", "0", "--model", model_path(S), "--draft", model_path(T))
    r = n.complete(S, max_tokens=16)
    assert r.status == 200, r
    wait_for(lambda: "draft vocabs are not compatible" in n.stderr(), timeout=30,
             what="the warning about the draft's vocabulary")
    line = next(l for l in n.stderr().splitlines() if "draft vocabs are not compatible" in l)
    assert "WARN" in line and f"model {S}: llama-server:" in line, line
    st = n.request("GET", "/api/v1/stats").json()
    assert "draft_tokens" not in st, st

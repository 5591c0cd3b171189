"""Speculative decoding on a split (issue 19 item 3): the split host runs its --draft model on its
own CPU (never on the workers' rpc-servers), a worker never runs a draft, and the split's greedy
text with the draft equals a solo node's without one, with tokens drafted on the split.

The shared models have no draft/target pair with one vocabulary, so the draft is a copy of the
target's file (same vocabulary; llama-server refuses the target's own path as its draft)."""
import shutil

from harness.node import model_path, wait_for
from harness.mesh import wait_converged
from harness.split import (SMALL, SMALL_CTX, SMALL_SIZE, env_for, gb, greedy, models_dir,
                           models_status, plan_of, text)


def llama_argv(node):
    procs = [p for p in node.status()["processes"] if p["kind"] == "llama-server"]
    return procs[0]["args"] if procs else None


def test_split_host_drafts_on_its_cpu(start_node, tmp_path):
    draft = tmp_path / "stories-draft.gguf"
    shutil.copyfile(model_path(SMALL), draft)
    # the draft counts in the model's memory need (target + draft, 2 x SMALL_SIZE): neither node
    # holds both alone, together they do; it is counted on the host alone (election.h "Host
    # bytes"), so the host's memory left for layers is what the draft and the input layer leave
    vram = gb(1.3 * SMALL_SIZE)
    # both nodes are given the draft: whichever is elected host drafts, the worker must not
    a = start_node("--port", "0", "--model", model_path(SMALL), *SMALL_CTX, "--max-vram", vram,
                   "--draft", str(draft), env=env_for(tmp_path, "a"))
    b = start_node("--port", "0", "--models-dir", models_dir(tmp_path, "b", SMALL), *SMALL_CTX,
                   "--max-vram", vram, "--draft", str(draft), "--join", a.token,
                   env=env_for(tmp_path, "b"))
    wait_converged([a, b])
    for n in (a, b):
        wait_for(lambda: models_status(n).get(SMALL) == "ready", timeout=60,
                 what=f"the split model ready on {n.id[:8]}")
    host = a if plan_of(a, SMALL)["role"] == "host" else b
    worker = b if host is a else a
    assert plan_of(worker, SMALL)["role"] == "worker"
    # equal memory, yet the host keeps fewer layers than its worker (1.3 - 1 - 0.11 of the
    # model's size is left to it for layers); its ledger holds the whole draft and the input
    # layer besides, within what it offers; the worker's holds layers only
    hp, wp = plan_of(host, SMALL), plan_of(worker, SMALL)
    assert hp["host_layers"]["end"] < wp["layers"]["end"] - wp["layers"]["first"], (hp, wp)
    mem_h, mem_w = host.status()["node"]["memory"], worker.status()["node"]["memory"]
    held_h = {(h["model"], h["kind"]): h["bytes"] for h in mem_h["held"]}
    held_w = {(h["model"], h["kind"]): h["bytes"] for h in mem_w["held"]}
    embd = 64 * 512 * 4  # stories260K's token_embd (F32)
    assert SMALL_SIZE + embd <= held_h[(SMALL, "model")] <= mem_h["offered_bytes"], mem_h
    assert held_w[(SMALL, "worker")] <= mem_w["offered_bytes"], mem_w
    assert held_w[(SMALL, "worker")] < 2.2 * SMALL_SIZE - SMALL_SIZE - embd, mem_w
    # the draft's weights did not go to the worker: over the tunnel went only the worker's share
    # of the target — here nearly all of it, as the draft fills most of the host's memory — and
    # the protocol's bytes (the draft, a whole copy of the target, would add ~SMALL_SIZE)
    loaded_tx = host.status()["rpc_tunnel"]["host_tx"]
    assert 0 < loaded_tx < 1.5 * SMALL_SIZE, (loaded_tx, SMALL_SIZE)

    # the host's llama-server: the draft, over the --rpc devices of the split, kept on the CPU
    argv = llama_argv(host)
    assert argv[argv.index("--model-draft") + 1] == str(draft), argv
    assert "--rpc" in argv
    i = argv.index("--spec-draft-device")
    assert argv[i + 1] == "none" and i > argv.index("--rpc"), argv
    assert argv[argv.index("--spec-draft-ngl") + 1] == "0", argv
    # the worker runs an rpc-server and no llama-server, so no draft
    assert llama_argv(worker) is None
    rpc = [p for p in worker.status()["processes"] if p["kind"] == "rpc-server"]
    assert len(rpc) == 1 and not any("draft" in w for w in rpc[0]["args"]), rpc

    # greedy text through the drafting split, asked of either node, equals a solo node's
    # without a draft; tokens were drafted (and verified) on the split
    solo = start_node("--port", "0", "--model", model_path(SMALL), "--no-draft",
                      env=env_for(tmp_path, "s"))
    want = text(greedy(solo, SMALL, n=48))
    assert len(want) > 20
    for n in (worker, host):
        assert text(greedy(n, SMALL, n=48)) == want, n.id[:8]
    st = host.request("GET", "/api/v1/stats").json()
    assert st["model"] == SMALL and st["draft_tokens"] > 0, st
    spec = st["speculative"][SMALL]
    assert spec["draft"] == str(draft) and spec["draft_tokens"] >= st["draft_tokens"], spec
    assert host.metric(f'mesh_llm_draft_tokens_total{{model="{SMALL}"}}') == spec["draft_tokens"]
    # the worker drafted nothing itself (it forwarded to the host)
    assert worker.metric(f'mesh_llm_draft_tokens_total{{model="{SMALL}"}}') is None

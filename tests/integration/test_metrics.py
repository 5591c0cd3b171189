"""GET /metrics on the console port: checked by promtool and scraped by a real Prometheus server
(Debian's prometheus, started by the test on 127.0.0.1 with its own storage); the scraped counters
equal the requests the test sent."""
import json
import shutil
import socket
import subprocess
import urllib.parse
import urllib.request

import pytest

from harness.node import http, model_path, sse_events, wait_for

S = "stories260K"


def free_tcp_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def metrics_text(n):
    r = http(n.console_port, "GET", "/metrics")
    assert r.status == 200, r
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    return r.body.decode()


def send_workload(n):
    """Requests of known outcome; returns the expected counters and completion tokens."""
    out_tokens = 0
    for _ in range(3):
        r = n.complete(S, max_tokens=4)
        assert r.status == 200, r
        out_tokens += r.json()["usage"]["completion_tokens"]
    msg = {"model": S, "max_tokens": 5, "messages": [{"role": "user", "content": "Once"}]}
    r = n.request("POST", "/v1/messages", msg)
    assert r.status == 200, r
    out_tokens += r.json()["usage"]["output_tokens"]
    r = n.request("POST", "/v1/messages", dict(msg, stream=True))
    assert r.status == 200, r
    deltas = [json.loads(e) for e in sse_events(r.body)]
    out_tokens += [e for e in deltas if e.get("type") == "message_delta"][-1]["usage"]["output_tokens"]
    r = n.request("POST", "/tokenize", {"content": "Once upon a time"})
    assert r.status == 200, r
    r = n.complete("no-such-model")
    assert r.status == 404, r
    want = {(S, "completions", "200"): 3, (S, "messages", "200"): 2, (S, "tokenize", "200"): 1,
            ("_unknown", "completions", "404"): 1}
    return want, out_tokens


def parse_requests(text):
    got = {}
    for line in text.splitlines():
        if line.startswith("mesh_llm_requests_total{"):
            labels, v = line[len("mesh_llm_requests_total{"):].rsplit("} ", 1)
            d = dict(kv.split("=", 1) for kv in labels.split(","))
            d = {k: v.strip('"') for k, v in d.items()}
            got[(d["model"], d["endpoint"], d["code"])] = int(v)
    return got


def test_metrics_promtool_and_counts(start_node):
    n = start_node("--port", "0", "--model", model_path(S))
    want, out_tokens = send_workload(n)
    text = metrics_text(n)
    assert parse_requests(text) == want
    assert f'mesh_llm_completion_tokens_total{{model="{S}"}} {out_tokens}' in text
    assert f'mesh_llm_model_loads_total{{model="{S}",result="ok"}} 1' in text
    assert f'mesh_llm_node_info{{id="{n.id}"' in text
    assert f'mesh_llm_time_to_first_token_seconds_count{{model="{S}"}} 6' in text
    if shutil.which("promtool"):
        r = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
    # the console serves it to GET only
    assert http(n.console_port, "POST", "/metrics", {}).status == 405


@pytest.mark.skipif(not shutil.which("prometheus"), reason="needs Debian's prometheus")
def test_prometheus_scrapes_the_counters(start_node, tmp_path):
    n = start_node("--port", "0", "--model", model_path(S))
    want, out_tokens = send_workload(n)
    port = free_tcp_port()
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        "scrape_configs:\n  - job_name: mesh\n    metrics_path: /metrics\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{n.console_port}']\n")
    log = open(tmp_path / "prometheus.log", "wb")
    p = subprocess.Popen(["prometheus", f"--config.file={cfg}",
                          f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                          f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=log)
    try:
        def query(q):
            url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": q})
            try:
                with urllib.request.urlopen(url, timeout=5) as r:
                    d = json.loads(r.read())
            except OSError:
                return None
            return d["data"]["result"] if d.get("status") == "success" else None

        def scraped():
            res = query("mesh_llm_requests_total")
            if not res:
                return None
            return {(m["metric"]["model"], m["metric"]["endpoint"], m["metric"]["code"]):
                    int(float(m["value"][1])) for m in res}
        got = wait_for(scraped, timeout=60, interval=0.5, what="prometheus to scrape the node")
        assert got == want
        up = query('up{job="mesh"}')
        assert up and up[0]["value"][1] == "1"
        tok = query(f'mesh_llm_completion_tokens_total{{model="{S}"}}')
        assert tok and int(float(tok[0]["value"][1])) == out_tokens
    finally:
        p.terminate()
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        log.close()

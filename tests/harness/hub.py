"""A fake Hugging Face hub (tests/tools/hub_server.py, from test_download.py) serving the two
shared story models as org/tiny-GGUF, its CDN cut, slowed or made wrong on request."""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import urllib.request

from harness.node import MODELS, ROOT

STORIES = os.path.join(MODELS, "stories260K.gguf")
TINY = os.path.join(MODELS, "TinyStories-656K-Q8_0.gguf")
CHUNK = 256 * 1024  # the fake CDN's write size


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class Hub:
    def __init__(self, tmp_path):
        self.root = tmp_path / "hubroot"
        repo = self.root / "org" / "tiny-GGUF"
        repo.mkdir(parents=True)
        shutil.copy(STORIES, repo / "stories260K.gguf")
        shutil.copy(TINY, repo / "TinyStories-656K-Q8_0.gguf")
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(ROOT, "tests", "tools", "hub_server.py"),
             "--root", str(self.root)], stdout=subprocess.PIPE)
        line = self.proc.stdout.readline().decode()
        ports = dict(kv.split("=") for kv in line.split())
        self.url = f"http://127.0.0.1:{ports['hub']}"

    def get(self, path):
        with urllib.request.urlopen(self.url + path, timeout=10) as r:
            return json.loads(r.read() or b"{}")

    def control(self, **kw):
        self.get("/_control?" + "&".join(f"{k}={v}" for k, v in kw.items()))

    def stats(self):
        return self.get("/_stats")

    def stop(self):
        self.proc.kill()
        self.proc.wait(timeout=10)

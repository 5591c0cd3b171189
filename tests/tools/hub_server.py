#!/usr/bin/env python3
"""A fake Hugging Face hub for the download tests (python stdlib only).

Serves ROOT/ORG/REPO/FILE the way the hub does: GET /ORG/REPO/resolve/REV/FILE answers 302 to a
second port (the "CDN") with X-Linked-ETag (the file's sha256) and X-Linked-Size; the CDN serves
the bytes with Content-Length, ETag and Range support. GET /api/models/ORG/REPO lists the files
(siblings[].rfilename). Prints "hub=PORT cdn=PORT" on stdout once listening (127.0.0.1, port 0).

Faults, set with GET /_control?KEY=VALUE on the hub port (or flags):
  cut=N       the next CDN response is cut after N body bytes (once)
  wrong=1     the CDN serves wrong bytes (the announced sha256 stays the real one)
  trickle=BPS the CDN sends at most BPS bytes per second (0: off)
  token=T     the hub answers 401 unless "Authorization: Bearer T"
  norange=1   the CDN ignores Range requests (answers 200 with the whole file)
GET /_stats: {"cdn_bytes": body bytes the CDN sent, "cdn_auth": Authorization headers the CDN saw,
"requests": [[port, method, path, range]...]}.
"""
import argparse
import hashlib
import json
import os
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STATE = {"cut": 0, "wrong": 0, "trickle": 0, "norange": 0, "token": "", "cdn_bytes": 0, "cdn_auth": [],
         "requests": []}
LOCK = threading.Lock()
SHA = {}
ROOT = "."
PORTS = {}


def sha_of(path):
    st = os.stat(path)
    key = (path, st.st_size, st.st_mtime)
    if key not in SHA:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        SHA[key] = h.hexdigest()
    return SHA[key]


def safe_path(rel):
    full = os.path.realpath(os.path.join(ROOT, rel))
    root = os.path.realpath(ROOT)
    if not full.startswith(root + os.sep) or not os.path.isfile(full):
        return None
    return full


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def send_plain(self, code, body, extra=None):
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json" if body.startswith("{") else "text/plain")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        port = self.server.server_address[1]
        with LOCK:
            STATE["requests"].append([port, self.command, self.path, self.headers.get("Range", "")])
        if port == PORTS["cdn"]:
            return self.cdn()
        u = urllib.parse.urlsplit(self.path)
        parts = u.path.lstrip("/").split("/")
        if u.path == "/_control":
            with LOCK:
                for k, v in urllib.parse.parse_qsl(u.query, keep_blank_values=True):
                    STATE[k] = v if k == "token" else int(v)
            return self.send_plain(200, "{}")
        if u.path == "/_stats":
            with LOCK:
                return self.send_plain(200, json.dumps({k: STATE[k] for k in
                                                        ("cdn_bytes", "cdn_auth", "requests")}))
        if STATE["token"] and self.headers.get("Authorization") != "Bearer " + STATE["token"]:
            return self.send_plain(401, '{"error":"Invalid credentials in Authorization header"}')
        if len(parts) >= 4 and parts[:2] == ["api", "models"]:
            repo = "/".join(parts[2:4])
            d = os.path.join(ROOT, repo)
            if not os.path.isdir(d):
                return self.send_plain(404, '{"error":"Repository not found"}')
            files = []
            for dp, _, fns in os.walk(d):
                for fn in fns:
                    files.append(os.path.relpath(os.path.join(dp, fn), d))
            return self.send_plain(200, json.dumps({"id": repo, "siblings": [
                {"rfilename": f} for f in sorted(files)]}))
        if len(parts) >= 5 and parts[2] == "resolve":
            rel = "/".join(parts[:2] + parts[4:])
            full = safe_path(urllib.parse.unquote(rel))
            if not full:
                return self.send_plain(404, "Entry not found", {"X-Error-Code": "EntryNotFound"})
            sha = sha_of(full)
            loc = f"http://127.0.0.1:{PORTS['cdn']}/cdn/{rel}?X-Amz-Signature=fake"
            return self.send_plain(302, "Found", {"Location": loc, "X-Linked-ETag": f'"{sha}"',
                                                  "X-Linked-Size": str(os.path.getsize(full)),
                                                  "ETag": 'W/"41-abc"'})
        return self.send_plain(404, "Not Found")

    def cdn(self):
        u = urllib.parse.urlsplit(self.path)
        if self.headers.get("Authorization"):
            with LOCK:
                STATE["cdn_auth"].append(self.headers.get("Authorization"))
        if not u.path.startswith("/cdn/"):
            return self.send_plain(404, "NoSuchKey")
        full = safe_path(urllib.parse.unquote(u.path[5:]))
        if not full:
            return self.send_plain(404, "NoSuchKey")
        size = os.path.getsize(full)
        start = 0
        rng = None if STATE["norange"] else self.headers.get("Range")
        if rng and rng.startswith("bytes="):
            a = rng[6:].split("-")[0]
            start = int(a) if a else 0
            if start >= size:
                return self.send_plain(416, "", {"Content-Range": f"bytes */{size}"})
        n = size - start
        self.send_response(206 if rng else 200)
        self.send_header("Content-Length", str(n))
        self.send_header("ETag", f'"{sha_of(full)}"')
        self.send_header("Accept-Ranges", "bytes")
        if rng:
            self.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
        self.end_headers()
        if self.command == "HEAD":
            return
        with LOCK:
            cut = STATE["cut"]
            STATE["cut"] = 0
            wrong = STATE["wrong"]
            trickle = STATE["trickle"]
        sent = 0
        with open(full, "rb") as f:
            f.seek(start)
            while sent < n:
                want = min(256 * 1024, n - sent)
                if trickle:
                    want = min(want, max(1, trickle // 10))
                if cut:
                    want = min(want, cut - sent)
                    if want <= 0:
                        break
                chunk = f.read(want)
                if not chunk:
                    break
                if wrong:
                    chunk = bytes(b ^ 0x5A for b in chunk)
                try:
                    self.wfile.write(chunk)
                    self.wfile.flush()
                except OSError:
                    break
                sent += len(chunk)
                with LOCK:
                    STATE["cdn_bytes"] += len(chunk)
                if trickle:
                    time.sleep(0.1)
        if sent < n:
            self.close_connection = True
            try:
                self.connection.shutdown(2)
            except OSError:
                pass


def main():
    global ROOT
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--token", default="")
    ap.add_argument("--trickle", type=int, default=0)
    args = ap.parse_args()
    ROOT = args.root
    STATE["token"] = args.token
    STATE["trickle"] = args.trickle
    hub = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    cdn = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    hub.daemon_threads = cdn.daemon_threads = True
    PORTS["hub"] = hub.server_address[1]
    PORTS["cdn"] = cdn.server_address[1]
    threading.Thread(target=cdn.serve_forever, daemon=True).start()
    print(f"hub={PORTS['hub']} cdn={PORTS['cdn']}", flush=True)
    hub.serve_forever()


if __name__ == "__main__":
    sys.exit(main())

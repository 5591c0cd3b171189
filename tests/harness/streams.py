"""Streamed answers read as they arrive (from test_failover.py): a request on a raw socket whose
SSE events are yielded one by one, and the text an event carries."""
import json
import socket


class Stream:
    """A streamed request read event by event from a raw socket (chunked or close-delimited)."""

    def __init__(self, port, path, body, timeout=60):
        raw = json.dumps(body).encode()
        self.s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.s.sendall((f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                        f"Content-Type: application/json\r\nContent-Length: {len(raw)}\r\n\r\n")
                       .encode() + raw)
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            c = self.s.recv(65536)
            assert c, f"closed before headers: {self.buf!r}"
            self.buf += c
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        self.status = int(lines[0].split()[1])
        self.headers = {l.split(":", 1)[0].lower(): l.split(":", 1)[1].strip() for l in lines[1:]}
        self.chunked = self.headers.get("transfer-encoding", "").lower() == "chunked"
        self.body = b""
        self.ended_properly = False  # last chunk (or a clean close for non-chunked)
        self.eof = False

    def _more(self):
        c = self.s.recv(65536)
        if not c:
            self.eof = True
            return False
        self.buf += c
        return True

    def _pump(self):
        """Move decoded body bytes from buf to body; False at the end of the stream."""
        if not self.chunked:
            self.body += self.buf
            self.buf = b""
            if not self._more():
                self.ended_properly = True
                return False
            self.body += self.buf
            self.buf = b""
            return True
        while True:
            if b"\r\n" in self.buf:
                size = int(self.buf.split(b"\r\n", 1)[0].split(b";")[0], 16)
                line_len = self.buf.index(b"\r\n") + 2
                if len(self.buf) >= line_len + size + 2:
                    if size == 0:
                        self.ended_properly = True
                        return False
                    self.body += self.buf[line_len:line_len + size]
                    self.buf = self.buf[line_len + size + 2:]
                    return True
            if not self._more():
                return False

    def events(self):
        """Yields each SSE data payload as it completes."""
        while True:
            while b"\n\n" in self.body:
                block, self.body = self.body.split(b"\n\n", 1)
                data = [l[6:] for l in block.decode().split("\n") if l.startswith("data: ")]
                if data:
                    yield "\n".join(data)
            if not self._pump():
                return

    def close(self):
        self.s.close()


def text_of(ev, chat):
    d = json.loads(ev)
    c = d["choices"][0] if d.get("choices") else {}
    return (c.get("delta", {}).get("content") if chat else c.get("text")) or ""

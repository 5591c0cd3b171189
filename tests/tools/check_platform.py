#!/usr/bin/env python3
"""Linux-only calls live in src/base/platform_linux.c, behind src/base/platform.h (issue 28's
portability item): a port to another OS writes one file. Prints every Linux-only identifier,
header or path found in another file of src/ (comments are ignored, strings are not: "/proc/..."
is a path the code opens) and exits 1 if any. It also fails when it finds none in
platform_linux.c itself: a matcher that sees nothing there is broken, not the tree clean."""
import argparse
import pathlib
import re
import sys

HOME = "base/platform_linux.c"
IDENTS = (
    "prctl PR_SET_PDEATHSIG SIOCOUTQ SIOCINQ accept4 pipe2 dup3 sched_getaffinity CPU_COUNT "
    "SOCK_CLOEXEC SOCK_NONBLOCK recvmmsg sendmmsg mmsghdr UDP_GRO UDP_SEGMENT MSG_NOSIGNAL "
    "epoll_create epoll_create1 epoll_ctl epoll_wait inotify_init inotify_init1 signalfd eventfd "
    "timerfd_create memfd_create O_TMPFILE sysinfo getrandom splice tee vmsplice "
    "SO_PEERCRED TCP_INFO"
).split()
PATTERNS = [re.compile(r"\b%s\b" % re.escape(w)) for w in IDENTS] + [
    re.compile(r'"/proc/'),
    re.compile(r'"/sys/'),
    re.compile(r"#\s*include\s*<linux/"),
    re.compile(r"#\s*include\s*<sys/(prctl|epoll|inotify|sysinfo|signalfd|eventfd|timerfd)\.h>"),
]


def strip_comments(text):
    """Blank out /* */ and // comments, keeping string literals and line numbers."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c == '"' or c == "'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            i = j + 1
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def hits(path):
    code = strip_comments(path.read_text(errors="replace"))
    for no, line in enumerate(code.split("\n"), 1):
        for p in PATTERNS:
            m = p.search(line)
            if m:
                yield no, m.group(0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", required=True)
    src = pathlib.Path(ap.parse_args().src)
    bad = 0
    home_hits = 0
    for f in sorted(list(src.rglob("*.c")) + list(src.rglob("*.h"))):
        rel = f.relative_to(src).as_posix()
        found = list(hits(f))
        if rel == HOME:
            home_hits = len(found)
            continue
        for no, what in found:
            print(f"src/{rel}:{no}: {what} is Linux-only: call it through platform.h")
            bad += 1
    if home_hits == 0:
        print(f"src/{HOME}: no Linux-only call found there: the matcher is broken")
        return 1
    print(f"check_platform: {home_hits} Linux-only uses, all in src/{HOME}; {bad} elsewhere")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

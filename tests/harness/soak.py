"""Chaos soak: a mesh in network namespaces over impaired links (harness/netimp.py), a load
generator sending streamed and non-streamed requests through random nodes, and a seeded,
reproducible fault schedule (kill -9, SIGTERM, restarts, SIGSTOP pauses, partitions, a full disk,
killed llama-server and rpc-server children), with the invariants checked as it runs and at the end.

Used by tests/soak/test_soak.py (60 s, part of make test) and `make soak SOAK_SECONDS=N`.
"""
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import threading
import time

from harness.netimp import ImpairedNet
from harness.node import MESH_BIN, SANITIZED, Node, children_of, cmdline, http, model_path, pid_alive

NETIMP = os.path.join(os.path.dirname(MESH_BIN), "mesh-netimp")
HB_MS = 1000
ENV = {"MESH_LLM_HEARTBEAT_MS": str(HB_MS)}
SMALL, TINY, SPLIT = "stories260K", "TinyStories-656K-Q8_0", "llama-2-tiny-random"
MODELS = (SMALL, TINY, SPLIT)
REQUEST_BOUND_S = 60.0  # no request may take longer than this: past it, it "hung"
SANITIZER_MARKS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:")


def pctl(xs, p):
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def proc_sample(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            rss = next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmRSS:"))
        return rss, len(os.listdir(f"/proc/{pid}/fd"))
    except (OSError, StopIteration):
        return None


class Member:
    """One node slot of the soak: its namespace, home, arguments and current process."""

    def __init__(self, soak, idx, args, name):
        self.soak, self.idx, self.args, self.name = soak, idx, list(args), name
        self.passive = "--client" in args  # seed 002: not a gossip member, checks in instead
        self.dir = soak.tmp / name
        self.dir.mkdir()
        self.home = self.dir / "home"
        self.home.mkdir()
        # a small filesystem of its own, so the disk-full fault fills only this node's disk
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(self.home)], check=True)
        soak.mounts.append(str(self.home))
        self.node = None
        self.up = False  # running and not paused: the load generator may use it
        self.runs = 0
        self.base = None  # (rss, fds) once the mesh first converged

    def start(self, join_tokens=()):
        self.runs += 1
        d = self.dir / f"run{self.runs}"
        d.mkdir()
        env = dict(ENV, MESH_LLM_HOME=str(self.home), LLAMA_CACHE=str(self.dir / "llama-cache"),
                   MESH_LLM_ROUTE_REFRESH_MS=str(2 * HB_MS))
        args = ["--port", "0", *self.args]
        for t in join_tokens:
            args += ["--join", t]
        self.node = Node(args, env=env, tmp_path=d, ns=self.soak.net.ns(self.idx),
                         ready_timeout=90)
        self.soak.all_nodes.append(self.node)
        self.up = True

    @property
    def id(self):
        return self.node.id


class Soak:
    def __init__(self, tmp, seconds, seed=1, log=print):
        self.tmp, self.seconds, self.seed, self.log = tmp, seconds, seed, log
        self.rng = random.Random(seed)
        self.mounts, self.all_nodes, self.members = [], [], []
        self.results = []  # (kind, outcome, seconds, faults active)
        self.faults_log = []  # (t, kind, member name)
        self.active_faults = set()
        self.detect, self.recover = [], []
        self.samples = {}  # name -> [(t, rss, fds)]
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.t0 = None
        self.net = None
        self.violations = []

    # ---- set up ----
    def build(self):
        self.net = ImpairedNet(7, NETIMP, seed=self.seed)
        for a in range(1, 8):
            for b in range(a + 1, 8):
                self.net.link(a, b, rtt_ms=self.rng.uniform(1, 50), loss=self.rng.uniform(0, 0.03))
        split_vram = f"{0.6 * os.path.getsize(model_path(SPLIT)) / 1e9:.9f}"
        spec = [
            ("a", ["--model", model_path(SMALL)]),
            ("b", ["--model", model_path(SMALL)]),
            ("c", ["--model", model_path(TINY)]),
            ("d", ["--model", model_path(SPLIT), "--ctx-size", "128", "--max-vram", split_vram]),
            ("e", ["--models-dir", self.models_dir("e", SPLIT), "--ctx-size", "128",
                   "--max-vram", split_vram]),
            ("f", ["--client"]),
            ("g", ["--client"]),
        ]
        for i, (name, args) in enumerate(spec, start=1):
            self.members.append(Member(self, i, args, name))
        self.members[0].start()
        for m in self.members[1:]:
            m.start([self.members[0].node.token])

    def models_dir(self, name, *models):
        d = self.tmp / f"models-{name}"
        d.mkdir()
        for m in models:
            os.symlink(model_path(m), d / f"{m}.gguf")
        return str(d)

    def tokens_except(self, member):
        return [m.node.token for m in self.members if m is not member and m.node]

    # ---- views of the mesh ----
    def peer_states(self, m):
        try:
            return {p["id"]: p["state"] for p in m.node.status(timeout=5)["peers"]}
        except (OSError, AssertionError, ValueError):
            return None

    def model_statuses(self, m):
        try:
            r = m.node.request("GET", "/v1/models", timeout=5)
            return {x["id"]: x["status"] for x in r.json()["data"]} if r.status == 200 else None
        except (OSError, ValueError):
            return None

    def converged(self, members=None):
        """Every live member sees every other live member alive and the same catalog, with every
        model ready."""
        live = members or [m for m in self.members if m.up]
        active = [m for m in live if not m.passive]
        catalogs = []
        for m in live:
            if not m.passive:
                st = self.peer_states(m)
                if st is None or any(st.get(o.id) != "alive" for o in active if o is not m):
                    return False
            cat = self.model_statuses(m)
            if cat is None or any(cat.get(x) != "ready" for x in MODELS):
                return False
            catalogs.append(cat)
        return all(c == catalogs[0] for c in catalogs)

    def wait(self, cond, timeout, what):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            v = cond()
            if v:
                return v
            time.sleep(0.2)
        raise AssertionError(f"soak: timed out after {timeout}s waiting for {what}")

    # ---- load ----
    def one_request(self, m, model, stream):
        body = {"model": model, "prompt": "Once upon a time", "max_tokens": 16,
                "temperature": 0, "stream": stream}
        t = time.monotonic()
        try:
            r = http(m.node.api_port, "POST", "/v1/completions", body, timeout=REQUEST_BOUND_S,
                     ns=m.node.ns)
        except socket.timeout:
            return "hang", time.monotonic() - t
        except OSError as e:
            return f"conn:{e}", time.monotonic() - t
        took = time.monotonic() - t
        if r.status != 200:
            try:
                ok = "error" in r.json()
            except ValueError:
                ok = False
            return (f"error:{r.status}" if ok else f"bad_error:{r.status}"), took
        if not stream:
            try:
                return ("ok" if r.json()["choices"] else "bad_body"), took
            except (ValueError, KeyError):
                return "bad_body", took
        events = [l[6:] for l in r.body.decode(errors="replace").split("\n")
                  if l.startswith("data: ")]
        if events and events[-1] == "[DONE]":
            errs = [e for e in events[:-1] if '"error"' in e]
            return ("stream_error" if errs else "ok"), took
        if events and '"error"' in events[-1]:
            return "stream_error", took
        return "truncated", took

    def load_worker(self, wid):
        rng = random.Random(self.seed * 1000 + wid)
        while not self.stop.is_set():
            with self.lock:
                live = [m for m in self.members if m.up]
            if not live:
                time.sleep(0.1)
                continue
            m = rng.choice(live)
            model, stream = rng.choice(MODELS), rng.random() < 0.5
            with self.lock:
                faults_before = set(self.active_faults)
            outcome, took = self.one_request(m, model, stream)
            with self.lock:
                faults = faults_before | self.active_faults
                still_up = m.up
            if outcome.startswith("conn:") and not still_up:
                outcome = "node_went_down"  # the node it talked to was the fault's victim
            elif outcome.startswith("conn:"):  # a live node cut the answer off
                self.violations.append(f"request to {m.name} for {model} (stream={stream}): "
                                       f"{outcome} during {sorted(faults)}")
                outcome = "closed"
            with self.lock:
                self.results.append((model, outcome, took, tuple(sorted(faults)) or ("none",)))
            if outcome in ("hang", "truncated", "bad_body") or outcome.startswith("bad_error"):
                self.violations.append(f"request to {m.name} for {model} (stream={stream}): "
                                       f"{outcome} after {took:.1f}s during {sorted(faults)}")

    def sampler(self):
        while not self.stop.wait(2.0):
            for m in self.members:
                if m.node and m.node.proc.poll() is None:
                    s = proc_sample(m.node.pid)
                    if s:
                        self.samples.setdefault(m.name, []).append(
                            (time.monotonic() - self.t0, *s))

    # ---- faults ----
    def watch(self, victim, kind, t_fault, want, sink):
        """Time until every other live member sees the victim in state `want`."""
        def seen():
            others = [m for m in self.members if m.up and m is not victim and not m.passive]
            for o in others:
                st = self.peer_states(o)
                if st is None or st.get(victim_id) != want:
                    return False
            return True
        if victim.passive:
            # a passive node is in nobody's peer list: nothing to detect; it is back when its
            # routing table shows every model ready again
            if want == "alive":
                def seen():
                    cat = self.model_statuses(victim)
                    return cat is not None and all(cat.get(x) == "ready" for x in MODELS)
            else:
                return
        victim_id = victim.node.id
        deadline = t_fault + 30
        while time.monotonic() < deadline and not self.stop.is_set():
            if seen():
                sink.append((kind, time.monotonic() - t_fault))
                return
            time.sleep(0.2)
        sink.append((kind, None))

    def spawn(self, fn, *args):
        t = threading.Thread(target=fn, args=args, daemon=True)
        t.start()
        return t

    def fault(self, kind, victim):
        now = time.monotonic()
        self.faults_log.append((round(now - self.t0, 1), kind, victim.name))
        self.log(f"soak t={now - self.t0:5.1f}s fault {kind} on {victim.name}")
        label = f"{kind}"
        with self.lock:
            self.active_faults.add(label)
        try:
            if kind in ("kill9", "sigterm"):
                with self.lock:
                    victim.up = False
                victim.node.remember_children()
                victim.node.proc.send_signal(signal.SIGKILL if kind == "kill9" else signal.SIGTERM)
                victim.node.proc.wait(timeout=30)
                if kind == "kill9":
                    for c in victim.node.child_pids:  # orphans: their parent cannot stop them
                        self.wait(lambda: not pid_alive(c) or not cmdline(c), 15,
                                  f"{victim.name}'s child {c} to exit after its node died")
                    self.watch(victim, kind, now, "dead", self.detect)
                time.sleep(self.rng.uniform(1, 4))
                victim.start(self.tokens_except(victim))
                t_back = time.monotonic()
                self.watch(victim, kind, t_back, "alive", self.recover)
            elif kind == "sigstop":
                with self.lock:
                    victim.up = False
                os.kill(victim.node.pid, signal.SIGSTOP)
                self.watch(victim, kind, now, "dead", self.detect)
                os.kill(victim.node.pid, signal.SIGCONT)
                t_back = time.monotonic()
                with self.lock:
                    victim.up = True
                self.watch(victim, kind, t_back, "alive", self.recover)
            elif kind == "partition":
                self.net.isolate(victim.idx)
                self.watch(victim, kind, now, "dead", self.detect)
                self.net.heal(victim.idx, "*")
                t_back = time.monotonic()
                self.watch(victim, kind, t_back, "alive", self.recover)
            elif kind in ("kill_llama", "kill_rpc"):
                want = "llama-server" if kind == "kill_llama" else "rpc-server"
                kids = [c for c in children_of(victim.node.pid)
                        if want in os.path.basename((cmdline(c) or [""])[0])]
                for c in kids:
                    os.kill(c, signal.SIGKILL)
                time.sleep(3)
            elif kind == "disk_full":
                filler = victim.home / "filler"
                with open(filler, "wb") as f:
                    try:
                        while True:
                            f.write(b"\0" * 65536)
                    except OSError:
                        pass
                time.sleep(5)
                filler.unlink()
        finally:
            with self.lock:
                self.active_faults.discard(label)

    def scheduler(self, fault_until):
        kinds = ["kill9", "sigterm", "sigstop", "partition", "kill_llama", "kill_rpc", "disk_full"]
        while time.monotonic() < fault_until and not self.stop.is_set():
            kind = self.rng.choice(kinds)
            pool = self.members[:5] if kind in ("kill_llama", "kill_rpc") else self.members
            if kind == "kill_rpc":
                pool = self.members[3:5]
            victim = self.rng.choice([m for m in pool if m.up])
            self.fault(kind, victim)
            # let the mesh settle a little between faults (bounded)
            gap_end = time.monotonic() + self.rng.uniform(1, 3)
            while time.monotonic() < gap_end and not self.stop.is_set():
                time.sleep(0.1)

    # ---- run ----
    def run(self, workers=3):
        self.build()
        self.wait(self.converged, 120, "the initial mesh to converge")
        for m in self.members:
            m.base = proc_sample(m.node.pid)
        self.t0 = time.monotonic()
        threads = [self.spawn(self.load_worker, w) for w in range(workers)]
        threads.append(self.spawn(self.sampler))
        self.scheduler(self.t0 + self.seconds)
        t_last = time.monotonic()
        # after the last fault: the mesh converges within a bound, and keeps answering
        self.wait(self.converged, 120, "the mesh to converge after the last fault")
        self.converge_s = time.monotonic() - t_last
        time.sleep(2)
        self.stop.set()
        for t in threads:
            t.join(timeout=REQUEST_BOUND_S + 10)
        for m in self.members:
            for model in MODELS:
                out, _ = self.one_request(m, model, False)
                if out != "ok":
                    self.violations.append(f"after convergence {m.name} answered {model}: {out}")
        self.check_no_resurrection()
        self.check_resources()
        self.check_processes()
        return self.report()

    def check_no_resurrection(self):
        """A node that is gone stays dead everywhere (stale gossip never brings it back)."""
        victim = self.members[1]  # a replica of a model the first member also serves
        victim.up = False
        victim.node.proc.kill()
        victim.node.proc.wait(timeout=10)
        others = [m for m in self.members if m.up and not m.passive]
        self.wait(lambda: all((self.peer_states(o) or {}).get(victim.id) == "dead" for o in others),
                  30, "the removed node to be dead everywhere")
        end = time.monotonic() + 4 * HB_MS / 1000
        while time.monotonic() < end:
            for o in others:
                st = self.peer_states(o) or {}
                if st.get(victim.id) not in ("dead", None):
                    self.violations.append(f"{victim.name} resurrected on {o.name}: {st.get(victim.id)}")
                    return
            time.sleep(0.3)

    def check_resources(self):
        for m in self.members:
            if not m.up or not m.base:
                continue
            end = proc_sample(m.node.pid)
            rss0, fd0 = m.base
            rss1, fd1 = end
            if fd1 > fd0 + 16:
                self.violations.append(f"{m.name}: fds {fd0} -> {fd1}")
            # under ASan freed memory sits in the quarantine (up to 256 MiB) and RSS says nothing
            # about leaks: LeakSanitizer's report at exit is that build's check
            if not SANITIZED and rss1 > rss0 * 1.5 + 16 * 2**20:
                self.violations.append(f"{m.name}: RSS {rss0 >> 20} -> {rss1 >> 20} MiB")

    def check_processes(self):
        """Every llama.cpp child belongs to a live node of the soak."""
        live = {m.node.pid for m in self.members if m.up}
        for n in self.all_nodes:
            n.remember_children()
            if n.pid in live:
                continue
            for c in n.child_pids:
                argv = cmdline(c)
                if pid_alive(c) and argv and ("llama-server" in argv[0] or "rpc-server" in argv[0]):
                    self.violations.append(f"leaked child {c} {argv[0]} of stopped node {n.pid}")

    def sanitizer_reports(self):
        out = []
        for n in self.all_nodes:
            err = n.stderr()
            if any(k in err for k in SANITIZER_MARKS):
                out.append(f"node {n.pid}: " + next(l for l in err.splitlines()
                                                    if any(k in l for k in SANITIZER_MARKS)))
        return out

    def report(self):
        by_fault = {}
        for model, outcome, took, faults in self.results:
            for f in faults:
                d = by_fault.setdefault(f, {})
                d[outcome] = d.get(outcome, 0) + 1
        det = [s for _, s in self.detect if s is not None]
        rec = [s for _, s in self.recover if s is not None]
        rep = {
            "seconds": self.seconds, "seed": self.seed, "requests": len(self.results),
            "ok": sum(1 for r in self.results if r[1] == "ok"),
            "outcomes_by_fault": by_fault,
            "faults": self.faults_log,
            "detection_s": {"n": len(det), "missed": sum(1 for _, s in self.detect if s is None),
                            "p50": pctl(det, 50), "p99": pctl(det, 99)},
            "recovery_s": {"n": len(rec), "missed": sum(1 for _, s in self.recover if s is None),
                           "p50": pctl(rec, 50), "p99": pctl(rec, 99)},
            "converge_after_last_fault_s": round(self.converge_s, 1),
            "rss_fd": {name: {"first": s[0][1:], "last": s[-1][1:],
                              "max_rss_mib": max(x[1] for x in s) >> 20,
                              "max_fds": max(x[2] for x in s)}
                       for name, s in self.samples.items() if s},
            "violations": self.violations + self.sanitizer_reports(),
        }
        return rep

    def close(self):
        self.stop.set()
        for n in self.all_nodes:
            try:
                if n.proc.poll() is None:
                    os.kill(n.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
            n.cleanup()
        if self.net:
            self.net.close()
        for mnt in self.mounts:
            subprocess.run(["umount", "-l", mnt], check=False)

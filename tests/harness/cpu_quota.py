"""A CPU quota for the processes a test or benchmark starts: a cgroup of its own (cgroup v1
"cpu" controller: cpu.cfs_quota_us; or cgroup v2 with the cpu controller: cpu.max) that lets
them run `share` of one CPU per 100 ms period, whatever else the machine does. Used to throttle
one node for real (tests/integration/test_split_speed.py, bench/split-speed).

    q = CpuQuota("mesh-test-slow", 0.1)   # raises QuotaUnavailable when it cannot
    argv = q.prefix() + [mesh_llm, ...]   # the process joins the cgroup, then execs
    ...
    q.close()                             # after its processes exited: removes the cgroup

The prefix is `sh -c 'echo $$ > PROCS && exec "$@"'`: the process is in the cgroup before its
first instruction, and its children (llama-server, rpc-server) inherit it. Only the cgroup this
creates is touched."""
import os
import time

PERIOD_US = 100000


class QuotaUnavailable(Exception):
    pass


def _root():
    v1 = "/sys/fs/cgroup/cpu"
    if os.path.exists(os.path.join(v1, "cpu.cfs_quota_us")):
        return v1, 1
    v2 = "/sys/fs/cgroup"
    try:
        with open(os.path.join(v2, "cgroup.subtree_control")) as f:
            if "cpu" in f.read().split():
                return v2, 2
    except OSError:
        pass
    raise QuotaUnavailable("no cgroup cpu controller (v1 cpu or v2 cpu.max) to use")


class CpuQuota:
    def __init__(self, name, share):
        root, self.version = _root()
        self.path = os.path.join(root, "%s-%d" % (name, os.getpid()))
        try:
            os.mkdir(self.path)
        except FileExistsError:
            pass
        except OSError as e:
            raise QuotaUnavailable("cannot create %s: %s" % (self.path, e))
        quota = max(1000, int(share * PERIOD_US))
        try:
            if self.version == 1:
                self._write("cpu.cfs_period_us", str(PERIOD_US))
                self._write("cpu.cfs_quota_us", str(quota))
            else:
                self._write("cpu.max", "%d %d" % (quota, PERIOD_US))
        except OSError as e:
            self.close()
            raise QuotaUnavailable("cannot set the quota in %s: %s" % (self.path, e))
        self.share = share

    def _write(self, name, value):
        with open(os.path.join(self.path, name), "w") as f:
            f.write(value)

    def prefix(self):
        return ["sh", "-c", 'echo $$ > "$0" && exec "$@"', os.path.join(self.path, "cgroup.procs")]

    def pids(self):
        try:
            with open(os.path.join(self.path, "cgroup.procs")) as f:
                return [int(x) for x in f.read().split()]
        except OSError:
            return []

    def close(self, timeout=10.0):
        """Remove the cgroup once its processes are gone (bounded wait; the caller stops them)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                os.rmdir(self.path)
                return True
            except FileNotFoundError:
                return True
            except OSError:
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.1)

#!/usr/bin/env python3
"""The last lines of `make test`: one line per stage — passed, failed, skipped — naming every
skipped test with its reason, so a test skipped for want of root, a tool or a model is seen.

    summary.py [--build build] [--asan build-asan] [--fuzz build-fuzz] [--since STAMP]

Reads what the stages leave behind:
  unit, unit (asan)        BUILD|ASAN/Testing/Temporary/LastTest.log (ctest's log: every test's
                           output). Counted per cmocka case ([ OK ], [ FAILED ], [ SKIPPED ]); a
                           check script or a program that fails without naming a case counts as
                           one. The reason of a cmocka skip is the test's "skipping: …" line.
  integration, soak-smoke, integration (asan), soak-smoke (asan), soak
                           BUILD/junit/<stage>.xml (pytest --junitxml, from the Makefile)
  fuzz-smoke               FUZZ/fuzz-work/<target>.log: passed when libFuzzer said "Done"
A file older than STAMP (touched when `make test` starts) is from an earlier run: that stage is
"not run". Exit status 0 (the stages' own exit statuses decide make's).
"""
import argparse
import ast
import glob
import os
import re
import sys
import xml.etree.ElementTree as ET


class Stage:
    def __init__(self, name):
        self.name, self.passed, self.failed, self.skipped = name, [], [], []  # skipped: (who, why)

    def line(self):
        s = f"{self.name}: {len(self.passed)} passed, {len(self.failed)} failed, " \
            f"{len(self.skipped)} skipped"
        if self.failed:
            s += " — failed: " + ", ".join(self.failed)
        if self.skipped:
            by_reason = {}
            for who, why in self.skipped:
                by_reason.setdefault(why or "no reason given", []).append(who)
            s += " — skipped: " + "; ".join(f"{why} ({len(w)}): {', '.join(w)}"
                                             for why, w in by_reason.items())
        return s


def fresh(path, since):
    return os.path.isfile(path) and (since is None or os.path.getmtime(path) >= since)


RESULT = re.compile(r"^\[ +(OK|FAILED|SKIPPED) +\] (\S+)$")


def ctest_log(name, path):
    """ctest's LastTest.log: blocks "N/M Testing: NAME" … "Test Passed." / "Test Failed…"."""
    st = Stage(name)
    prog, running, why, cases, verdict, current = None, {}, {}, 0, None, None

    def close():
        if prog is None:
            return
        if verdict != "passed" and not any(f.startswith(prog + "/") for f in st.failed):
            st.failed.append(prog)  # failed (or crashed, timed out) without naming a case
        elif verdict == "passed" and cases == 0:
            st.passed.append(prog)  # a check script: one test

    with open(path, errors="replace") as f:
        for raw in f:
            line = raw.rstrip("\n")
            m = re.match(r"^\d+/\d+ Testing: (\S+)$", line)
            if m:
                close()
                prog, running, why, cases, verdict = m.group(1), {}, {}, 0, "unknown"
                continue
            if prog is None:
                continue
            m = re.match(r"^\[ RUN +\] (\S+)$", line)
            if m:
                running[m.group(1)] = True
                current = m.group(1)
                continue
            m = RESULT.match(line)
            if m and m.group(2) in running:  # not the repeated lists at the end of a run
                kind, case = m.groups()
                del running[case]
                cases += 1
                who = f"{prog}/{case}"
                if kind == "OK":
                    st.passed.append(who)
                elif kind == "FAILED":
                    st.failed.append(who)
                else:
                    st.skipped.append((who, why.get(case)))
                continue
            if line.startswith("skipping: ") and running:
                why[current] = line[len("skipping: "):]
                continue
            if line.startswith("Test Passed"):
                verdict = "passed"
            elif line.startswith("Test Failed"):
                verdict = "failed"
            elif line.startswith("Test Not Run"):
                verdict = "not run"
                st.skipped.append((prog, "ctest did not run it"))
                prog = None  # counted
    close()
    return st


def short(classname, name):
    """tests.integration.test_mesh + test_x → test_mesh.py::test_x (pytest's node id, shorter)."""
    parts = [p for p in classname.split(".") if p]
    if len(parts) >= 3 and parts[0] == "tests":
        return "::".join([parts[2] + ".py"] + parts[3:] + [name])
    if not parts and name.startswith("tests."):  # a module skipped or broken at collection
        return name.split(".")[-1] + ".py"
    return "::".join(parts + [name])


def collection_reason(text):
    """pytest writes a module-level skip as "('path', line, 'Skipped: why')"."""
    try:
        why = ast.literal_eval(text)[2]
    except (ValueError, SyntaxError, TypeError, IndexError):
        return re.sub(r"^\S+:\d+: ", "", text)
    return why[len("Skipped: "):] if why.startswith("Skipped: ") else why


def junit(name, path):
    st = Stage(name)
    for case in ET.parse(path).getroot().iter("testcase"):
        who = short(case.get("classname", ""), case.get("name", ""))
        if case.find("failure") is not None or case.find("error") is not None:
            st.failed.append(who)
        elif case.find("skipped") is not None:
            sk = case.find("skipped")
            why = sk.get("message") or ""
            if why in ("", "collection skipped"):  # a module skipped at import
                why = collection_reason((sk.text or "").strip()) or why
            st.skipped.append((who, why.replace("\n", " ")))
        else:
            st.passed.append(who)
    return st


def fuzz(name, work, since):
    st = Stage(name)
    for log in sorted(glob.glob(os.path.join(work, "*.log"))):
        if not fresh(log, since):
            continue
        target = "fuzz_" + os.path.basename(log)[:-4]
        with open(log, errors="replace") as f:
            text = f.read()
        (st.passed if re.search(r"^Done \d+ runs", text, re.M) else st.failed).append(target)
    return st if st.passed or st.failed else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--asan", default="build-asan")
    ap.add_argument("--fuzz", default="build-fuzz")
    ap.add_argument("--since", help="a file touched when the run started")
    a = ap.parse_args()
    since = os.path.getmtime(a.since) if a.since and os.path.exists(a.since) else None
    log = os.path.join("Testing", "Temporary", "LastTest.log")
    junit_dir = os.path.join(a.build, "junit")
    stages = [  # make test's order; "soak" (make soak) only when it ran
        ("unit", lambda p: ctest_log("unit", p), os.path.join(a.build, log), True),
        ("integration", lambda p: junit("integration", p),
         os.path.join(junit_dir, "integration.xml"), True),
        ("soak-smoke", lambda p: junit("soak-smoke", p),
         os.path.join(junit_dir, "soak-smoke.xml"), True),
        ("soak-smoke (asan)", lambda p: junit("soak-smoke (asan)", p),
         os.path.join(junit_dir, "soak-smoke-asan.xml"), True),
        ("unit (asan)", lambda p: ctest_log("unit (asan)", p), os.path.join(a.asan, log), True),
        ("integration (asan)", lambda p: junit("integration (asan)", p),
         os.path.join(junit_dir, "integration-asan.xml"), True),
        ("soak", lambda p: junit("soak", p), os.path.join(junit_dir, "soak.xml"), False),
    ]
    print("== summary")
    for name, read, path, always in stages:
        if fresh(path, since):
            try:
                print(read(path).line())
            except (ET.ParseError, OSError) as e:
                print(f"{name}: unreadable {path}: {e}")
        elif always:
            print(f"{name}: not run")
    f = fuzz("fuzz-smoke", os.path.join(a.fuzz, "fuzz-work"), since)
    print(f.line() if f else "fuzz-smoke: not run")
    return 0


if __name__ == "__main__":
    sys.exit(main())

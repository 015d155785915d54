#!/usr/bin/env python3
"""Summarises the VM run: one line per package and identity, then a closing
'N passed, N failed' line; exits 1 if anything failed.

usage: summary.py RESULTS_DIR PKGS_TXT CONSOLE_LOG|- [TIMINGS]

A package fails when its test binary exited non-zero or left no result. As
root the binaries ran with MOAT_REQUIRE_ALL=1, so a capability skip already
is a failure. As the ordinary user they ran without it (every test that needs
root would fail otherwise); a capability skip there fails the package unless
its reason is that root is needed; the same holds for the login pass (the
user through an ssh login, make vagrant-test only). A few tests must have passed, so that a
pure cgroup v2 path cannot silently stop being exercised (REQUIRED).

A package with no result names the tests that were still running when the
VM stopped: the guest copies each test's start and end lines to the console
(moat-t: IDENTITY NAME: ...), which the host reads as the guest goes.
"""
import os
import re
import sys

# Tests that must PASS in the VM, per identity: the v2 paths (clone into a
# cgroup, cgroup.kill, memory.max OOM, pids.max, cpu.max, a delegated
# subtree as an unprivileged user).
REQUIRED = {
    "root": {
        "cgroups": [
            "TestV2CloneIntoLeafKillDelete",
            "TestV2MemoryMaxOOMKills",
            "TestV2MemoryUnderMaxIsNotOOM",
            "TestV2PidsMaxStopsForkBomb",
            "TestV2CPUMaxThrottles",
            "TestV2KillEmptiesLeaf",
            "TestV2LimitsAreWritten",
            "TestV2CleanStale",
            "TestV2DelegatedSubtreeAsNobody",
        ],
    },
    "user": {
        "cgroups": ["TestV2DelegatedSubtreeAsCaller"],
    },
}

# What must also pass where the guest boots systemd and the user has a
# manager of its own (make vagrant-test sets MOAT_VM_SYSTEMD=1; the qemu
# runner's guest has no systemd, and these skip there): limits from a
# transient Delegate=yes scope moat asks for itself, with no wrapper.
# "login" is vagrant-test.sh's login pass: the user through an ssh login, in
# the session's own root-owned scope, with no wrapper; only the packages
# named here run in it.
REQUIRED_SYSTEMD = {
    "root": {
        "cmd_moat-runtime": ["TestSystemdCgroup", "TestPodmanSystemdCgroup"],
    },
    "user": {
        "cgroups": ["TestSystemdScopeWithoutWrapper", "TestDelegatedCgroupUsedAsIs",
                    "TestStopDeadScopes", "TestDelegatedGroupGivenBack", "TestDelegatedGroupKeptWhileASandboxRuns"],
        "cmd_moat": ["TestRunRootlessLimitsFromSystemdScope", "TestRunGivesBackADelegatedGroup"],
    },
    "login": {
        "cmd_moat": ["TestRunInLoginSession"],
    },
}

ROOT_ONLY = re.compile(r"skipped, capability missing: .*\bneeds root\b")
CAP_SKIP = re.compile(r"skipped, capability missing: .*")


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return None


PROGRESS = re.compile(r"^moat-t: (\S+) (\S+): \s*(?:=== RUN\s+(\S+)|--- (?:PASS|FAIL|SKIP): (\S+) )")


def running(console):
    """(identity, package) -> the tests started and not ended, in order."""
    live = {}
    for line in (console or "").splitlines():
        m = PROGRESS.match(line)
        if not m:
            continue
        tests = live.setdefault((m.group(1), m.group(2)), {})
        if m.group(3):
            tests[m.group(3)] = True
        else:
            tests.pop(m.group(4), None)
    return {k: list(v) for k, v in live.items()}


def main():
    results, pkgs_txt, console_log = sys.argv[1], sys.argv[2], sys.argv[3]
    timings = sys.argv[4] if len(sys.argv) > 4 else ""
    pkgs = [l.split()[:2] for l in open(pkgs_txt) if l.strip()]
    live = running(read(console_log))
    facts = read(os.path.join(results, "facts.txt"))
    if facts:
        print("vm-test: guest facts")
        for l in facts.splitlines():
            if not l.startswith(("cgroup mounts:", "  ")) and " - cgroup" not in l:
                print("  " + l)
    setup = read(os.path.join(results, "setup.log"))
    if setup and setup.strip():
        print("vm-test: cgroup setup said:\n" + setup)

    passed = failed = 0
    print(f"\n{'package':<22} {'identity':<6} {'result':<6} {'secs':>6} {'pass':>5} {'skip':>5} {'fail':>5}  notes")
    want = os.environ.get("MOAT_VM_WHO", "both")
    systemd = os.environ.get("MOAT_VM_SYSTEMD") == "1"
    passes = [w for w in ("root", "user") if want in ("both", w)]
    if systemd and want in ("both", "user"):
        passes.append("login")
    for who in passes:
        for name, _rel in pkgs:
            if who == "login" and name not in REQUIRED_SYSTEMD["login"]:
                continue
            base = os.path.join(results, who, name)
            log, rc, secs = read(base + ".log"), read(base + ".rc"), read(base + ".secs")
            notes = []
            ok = True
            if log is None or rc is None:
                ok = False
                started = live.get((who, name))
                if started is None:
                    notes.append("no result: the VM stopped or timed out before this package started")
                else:
                    # The innermost tests still running: no other running
                    # test has one of them as its parent.
                    leaves = [t for t in started if not any(u.startswith(t + "/") for u in started)]
                    notes.append("no result: the VM stopped or timed out while it ran "
                                 + (", ".join(leaves[:4]) if leaves else "no test yet (between tests)"))
                log = log or ""
            elif rc.strip() != "0":
                ok = False
                notes.append(f"exit {rc.strip()}")
                # go test's -test.timeout panic lists the tests it stopped.
                m = re.search(r"panic: test timed out after (\S+)\s+running tests:\n((?:\t.*\n?)+)", log)
                if m:
                    notes.append(f"timed out after {m.group(1)} in " + ", ".join(l.strip() for l in m.group(2).splitlines()[:4]))
            np = len(re.findall(r"^\s*--- PASS", log, re.M))
            ns = len(re.findall(r"^\s*--- SKIP", log, re.M))
            nf = len(re.findall(r"^\s*--- FAIL", log, re.M))
            if who in ("user", "login"):
                bad = [m.group(0) for m in CAP_SKIP.finditer(log) if not ROOT_ONLY.match(m.group(0))]
                if bad:
                    ok = False
                    notes.append(f"{len(bad)} capability skip(s) not about root: {bad[0]}")
                roots = len([m for m in CAP_SKIP.finditer(log) if ROOT_ONLY.match(m.group(0))])
                if roots:
                    notes.append(f"{roots} need root")
            required = REQUIRED.get(who, {}).get(name, [])
            if systemd:
                required = required + REQUIRED_SYSTEMD.get(who, {}).get(name, [])
            for t in required:
                # Not anchored: a child's stderr can land on the same line.
                if not re.search(r"--- PASS: " + re.escape(t) + r" \(", log):
                    ok = False
                    notes.append(f"{t} did not pass")
            for m in re.finditer(r"^\s*--- FAIL: (\S+)", log, re.M):
                if len(notes) < 8:
                    notes.append("FAIL " + m.group(1))
            plain = [m.group(1) for m in re.finditer(r"^\s*--- SKIP: (\S+)", log, re.M)]
            if who == "root" and plain:
                notes.append("skipped (not this layout): " + ", ".join(plain[:6]) + (" ..." if len(plain) > 6 else ""))
            status = "PASS" if ok else "FAIL"
            passed += ok
            failed += not ok
            print(f"{name:<22} {who:<6} {status:<6} {(secs or '-').strip():>6} {np:>5} {ns:>5} {nf:>5}  {'; '.join(notes)}")
    if timings:
        print(f"\nvm-test: {timings}")
    print(f"vm-test: logs in {results}/{{root,user}}/NAME.log, console in {os.path.dirname(results)}/console.log")
    print(f"vm-test: {passed} passed, {failed} failed")
    return 1 if failed or not pkgs else 0


if __name__ == "__main__":
    sys.exit(main())

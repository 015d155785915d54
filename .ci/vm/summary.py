#!/usr/bin/env python3
"""Summarises the VM run: one line per package and identity, then a closing
'N passed, N failed' line; exits 1 if anything failed.

usage: summary.py RESULTS_DIR PKGS_TXT [TIMINGS]

A package fails when its test binary exited non-zero or left no result. As
root the binaries ran with MOAT_REQUIRE_ALL=1, so a capability skip already
is a failure. As the ordinary user they ran without it (every test that needs
root would fail otherwise); a capability skip there fails the package unless
its reason is that root is needed. A few tests must have passed, so that a
pure cgroup v2 path cannot silently stop being exercised (REQUIRED).
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

ROOT_ONLY = re.compile(r"skipped, capability missing: .*\bneeds root\b")
CAP_SKIP = re.compile(r"skipped, capability missing: .*")


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return None


def main():
    results, pkgs_txt = sys.argv[1], sys.argv[2]
    timings = sys.argv[3] if len(sys.argv) > 3 else ""
    pkgs = [l.split() for l in open(pkgs_txt) if l.strip()]
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
    for who in [w for w in ("root", "user") if want in ("both", w)]:
        for name, _rel in pkgs:
            base = os.path.join(results, who, name)
            log, rc, secs = read(base + ".log"), read(base + ".rc"), read(base + ".secs")
            notes = []
            ok = True
            if log is None or rc is None:
                ok = False
                notes.append("no result (the VM stopped or timed out before this)")
                log = log or ""
            elif rc.strip() != "0":
                ok = False
                notes.append(f"exit {rc.strip()}")
            np = len(re.findall(r"^\s*--- PASS", log, re.M))
            ns = len(re.findall(r"^\s*--- SKIP", log, re.M))
            nf = len(re.findall(r"^\s*--- FAIL", log, re.M))
            if who == "user":
                bad = [m.group(0) for m in CAP_SKIP.finditer(log) if not ROOT_ONLY.match(m.group(0))]
                if bad:
                    ok = False
                    notes.append(f"{len(bad)} capability skip(s) not about root: {bad[0]}")
                roots = len([m for m in CAP_SKIP.finditer(log) if ROOT_ONLY.match(m.group(0))])
                if roots:
                    notes.append(f"{roots} need root")
            for t in REQUIRED.get(who, {}).get(name, []):
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

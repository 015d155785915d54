#!/usr/bin/env python3
"""compare.py [--update] HANDLER EXPECTED RESULT.tsv...: judges HANDLER's run
of make cri-test against its expected list.

RESULT.tsv files are critest's and the scenario's (specs.py's format:
STATE<TAB>NAME<TAB>MESSAGE). EXPECTED has one line per spec or step:

    pass<TAB>NAME
    fail<TAB>NAME<TAB>REASON
    skip<TAB>NAME<TAB>REASON      (critest skips it on this host)

and # comments. A name listed as pass that did not pass is a regression:
the exit status is 1. Anything else that differs (a listed failure that
now passes, a skip that ran, a name the list lacks or the run lacks) is
printed as a note to update the list, and fails nothing; with --update
the list is rewritten from the run, keeping its comments and each
unchanged line's reason (a new failure's reason is its message, to be
edited into a cause).
"""
import sys

WORD = {"passed": "pass", "failed": "fail", "skipped": "skip"}


def read_results(paths):
    res = {}
    for p in paths:
        with open(p) as f:
            for line in f:
                state, name, msg = (line.rstrip("\n").split("\t") + ["", ""])[:3]
                res[name] = (WORD[state], msg)
    return res


def read_expected(path):
    head, exp = [], {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line.strip() or line.startswith("#"):
                if not exp:
                    head.append(line)
                continue
            f3 = line.split("\t")
            if f3[0] not in ("pass", "fail", "skip") or len(f3) < 2 or (f3[0] != "pass" and len(f3) < 3):
                sys.exit(f"{path}:{n}: want pass<TAB>NAME, fail<TAB>NAME<TAB>REASON or skip<TAB>NAME<TAB>REASON: {line!r}")
            exp[f3[1]] = (f3[0], f3[2] if len(f3) > 2 else "")
    return head, exp


def main(argv):
    update = argv[:1] == ["--update"]
    if update:
        argv = argv[1:]
    handler, path, results = argv[0], argv[1], read_results(argv[2:])
    head, exp = read_expected(path)
    regressions, notes = [], []
    for name, (want, reason) in sorted(exp.items()):
        got, msg = results.get(name, ("missing", "not run"))
        if want == "pass" and got != "pass":
            regressions.append(f"cri: {handler}: REGRESSION {name}: {got}, expected to pass: {msg}")
        elif want != got:
            notes.append(f"cri: {handler}: note: {name}: {got}, listed as {want} ({reason}){': ' + msg if msg else ''}")
    for name in sorted(set(results) - set(exp)):
        notes.append(f"cri: {handler}: note: {name}: {results[name][0]}, not in {path}")
    for kind in ("critest", "crictl scenario"):
        sel = [s for n, (s, _) in results.items() if n.startswith("crictl scenario: ") == (kind != "critest")]
        # (not "N passed, N failed": CI's log reader takes that for a test runner's summary)
        print(f"cri: {kind} on {handler}: Passed {sel.count('pass')}, Failed {sel.count('fail')}, Skipped {sel.count('skip')}")
    for line in notes + regressions:
        print(line)
    if update:
        with open(path, "w") as f:
            f.write("\n".join(head) + "\n")
            for name, (got, msg) in sorted(results.items()):
                old = exp.get(name)
                reason = old[1] if old and old[0] == got else msg
                f.write(f"pass\t{name}\n" if got == "pass" else f"{got}\t{name}\t{reason or 'unknown'}\n")
        print(f"updated {path}")
        return 0
    return 1 if regressions else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

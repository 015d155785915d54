#!/usr/bin/env python3
"""specs.py REPORT.json: one line per spec of critest's Ginkgo JSON report,
as make cri-test keeps and compares them:

    STATE<TAB>SPEC<TAB>MESSAGE

STATE is passed, failed or skipped (Ginkgo's panicked, interrupted,
aborted and timedout count as failed); SPEC the spec's full name (its
containers' texts and its own, space-separated, as Ginkgo prints it);
MESSAGE, for a spec that failed or skipped itself, the first lines of
its failure or skip message on one line. Specs the suite's own filter
leaves out (the benchmarks) are not listed.
"""
import json, re, sys

FAILED = {"failed", "panicked", "interrupted", "aborted", "timedout"}


def one_line(msg, limit=400):
    msg = re.sub(r"\s+", " ", msg).strip()
    return msg if len(msg) <= limit else msg[: limit - 3] + "..."


def main(path):
    with open(path) as f:
        suites = json.load(f)
    rows = []
    for suite in suites:
        for s in suite["SpecReports"]:
            if s["LeafNodeType"] != "It":
                continue
            state = "failed" if s["State"] in FAILED else s["State"]
            failure = s.get("Failure") or {}
            msg = failure.get("Message", "")
            if state == "skipped" and not msg:
                continue  # filtered out before it ran
            name = " ".join(s["ContainerHierarchyTexts"] + [s["LeafNodeText"]])
            rows.append((name, state, one_line(msg) if state != "passed" else ""))
    for name, state, msg in sorted(rows):
        print(f"{state}\t{name}\t{msg}")


if __name__ == "__main__":
    main(sys.argv[1])

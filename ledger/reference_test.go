package ledger

import (
	"os"
	"strings"
	"testing"
)

// testdata/reference.jsonl is written by hand in the exact bytes the
// TypeScript reference writes (JSON.stringify of {phase, ...entry}): raw
// "<&>" and U+2028, "\u0007" for a control character, a legacy intent
// without attemptId, a torn row (the golden one of contract section 13),
// an outcome killed by a signal.
func TestReadsReferenceRowsAndWritesThemByteForByte(t *testing.T) {
	const path = "testdata/reference.jsonl"
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(raw), "\n")
	res := mustScan(t, path)
	if len(res.Intents) != 3 || len(res.Outcomes) != 3 || len(res.Torn) != 1 {
		t.Fatalf("intents %d outcomes %d torn %d", len(res.Intents), len(res.Outcomes), len(res.Torn))
	}
	for _, in := range res.Intents {
		if got := intentLine(t, in.Intent); got != lines[in.At.Line-1] {
			t.Errorf("line %d re-encoded\n%s\nwant\n%s", in.At.Line, got, lines[in.At.Line-1])
		}
	}
	for _, o := range res.Outcomes {
		if got := recordLine(t, o.Record); got != lines[o.At.Line-1] {
			t.Errorf("line %d re-encoded\n%s\nwant\n%s", o.At.Line, got, lines[o.At.Line-1])
		}
	}
	torn, err := appendTornRow(nil, mustFragment(t, &res.Torn[0]), res.Torn[0].RecoveredAt)
	if err != nil || string(torn) != lines[res.Torn[0].At.Line-1] {
		t.Errorf("torn row re-encoded\n%s\nwant\n%s", torn, lines[res.Torn[0].At.Line-1])
	}

	// Pairing: the two attempts with outcomes are resolved; the legacy
	// intent is the one orphan.
	if len(res.Orphans) != 1 || res.Orphans[0].HasAttemptID || res.Orphans[0].IdempotencyKey != "legacy-key" {
		t.Fatalf("orphans %+v", res.Orphans)
	}
	killed := res.Outcomes[1].Record
	if killed.Outcome != OutcomeTimeout || killed.ExitCode != nil || killed.Signal == nil || *killed.Signal != "SIGKILL" {
		t.Fatalf("killed outcome %+v", killed)
	}
	if wd := res.Intents[1].Workdir; wd != "/tmp/rulvar-exec-<&>\a\u2028" {
		t.Fatalf("workdir %q", wd)
	}
	if res.Intents[0].StartedAt.Time().UnixMilli() != 1755000000123 {
		t.Fatal("startedAt")
	}
}

func mustFragment(t *testing.T, a *TornArtifact) []byte {
	t.Helper()
	b, err := a.Fragment()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

package ledger

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func intentFor(key, attempt string, started Millis) Intent {
	return Intent{
		IdempotencyKey: key,
		RunID:          "run-1",
		SpanID:         "span-" + key,
		Tool:           "charge",
		ArgsHash:       strings.Repeat("ab", 32),
		Executor:       "subprocess",
		Workdir:        "/tmp/rulvar-exec-" + key,
		StartedAt:      started,
		AttemptID:      attempt,
	}
}

func recordFor(in Intent, outcome Outcome) Record {
	code := 0
	if outcome != OutcomeOK {
		code = 1
	}
	return Record{Intent: in, DurationMs: 12, Outcome: outcome, ExitCode: &code}
}

func intentLine(t testing.TB, in Intent) string {
	t.Helper()
	b, err := appendIntentRow(nil, &in)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func recordLine(t testing.TB, r Record) string {
	t.Helper()
	b, err := appendRecordRow(nil, &r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// writeLedger writes content to a fresh 0600 file and returns its path.
func writeLedger(t testing.TB, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "effects.jsonl")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func mustScan(t testing.TB, path string, opts ...ScanOption) *ScanResult {
	t.Helper()
	res, err := Scan(path, opts...)
	if err != nil {
		t.Fatalf("Scan: %v", err)
	}
	return res
}

func corruptionOf(t testing.TB, err error) *CorruptionError {
	t.Helper()
	var ce *CorruptionError
	if !errors.As(err, &ce) {
		t.Fatalf("want *CorruptionError, got %T %v", err, err)
	}
	return ce
}

func mustOpen(t testing.TB, path string, opts ...Option) *JSONL {
	t.Helper()
	l, err := Open(path, opts...)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func mustIntent(t testing.TB, l *JSONL, in Intent) {
	t.Helper()
	if err := l.Intent(context.Background(), in); err != nil {
		t.Fatalf("Intent: %v", err)
	}
}

func readFile(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func lines(res *ScanResult) (corrupt []int) {
	for _, c := range res.Corrupt {
		corrupt = append(corrupt, c.Line)
	}
	return corrupt
}

func attemptIDs(rows []ScannedIntent) []string {
	var ids []string
	for _, r := range rows {
		ids = append(ids, r.AttemptID)
	}
	return ids
}

func errorsAs(err error, target any) bool { return errors.As(err, target) }

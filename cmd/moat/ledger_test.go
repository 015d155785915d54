package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/ledger"
)

func runLedger(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := ledgerCmd(args, &out, &errb)
	return code, out.String(), errb.String()
}

func testIntent(key, attempt string) ledger.Intent {
	return ledger.Intent{
		IdempotencyKey: key, RunID: "run-7", SpanID: "span-" + key, Tool: "charge",
		ArgsHash: strings.Repeat("c", 64), Executor: "native", Workdir: "/tmp/moat-" + key,
		StartedAt: 1755000000123, AttemptID: attempt,
	}
}

// writeLedger appends the intents, and outcomes for those listed in done,
// through the real JSONL ledger.
func writeLedger(t *testing.T, dir, name string, intents []ledger.Intent, done map[string]bool) string {
	t.Helper()
	path := filepath.Join(dir, name)
	l, err := ledger.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	for _, in := range intents {
		if err := l.Intent(ctx, in); err != nil {
			t.Fatal(err)
		}
		if done[in.AttemptID] {
			code := 0
			if err := l.Record(ctx, ledger.Record{Intent: in, DurationMs: 3, Outcome: ledger.OutcomeOK, ExitCode: &code}); err != nil {
				t.Fatal(err)
			}
		}
	}
	return path
}

func TestLedgerScanClean(t *testing.T) {
	p := writeLedger(t, t.TempDir(), "a.jsonl", []ledger.Intent{testIntent("k1", "a1")}, map[string]bool{"a1": true})
	code, out, errOut := runLedger("scan", p)
	if code != 0 || !strings.Contains(out, "1 intents, 1 outcomes, 0 orphaned intents") || !strings.Contains(out, "nothing to reconcile") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
}

func TestLedgerScanOrphansListLookupSet(t *testing.T) {
	legacy := testIntent("k2", "")
	p := writeLedger(t, t.TempDir(), "a.jsonl", []ledger.Intent{testIntent("k1", "a1"), legacy}, nil)
	code, out, _ := runLedger("scan", p)
	t.Logf("moat ledger scan %s:\n%s", p, out)
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s", code, out)
	}
	for _, want := range []string{
		"orphaned intent 1 of 2 at " + p + ":1 (byte 0)",
		"idempotency key  k1", "run id           run-7", "tool             charge",
		"argsHash         " + strings.Repeat("c", 64), "span id          span-k1", "workdir          /tmp/moat-k1",
		"startedAt        1755000000123 (2025-08-12T12:00:00.123Z)", "attemptId        a1",
		"attemptId        (none: legacy row",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestLedgerScanMergesFiles(t *testing.T) {
	dir := t.TempDir()
	in := testIntent("k1", "a1")
	a := writeLedger(t, dir, "effects.w1.jsonl", []ledger.Intent{in}, nil)
	b := filepath.Join(dir, "effects.w2.jsonl")
	l, err := ledger.Open(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Record(context.Background(), ledger.Record{Intent: in, Outcome: ledger.OutcomeError}); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if code, out, _ := runLedger("scan", a); code != 1 {
		t.Fatalf("alone the intent is an orphan: exit %d\n%s", code, out)
	}
	if code, out, _ := runLedger("scan", a, b); code != 0 {
		t.Fatalf("merged, the outcome resolves it: exit %d\n%s", code, out)
	}
}

func TestLedgerScanCorrupt(t *testing.T) {
	dir := t.TempDir()
	good := writeLedger(t, dir, "good.jsonl", []ledger.Intent{testIntent("k1", "a1")}, nil)
	bad := filepath.Join(dir, "bad.jsonl")
	content, _ := os.ReadFile(good)
	if err := os.WriteFile(bad, append(content, "{malformed}\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runLedger("scan", bad)
	if code != 2 || !strings.Contains(errOut, "1 corrupt line(s); first at line 2") || !strings.Contains(out, "do not reconcile") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	// Tolerated, the lines are listed as data, and the status stays 2.
	code, out, _ = runLedger("scan", "--tolerate-corrupt", bad)
	if code != 2 || !strings.Contains(out, "corrupt line "+bad+":2") || !strings.Contains(out, "1 orphaned intents") {
		t.Fatalf("tolerated: exit %d\n%s", code, out)
	}
}

func TestLedgerScanUsageAndUnreadable(t *testing.T) {
	for _, args := range [][]string{nil, {"bogus"}, {"scan"}, {"scan", "--nope", "x"}} {
		if code, _, _ := runLedger(args...); code != 64 {
			t.Errorf("%q: exit %d, want 64", args, code)
		}
	}
	if code, out, _ := runLedger("--help"); code != 0 || !strings.Contains(out, "usage: moat ledger scan") {
		t.Errorf("--help: exit %d", code)
	}
	code, _, errOut := runLedger("scan", filepath.Join(t.TempDir(), "missing.jsonl"))
	if code != 66 || !strings.Contains(errOut, "missing.jsonl") {
		t.Fatalf("missing file: exit %d, %s", code, errOut)
	}
}

func TestLedgerScanJSON(t *testing.T) {
	dir := t.TempDir()
	p := writeLedger(t, dir, "a.jsonl", []ledger.Intent{testIntent("k<&>1", "a1"), testIntent("k2", "a2")}, map[string]bool{"a2": true})
	f, _ := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"phase":"intent","idempot`)
	f.Close()
	// Flags may follow the files.
	code, out, errOut := runLedger("scan", p, "--json")
	if code != 1 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(out, `"idempotencyKey": "k<&>1"`) {
		t.Fatalf("JSON must not HTML-escape:\n%s", out)
	}
	var rep struct {
		Status   string `json:"status"`
		ExitCode int    `json:"exitCode"`
		Files    []struct {
			Path, Status string
		} `json:"files"`
		Counts          map[string]int   `json:"counts"`
		OrphanedIntents []map[string]any `json:"orphanedIntents"`
		Corrupt         []map[string]any `json:"corrupt"`
		TornArtifacts   []map[string]any `json:"tornArtifacts"`
		TornTails       []map[string]any `json:"tornTails"`
	}
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		t.Fatalf("decode: %v\n%s", err, out)
	}
	if rep.Status != "orphans" || rep.ExitCode != 1 || len(rep.Files) != 1 || rep.Files[0].Status != "ok" {
		t.Fatalf("report %+v", rep)
	}
	wantCounts := map[string]int{"intents": 2, "outcomes": 1, "orphanedIntents": 1, "corruptLines": 0, "tornArtifacts": 0, "tornTails": 1}
	for k, v := range wantCounts {
		if rep.Counts[k] != v {
			t.Errorf("counts[%s] = %d, want %d", k, rep.Counts[k], v)
		}
	}
	o := rep.OrphanedIntents[0]
	want := map[string]any{
		"idempotencyKey": "k<&>1", "runId": "run-7", "spanId": "span-k<&>1", "tool": "charge",
		"argsHash": strings.Repeat("c", 64), "executor": "native", "workdir": "/tmp/moat-k<&>1",
		"startedAt": 1755000000123.0, "startedAtRFC3339": "2025-08-12T12:00:00.123Z", "attemptId": "a1",
		"file": p, "line": 1.0, "offset": 0.0,
	}
	if len(o) != len(want) {
		t.Errorf("orphan has members %v", o)
	}
	for k, v := range want {
		if o[k] != v {
			t.Errorf("orphan[%s] = %v, want %v", k, o[k], v)
		}
	}
	if len(rep.TornTails) != 1 || rep.TornTails[0]["line"] != 4.0 || !strings.Contains(rep.TornTails[0]["preview"].(string), "idempot") {
		t.Errorf("torn tails %v", rep.TornTails)
	}
	if rep.Corrupt == nil || len(rep.Corrupt) != 0 || rep.TornArtifacts == nil {
		t.Errorf("empty lists must be [] not null")
	}
}

// TestLedgerScanJSONKeepsTheLoneHighSurrogate: a corrupt line and a torn
// tail whose preview ends inside an emoji show, in --json, the reference's
// preview: 120 UTF-16 units, the last the lone high surrogate "\ud83d"
// (its loadEffectLedger on the same file, through JSON.stringify).
func TestLedgerScanJSONKeepsTheLoneHighSurrogate(t *testing.T) {
	line := "{" + strings.Repeat("x", 118) + "😀 rest}"
	p := filepath.Join(t.TempDir(), "emoji.jsonl")
	if err := os.WriteFile(p, []byte(line+"\n"+line), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runLedger("scan", "--tolerate-corrupt", "--json", p)
	if code != 2 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	reference := `"preview": "{` + strings.Repeat("x", 118) + `\ud83d"`
	if n := strings.Count(out, reference); n != 2 {
		t.Fatalf("%d previews are the reference's %s:\n%s", n, reference, out)
	}
}

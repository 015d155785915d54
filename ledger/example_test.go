package ledger_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/ledger"
)

// A provider given a ledger (native.WithLedger and the others) writes each
// call's intent before anything runs and its outcome after. Scan reads the
// file back: an intent without an outcome is an orphan, a call that may have
// had its effect, to reconcile by its idempotency key before any retry.
func ExampleScan() {
	dir, err := os.MkdirTemp("", "ledger-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "effects.jsonl")

	l, err := ledger.Open(path) // created 0600; the reference's format, row for row
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	hash, _ := executor.HashArgs(json.RawMessage(`{"a":6,"b":7}`))
	call := func(key, attempt string) ledger.Intent {
		return ledger.Intent{IdempotencyKey: key, RunID: "run-1", SpanID: "span-" + attempt, Tool: "multiply",
			ArgsHash: hash, Executor: "native", Workdir: "/tmp/rulvar-exec-multiply-" + attempt, StartedAt: 1000, AttemptID: attempt}
	}
	done := call("key-1", "a1")
	if err := l.Intent(ctx, done); err != nil {
		log.Fatal(err)
	}
	exit := 0
	if err := l.Record(ctx, ledger.Record{Intent: done, DurationMs: 12, Outcome: ledger.OutcomeOK, ExitCode: &exit}); err != nil {
		log.Fatal(err)
	}
	if err := l.Intent(ctx, call("key-2", "a2")); err != nil { // and the host died before the outcome
		log.Fatal(err)
	}
	l.Close()

	res, err := ledger.Scan(path) // fails closed on a corrupt line (ledger.Tolerate lists them instead)
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range res.Outcomes {
		fmt.Printf("%s %s: %s, exit %d\n", r.Tool, r.IdempotencyKey, r.Outcome, *r.ExitCode)
	}
	for _, o := range res.Orphans {
		fmt.Printf("%s %s: no outcome (line %d), reconcile before a retry\n", o.Tool, o.IdempotencyKey, o.At.Line)
	}
	// Output:
	// multiply key-1: ok, exit 0
	// multiply key-2: no outcome (line 3), reconcile before a retry
}

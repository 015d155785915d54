// Package ledger is the two-phase effect ledger of the Rulvar executor
// contract (section 8): an intent row is written before a tool runs and an
// outcome row after it, joined by a per-dispatch attempt id, so that a host
// that crashed between the two can find every effect that may have happened
// (an orphaned intent) and reconcile it by its idempotency key.
//
// The row types mirror the reference's JSON field for field; a JSONL ledger
// written here is read by the TypeScript reference and the other way round.
package ledger

import "time"

// Millis is a wall-clock instant or a duration in milliseconds, stored as the
// JSON number the reference writes (JS Date.now()). It is a float64 because a
// foreign writer may record any JSON number and the scanner must admit it.
type Millis float64

// MillisOf converts a time to Millis, truncated to whole milliseconds as
// Date.now() is.
func MillisOf(t time.Time) Millis { return Millis(t.UnixMilli()) }

// Time converts m, an instant, back to a time.Time.
func (m Millis) Time() time.Time { return time.UnixMilli(int64(m)) }

// Outcome is the class of a finished dispatch as the ledger records it.
type Outcome string

// The three outcomes of the contract (section 1.5): ok only on success,
// timeout only for the wall-clock stop, error for everything else.
const (
	OutcomeOK      Outcome = "ok"
	OutcomeError   Outcome = "error"
	OutcomeTimeout Outcome = "timeout"
)

// Intent is the row written before a dispatch spawns anything
// (ToolEffectIntent). Field order is the reference writer's member order.
type Intent struct {
	IdempotencyKey string `json:"idempotencyKey"`
	RunID          string `json:"runId"`
	SpanID         string `json:"spanId"`
	Tool           string `json:"tool"`
	ArgsHash       string `json:"argsHash"`
	Executor       string `json:"executor"`
	Workdir        string `json:"workdir"`
	StartedAt      Millis `json:"startedAt"`
	// AttemptID is a UUID v4 unique per dispatch attempt; empty only in
	// legacy or third-party rows, and then omitted from the JSON.
	AttemptID string `json:"attemptId,omitempty"`
}

// Record is the row written after a dispatch (ToolEffectRecord): the intent's
// fields plus what happened.
type Record struct {
	Intent
	DurationMs Millis  `json:"durationMs"`
	Outcome    Outcome `json:"outcome"`
	// ExitCode is nil when the process was killed by a signal or never ran.
	ExitCode *int `json:"exitCode"`
	// Signal is the name of the signal that ended the process ("SIGKILL"),
	// nil when none did.
	Signal *string `json:"signal"`
}

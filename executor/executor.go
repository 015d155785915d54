// Package executor is moat's provider seam: the Rulvar isolated-executor
// contract (tool-program protocol, error codes, idempotency keys, argsHash
// and the two-phase effect ledger calls) ported to Go, and the one dispatch
// pipeline every provider (subprocess, native, container) runs on, so each
// of them meets the contract by construction and differs only in how the
// child is started and stopped.
//
// A dispatch, end to end (contract section 5.7):
//
//	validate the request and resolve the command   (typed config/spawn errors; nothing written)
//	create a fresh 0700 workdir                    (removed on every path)
//	ledger intent, awaited                         (failure refuses the dispatch: code ledger)
//	build the replaced environment, start the child through the provider's Launcher
//	write {"tool","args","idempotencyKey"} to stdin, no newline, then EOF
//	capture stdout (capped; reaching the cap kills) and stderr (capped, tail kept)
//	timeout / context cancel -> SIGTERM to the whole tree, SIGKILL after the grace
//	classify: timeout > aborted > output-cap (first to fire) > exit > protocol
//	ledger record (also on failure), workdir removed
package executor

import (
	"context"
	"encoding/json"
)

// Request is one tool call handed to a provider (IsolatedExecRequest).
type Request struct {
	// Executor is the tag the tool declared ("subprocess" or "container"
	// for the reference's tools). It is recorded in the ledger as given,
	// whatever it is, as the reference records it; empty means "subprocess".
	Executor string
	// Tool is the tool's contract name. Any UTF-8 string dispatches, as in
	// the reference (github.create_issue, my.tool), but one holding a '/'
	// or a NUL byte, which would take its workdir's path out of the
	// workdir base (Registry.Bind applies the reference's definition-time
	// rule, ^[a-zA-Z0-9_-]{1,64}$).
	Tool string
	// Args are the validated call arguments, any JSON value.
	Args json.RawMessage
	// Spec is the tool's executorSpec, passed through verbatim: for the
	// reference executors {"command": "...", "args": ["..."]}. Nil means none.
	Spec json.RawMessage
	// RunID, SpanID and AgentType identify the call in the engine's run.
	RunID     string
	SpanID    string
	AgentType string
	// IdempotencyKey is the key derived for this call (DeriveKey).
	IdempotencyKey string
}

// Provider dispatches one request and returns the tool's JSON result, or an
// error: an *Error with one of the contract's codes for every failure of the
// tool or the sandbox, or a raw error from a caller-supplied callback
// (credentials, sandbox prefix) as the contract requires.
type Provider interface {
	Dispatch(ctx context.Context, req *Request) (json.RawMessage, error)
}

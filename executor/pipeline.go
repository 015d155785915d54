package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/moat-sandbox/moat/executor/internal/workdir"
	"github.com/moat-sandbox/moat/ledger"
)

// Dispatch runs one request through the contract's sequence (5.7) with the
// given launcher starting the child.
func (p *Pipeline) Dispatch(ctx context.Context, req *Request, launcher Launcher) (json.RawMessage, error) {
	cfg := &p.cfg
	// 1. Validate and resolve: every refusal here happens before any
	// workdir or ledger row exists.
	args, err := checkRequest(req)
	if err != nil {
		return nil, err
	}
	command, toolArgs, err := resolveCommand(req, cfg)
	if err != nil {
		return nil, err
	}
	argsHash, err := HashArgs(args)
	if err != nil {
		return nil, newError(CodeConfig, err, "tool '%s' was not dispatched: %v", req.Tool, err)
	}

	// 2. The fresh workdir, removed on every path from here on (a
	// killed process's by the next provider's sweep, NewPipeline).
	wd, err := workdir.Create(cfg.WorkdirBase, cfg.WorkdirPrefix+req.Tool+"-", cfg.Logger)
	if err != nil {
		return nil, newError(CodeConfig, err, "tool '%s' was not dispatched: create its workdir under %q: %v; make the workdir base writable or choose another", req.Tool, cfg.WorkdirBase, err)
	}
	defer wd.Remove(cfg.Logger.With("provider", cfg.Name))
	workdir := wd.Path

	// 3. The intent row, awaited before anything is spawned.
	start := cfg.Now()
	intent := ledger.Intent{
		IdempotencyKey: req.IdempotencyKey,
		RunID:          req.RunID,
		SpanID:         req.SpanID,
		Tool:           req.Tool,
		ArgsHash:       argsHash,
		Executor:       executorTag(req),
		Workdir:        workdir,
		StartedAt:      ledger.MillisOf(start),
		AttemptID:      uuid.NewString(),
	}
	if il, ok := cfg.Ledger.(IntentLedger); ok {
		if err := il.Intent(ctx, intent); err != nil {
			return nil, newError(CodeLedger, err, "%stool '%s' was not dispatched: the two-phase ledger intent write failed (%v)", cfg.Messages.Prefix, req.Tool, err)
		}
	}

	// 4. The body: every failure is captured and recorded.
	result, exit, bodyErr := p.body(ctx, req, launcher, command, toolArgs, args, workdir, intent.AttemptID)

	// 5. The outcome row, also on failure.
	if cfg.Ledger != nil {
		rec := ledger.Record{
			Intent:     intent,
			DurationMs: ledger.Millis(cfg.Now().Sub(start).Milliseconds()),
			Outcome:    outcomeOf(bodyErr),
			ExitCode:   exit.code,
			Signal:     exit.signal,
		}
		if err := cfg.Ledger.Record(ctx, rec); err != nil {
			msg := fmt.Sprintf("%stool '%s' outcome was not recorded: the ledger record write failed (%v)", cfg.Messages.Prefix, req.Tool, err)
			if bodyErr != nil {
				msg += fmt.Sprintf("; the dispatch itself had already failed (%v)", bodyErr)
			}
			return nil, &Error{Code: CodeLedger, Message: msg, Err: errors.Join(err, bodyErr)}
		}
	}
	if bodyErr != nil {
		return nil, bodyErr
	}
	return result, nil
}

// observed is the exit as the ledger records it: null code when a signal
// ended the child or it never ran.
type observed struct {
	code   *int
	signal *string
}

func (p *Pipeline) body(ctx context.Context, req *Request, launcher Launcher, command string, toolArgs []string, args json.RawMessage, workdir, attemptID string) (json.RawMessage, observed, error) {
	cfg := &p.cfg
	env, err := buildEnv(ctx, req, cfg.AllowEnv, cfg.LookupEnv, cfg.Credentials)
	if err != nil {
		return nil, observed{}, err
	}
	l := &Launch{Request: req, AttemptID: attemptID, Path: command, Args: toolArgs, Env: env, Workdir: workdir}
	if cfg.Sandbox != nil {
		prefix, err := cfg.Sandbox(workdir, req)
		if err != nil {
			return nil, observed{}, err
		}
		if len(prefix) > 0 {
			l.Path = prefix[0]
			l.Args = append(append(append([]string(nil), prefix[1:]...), command), toolArgs...)
		}
	}
	if cfg.ResolveCommand {
		// After the intent, as the reference's spawn fails: the ledger
		// shows the dispatch that was attempted, with an error outcome.
		path, _ := envValue(env, "PATH")
		resolved, err := lookPath(l.Path, path, workdir)
		if err != nil {
			return nil, observed{}, spawnError(req.Tool, l.Path, err)
		}
		l.Path = resolved
	}
	run, err := p.supervise(ctx, l, launcher, stdinDocument(req, args))
	if err != nil {
		return nil, observed{}, err
	}
	obs := run.observed()
	if err := p.classify(req, run); err != nil {
		return nil, obs, err
	}
	result, err := ParseResult(run.stdout, req.Tool)
	return result, obs, err
}

// classify applies the contract's precedence (1.5): the sticky stop reason
// first, then the provider's own diagnosis, then the exit status.
func (p *Pipeline) classify(req *Request, r *run) error {
	pre := p.cfg.Messages.Prefix
	switch r.reason {
	case CodeTimeout:
		return newError(CodeTimeout, nil, "%stool '%s' exceeded %sms and was killed", pre, req.Tool, esNumber(millis(p.cfg.Timeout)))
	case CodeAborted:
		return newError(CodeAborted, r.cause, "%stool '%s' was cancelled", pre, req.Tool)
	case CodeOutputCap:
		return newError(CodeOutputCap, nil, "%stool '%s' wrote more than %d bytes and was killed", pre, req.Tool, p.cfg.MaxOutputBytes)
	}
	if r.status.Err != nil {
		return r.status.Err
	}
	if r.status.Exited() && r.status.Code == 0 {
		return nil
	}
	if p.cfg.Diagnose != nil {
		if e := p.cfg.Diagnose(req, r.status, r.stderr); e != nil {
			return e
		}
	}
	msg := fmt.Sprintf("%stool '%s' exited ", pre, req.Tool)
	switch {
	case r.status.Exited():
		msg += fmt.Sprint(r.status.Code)
	case p.cfg.Messages.OmitExitSignal:
		msg += "null"
	default:
		msg += fmt.Sprintf("null (signal %s)", signalName(r.status.Signal))
	}
	if r.status.Note != "" {
		msg += " (" + r.status.Note + ")"
	}
	if tail := tailUTF16(trimJS(decodeLossy(r.stderr)), 500); tail != "" {
		msg += ": " + tail
	}
	return &Error{Code: CodeExit, Message: msg}
}

// outcomeOf maps a body error to the ledger's outcome: ok only on success,
// timeout only for the wall-clock stop, error for everything else.
func outcomeOf(err error) ledger.Outcome {
	switch {
	case err == nil:
		return ledger.OutcomeOK
	case CodeOf(err) == CodeTimeout:
		return ledger.OutcomeTimeout
	default:
		return ledger.OutcomeError
	}
}

func executorTag(req *Request) string {
	if req.Executor == "" {
		return "subprocess"
	}
	return req.Executor
}

package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/ledger"
)

// check is one named conformance check.
type check struct {
	id, name string
	run      func(k *kit)
}

// checks are the reference's e1 to e13 (contract 9.3), in order.
var checks = []check{
	{"e1", "round-trips the protocol", func(k *kit) {
		res := k.ok(k.provider(Config{}), k.request("echo_tool", `{"behavior":"echo","payload":{"hello":"world","n":7}}`))
		var got struct {
			Tool    string          `json:"tool"`
			Payload json.RawMessage `json:"payload"`
		}
		k.decode(res, &got)
		if got.Tool != "echo_tool" {
			k.fatalf("result tool = %q, want echo_tool", got.Tool)
		}
		if string(got.Payload) != `{"hello":"world","n":7}` {
			k.fatalf("payload = %s, want {\"hello\":\"world\",\"n\":7}", got.Payload)
		}
	}},
	{"e2", "scrubs the host environment", func(k *kit) {
		k.t.Setenv("RV_CONFORMANCE_SECRET", "sk-live-should-never-reach-a-tool")
		if v := k.readEnv(Config{}, "RV_CONFORMANCE_SECRET", nil); v != nil {
			k.fatalf("host secret reached the tool: %q", *v)
		}
	}},
	{"e3", "passes allowlisted variables", func(k *kit) {
		k.t.Setenv("RV_CONFORMANCE_ALLOWED", "passed-through")
		v := k.readEnv(Config{AllowEnv: []string{"RV_CONFORMANCE_ALLOWED"}}, "RV_CONFORMANCE_ALLOWED", nil)
		if v == nil || *v != "passed-through" {
			k.fatalf("allowlisted variable = %v, want passed-through", v)
		}
	}},
	{"e4", "injects minted credentials", func(k *kit) {
		creds := func(context.Context, *executor.Request) ([]executor.Credential, error) {
			return []executor.Credential{{Name: "RV_CRED", Value: "minted-token"}}, nil
		}
		v := k.readEnv(Config{Credentials: creds}, "RV_CRED", nil)
		if v == nil || *v != "minted-token" {
			k.fatalf("credential = %v, want minted-token", v)
		}
	}},
	{"e5", "exposes the idempotency key", func(k *kit) {
		v := k.readEnv(Config{}, "RULVAR_IDEMPOTENCY_KEY", func(r *executor.Request) { r.IdempotencyKey = "key-abc" })
		if v == nil || *v != "key-abc" {
			k.fatalf("RULVAR_IDEMPOTENCY_KEY = %v, want key-abc", v)
		}
	}},
	{"e6", "kills on timeout", func(k *kit) {
		start := time.Now()
		err := k.fail(k.provider(Config{Timeout: 300 * time.Millisecond}), k.request("slow", `{"behavior":"sleep","ms":100000}`))
		k.code(err, executor.CodeTimeout)
		if d := time.Since(start); d >= 5*time.Second {
			k.fatalf("the timed-out dispatch took %v, want under 5s", d)
		}
	}},
	{"e7", "kills on output cap", func(k *kit) {
		err := k.fail(k.provider(Config{MaxOutputBytes: 32768}), k.request("flood", `{"behavior":"huge","chunks":256}`))
		k.code(err, executor.CodeOutputCap)
	}},
	{"e8", "reports a non-zero exit with the stderr tail", func(k *kit) {
		err := k.fail(k.provider(Config{}), k.request("crasher", `{"behavior":"exit","code":3,"stderr":"boom-diagnostic"}`))
		k.code(err, executor.CodeExit)
		if !contains(err.Error(), "boom-diagnostic") {
			k.fatalf("exit message %q does not carry the stderr tail boom-diagnostic", err)
		}
	}},
	{"e9", "rejects a non-JSON result", func(k *kit) {
		err := k.fail(k.provider(Config{}), k.request("sloppy", `{"behavior":"garbage"}`))
		k.code(err, executor.CodeProtocol)
	}},
	{"e10", "gives each call a fresh workdir and removes it", func(k *kit) {
		mem := &ledger.Memory{}
		p := k.provider(Config{Ledger: mem})
		for i := range 2 {
			res := k.ok(p, k.request("w", `{"behavior":"workdir"}`))
			var got struct{ Before int }
			k.decode(res, &got)
			if got.Before != 0 {
				k.fatalf("call %d saw %d entries in its workdir, want 0", i+1, got.Before)
			}
		}
		for _, r := range mem.Records() {
			if _, err := os.Stat(r.Workdir); !errors.Is(err, os.ErrNotExist) {
				k.fatalf("workdir %s survived the dispatch (stat: %v)", r.Workdir, err)
			}
		}
	}},
	{"e11", "records ok and error outcomes", func(k *kit) {
		mem := &ledger.Memory{}
		p := k.provider(Config{Ledger: mem})
		req := k.request("ok_tool", `{"behavior":"echo","payload":1}`)
		req.IdempotencyKey = "k-ok"
		k.ok(p, req)
		req = k.request("bad_tool", `{"behavior":"exit","code":1}`)
		req.IdempotencyKey = "k-bad"
		k.fail(p, req)
		rows := mem.Records()
		if len(rows) != 2 {
			k.fatalf("%d outcome rows, want 2", len(rows))
		}
		if rows[0].Outcome != ledger.OutcomeOK || rows[0].IdempotencyKey != "k-ok" {
			k.fatalf("ok_tool row = %+v, want outcome ok and key k-ok", rows[0])
		}
		if rows[1].Outcome != ledger.OutcomeError || rows[1].ExitCode == nil || *rows[1].ExitCode != 1 {
			k.fatalf("bad_tool row = %+v, want outcome error and exitCode 1", rows[1])
		}
		for _, r := range rows {
			if len(r.ArgsHash) != 64 {
				k.fatalf("argsHash %q is not 64 characters", r.ArgsHash)
			}
		}
	}},
	{"e12", "records a protocol failure with exit code 0", func(k *kit) {
		mem := &ledger.Memory{}
		req := k.request("sloppy", `{"behavior":"garbage"}`)
		req.IdempotencyKey = "k-proto"
		k.code(k.fail(k.provider(Config{Ledger: mem}), req), executor.CodeProtocol)
		rows := mem.Records()
		if len(rows) != 1 || rows[0].Outcome != ledger.OutcomeError || rows[0].ExitCode == nil || *rows[0].ExitCode != 0 {
			k.fatalf("rows = %+v, want one row with outcome error and exitCode 0", rows)
		}
	}},
	{"e13", "writes the intent strictly before the effect", func(k *kit) {
		l := &probeLedger{}
		req := k.request("effector", `{"behavior":"workdir"}`)
		req.IdempotencyKey = "k-orphan"
		res := k.ok(k.provider(Config{Ledger: l}), req)
		var got struct{ Before int }
		k.decode(res, &got)
		if got.Before != 0 {
			k.fatalf("before = %d, want 0", got.Before)
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		if len(l.intents) != 1 {
			k.fatalf("%d intents, want 1", len(l.intents))
		}
		in := l.intents[0]
		if !l.emptyAtIntent {
			k.fatalf("the workdir was not empty when the intent was written: the intent did not precede the effect")
		}
		if in.IdempotencyKey != "k-orphan" || in.Tool != "effector" || len(in.ArgsHash) != 64 || in.RunID != "conf-run" || in.SpanID != "conf-span" {
			k.fatalf("intent = %+v, want key k-orphan, tool effector, a 64-char argsHash, run conf-run, span conf-span", in)
		}
		if l.records != 1 {
			k.fatalf("record called %d times, want 1", l.records)
		}
	}},
	{"e13j", "writes the intent strictly before the effect in a JSONL ledger", func(k *kit) {
		path := filepath.Join(k.t.TempDir(), "effects.jsonl")
		jl, err := ledger.Open(path)
		if err != nil {
			k.fatalf("open the JSONL ledger: %v", err)
		}
		defer jl.Close()
		l := &jsonlProbe{JSONL: jl}
		req := k.request("effector", `{"behavior":"workdir"}`)
		req.IdempotencyKey = "k-orphan"
		res := k.ok(k.provider(Config{Ledger: l}), req)
		var got struct{ Before int }
		k.decode(res, &got)
		if got.Before != 0 || !l.emptyAtIntent {
			k.fatalf("before = %d, workdir empty at intent = %v: the intent did not precede the effect", got.Before, l.emptyAtIntent)
		}
		scan, err := ledger.Scan(path)
		if err != nil {
			k.fatalf("scan the ledger the dispatch wrote: %v", err)
		}
		if len(scan.Intents) != 1 || len(scan.Outcomes) != 1 || len(scan.Orphans) != 0 {
			k.fatalf("scan: %d intents, %d outcomes, %d orphans; want 1, 1, 0", len(scan.Intents), len(scan.Outcomes), len(scan.Orphans))
		}
		in, out := scan.Intents[0], scan.Outcomes[0]
		if in.IdempotencyKey != "k-orphan" || in.Tool != "effector" || len(in.ArgsHash) != 64 || in.AttemptID == "" || out.AttemptID != in.AttemptID || out.Outcome != ledger.OutcomeOK {
			k.fatalf("rows: intent %+v, outcome %+v", in.Intent, out.Record)
		}
	}},
}

// jsonlProbe notes whether the workdir was empty when the JSONL ledger's
// intent was written.
type jsonlProbe struct {
	*ledger.JSONL
	emptyAtIntent bool
}

func (l *jsonlProbe) Intent(ctx context.Context, i ledger.Intent) error {
	entries, err := os.ReadDir(i.Workdir)
	l.emptyAtIntent = err == nil && len(entries) == 0
	return l.JSONL.Intent(ctx, i)
}

// probeLedger is e13's two-phase ledger: it notes whether the workdir was
// empty when the intent arrived, and drops outcomes (a simulated kill).
type probeLedger struct {
	mu            sync.Mutex
	intents       []ledger.Intent
	emptyAtIntent bool
	records       int
}

func (l *probeLedger) Intent(_ context.Context, i ledger.Intent) error {
	entries, err := os.ReadDir(i.Workdir)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.emptyAtIntent = err == nil && len(entries) == 0
	l.intents = append(l.intents, i)
	return nil
}

func (l *probeLedger) Record(context.Context, ledger.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.records++
	return nil
}

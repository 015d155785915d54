package native_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/conformance/testenv"
	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/executor/native"
	"github.com/moat-sandbox/moat/ledger"
	"github.com/moat-sandbox/moat/policies"
)

// departureProvider runs argv under the default policy, with a ledger.
func departureProvider(t *testing.T, mem *ledger.Memory, argv []string, opts ...native.Option) *native.Provider {
	t.Helper()
	pol, err := policies.Builtin("default")
	if err != nil {
		t.Fatal(err)
	}
	p, err := native.New(append([]native.Option{native.WithPolicy(pol), native.WithCommand(argv[0], argv[1:]...),
		native.WithLedger(mem), native.WithWorkdirBase(t.TempDir())}, opts...)...)
	if err != nil {
		t.Fatalf("native.New: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func departureDispatch(p *native.Provider) (json.RawMessage, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return p.Dispatch(ctx, &executor.Request{Tool: "t", Args: json.RawMessage(`{}`), RunID: "r", SpanID: "s", IdempotencyKey: "k"})
}

// TestSpawnFailureInTheSandboxIsRecordedAfterTheIntent: a command the
// sandbox cannot exec is, as the reference's spawn failure, an attempted
// dispatch: one intent, one error outcome with exitCode and signal null.
func TestSpawnFailureInTheSandboxIsRecordedAfterTheIntent(t *testing.T) {
	_ = testenv.RunAsUser(t, testenv.NobodyUID, testenv.NobodyGID) // as nobody too
	for _, cmd := range []string{"/no/such/tool", "no-such-tool-h32", "/etc/passwd"} {
		t.Run(cmd, func(t *testing.T) {
			mem := &ledger.Memory{}
			_, err := departureDispatch(departureProvider(t, mem, []string{cmd}))
			if executor.CodeOf(err) != executor.CodeSpawn || !strings.HasPrefix(err.Error(), "tool 't' could not be spawned: ") {
				t.Fatalf("err %v (code %q), want a spawn error", err, executor.CodeOf(err))
			}
			in, rows := mem.Intents(), mem.Records()
			if len(in) != 1 || len(rows) != 1 || rows[0].Outcome != ledger.OutcomeError || rows[0].ExitCode != nil || rows[0].Signal != nil {
				t.Fatalf("%d intents, outcomes %+v; the reference's one intent and one error outcome with null exit", len(in), rows)
			}
		})
	}
}

// TestOutputCapKeepsTheExitOfAToolThatExitedInTheSandbox: as in the
// reference (exitCode 0 in 5 of 5 runs), a sandboxed tool that wrote past
// the cap and exited records its own exit code, every time.
func TestOutputCapKeepsTheExitOfAToolThatExitedInTheSandbox(t *testing.T) {
	_ = testenv.RunAsUser(t, testenv.NobodyUID, testenv.NobodyGID) // as nobody too
	mem := &ledger.Memory{}
	p := departureProvider(t, mem, []string{"/bin/sh", "-c", "printf 12345"}, native.WithMaxOutputBytes(5))
	for i := range 10 {
		_, err := departureDispatch(p)
		if executor.CodeOf(err) != executor.CodeOutputCap {
			t.Fatalf("run %d: %v, want output-cap", i+1, err)
		}
		if r := mem.Records()[i]; r.ExitCode == nil || *r.ExitCode != 0 || r.Signal != nil {
			t.Fatalf("run %d: exitCode %v, signal %v; the reference's 0 and null", i+1, value(r.ExitCode), value(r.Signal))
		}
	}
}

// TestToolEnvironmentInInsertionOrder: inside the sandbox the tool's
// environment, in execve(2)'s order, is the reference's: allowlisted, then
// minted in the order given, then RULVAR_*.
func TestToolEnvironmentInInsertionOrder(t *testing.T) {
	creds := func(context.Context, *executor.Request) ([]executor.Credential, error) {
		return []executor.Credential{{Name: "ZED", Value: "1"}, {Name: "ALPHA", Value: "2"}, {Name: "MID", Value: "3"}}, nil
	}
	mem := &ledger.Memory{}
	p := departureProvider(t, mem, []string{"/bin/sh", "-c", `tr '\0' ' ' < /proc/$$/environ >&2; exit 3`},
		native.WithCredentials(creds), native.WithAllowEnv("LANG"),
		native.WithLookupEnv(func(k string) (string, bool) { return map[string]string{"LANG": "C.UTF-8"}[k], k == "LANG" }))
	_, err := departureDispatch(p)
	var names []string
	_, env, _ := strings.Cut(err.Error(), "exited 3: ")
	for _, kv := range strings.Fields(env) {
		k, _, _ := strings.Cut(kv, "=")
		names = append(names, k)
	}
	// The policy's own variables (PATH, HOME) may come first; the order of
	// the rest is the reference's.
	got := strings.Join(names, " ")
	if want := "LANG ZED ALPHA MID RULVAR_TOOL RULVAR_RUN_ID RULVAR_IDEMPOTENCY_KEY"; !strings.HasSuffix(got, want) {
		t.Fatalf("tool environment %q, want it to end %q", got, want)
	}
}

func value[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

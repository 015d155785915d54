package subprocess_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/executor/subprocess"
	"github.com/moat-sandbox/moat/ledger"
)

// sh builds a provider running /bin/sh -c script, with a private workdir
// base so each test can see what is left behind.
func sh(t *testing.T, script string, opts ...subprocess.Option) (*subprocess.Provider, string) {
	t.Helper()
	base := t.TempDir()
	all := append([]subprocess.Option{subprocess.WithCommand("/bin/sh", "-c", script), subprocess.WithWorkdirBase(base)}, opts...)
	p, err := subprocess.New(all...)
	if err != nil {
		t.Fatalf("subprocess.New: %v", err)
	}
	return p, base
}

func request(tool string) *executor.Request {
	return &executor.Request{Tool: tool, Args: json.RawMessage(`{"k":1}`), RunID: "run", SpanID: "span", IdempotencyKey: "key"}
}

func dispatch(p *subprocess.Provider, req *executor.Request) (json.RawMessage, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return p.Dispatch(ctx, req)
}

func wantCode(t *testing.T, err error, code executor.Code) *executor.Error {
	t.Helper()
	var e *executor.Error
	if !errors.As(err, &e) || e.Code != code {
		t.Fatalf("err = %v (%T), want code %q", err, err, code)
	}
	return e
}

// assertEmpty fails if a workdir survived under base.
func assertEmpty(t *testing.T, base string) {
	t.Helper()
	entries, err := os.ReadDir(base)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Fatalf("workdir base not empty after the dispatch: %v", entries)
	}
}

func TestStdinIsTheProtocolDocumentWithoutNewline(t *testing.T) {
	p, _ := sh(t, `cat > in; printf '{"len":%d}' "$(wc -c < in)"; od -An -c in | tr -d ' \n' >&2; exit 0`)
	res, err := dispatch(p, request("reader"))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"tool":"reader","args":{"k":1},"idempotencyKey":"key"}`
	if string(res) != fmt.Sprintf(`{"len":%d}`, len(want)) {
		t.Fatalf("result %s: stdin was not exactly %d bytes (no trailing newline)", res, len(want))
	}
}

func TestOutputCapBoundary(t *testing.T) {
	const limit = 4096
	for _, tc := range []struct {
		n    int
		fail bool
	}{{limit - 1, false}, {limit, true}, {limit * 10, true}} {
		t.Run(fmt.Sprint(tc.n), func(t *testing.T) {
			// n bytes of spaces: JSON whitespace, so a result of null when not capped.
			p, _ := sh(t, fmt.Sprintf(`head -c %d /dev/zero | tr '\0' ' '`, tc.n), subprocess.WithMaxOutputBytes(limit))
			res, err := dispatch(p, request("flood"))
			if !tc.fail {
				if err != nil || string(res) != "null" {
					t.Fatalf("%d bytes under a %d cap: %s, %v; want null", tc.n, limit, res, err)
				}
				return
			}
			e := wantCode(t, err, executor.CodeOutputCap)
			if e.Message != fmt.Sprintf("tool 'flood' wrote more than %d bytes and was killed", limit) {
				t.Fatalf("message = %q", e.Message)
			}
		})
	}
}

func TestStderrCapNeverKills(t *testing.T) {
	p, _ := sh(t, `head -c 100000 /dev/zero | tr '\0' 'e' >&2; echo '{"done":true}'`, subprocess.WithMaxOutputBytes(1000))
	res, err := dispatch(p, request("noisy"))
	if err != nil || string(res) != `{"done":true}` {
		t.Fatalf("stderr over the cap must not kill: %s, %v", res, err)
	}
}

func TestExitMessageCarriesTheLast500Units(t *testing.T) {
	p, _ := sh(t, `printf 'HEAD'; i=0; while [ $i -lt 100 ]; do printf '0123456789' >&2; i=$((i+1)); done; printf 'END  \n' >&2; exit 7`)
	_, err := dispatch(p, request("crasher"))
	e := wantCode(t, err, executor.CodeExit)
	prefix := "tool 'crasher' exited 7: "
	if !strings.HasPrefix(e.Message, prefix) {
		t.Fatalf("message = %q", e.Message)
	}
	tail := strings.TrimPrefix(e.Message, prefix)
	if len(tail) != 500 || !strings.HasSuffix(tail, "789END") {
		t.Fatalf("tail has %d characters (%q...), want the last 500 of the trimmed stderr", len(tail), tail[:20])
	}
}

func TestExitBySignal(t *testing.T) {
	p, _ := sh(t, `kill -9 $$`, subprocess.WithLedger(&ledger.Memory{}))
	_, err := dispatch(p, request("victim"))
	e := wantCode(t, err, executor.CodeExit)
	if e.Message != "tool 'victim' exited null (signal SIGKILL)" {
		t.Fatalf("message = %q", e.Message)
	}
}

func TestPrecedenceTimeoutOverridesExit(t *testing.T) {
	// The tool ignores SIGTERM, so only the SIGKILL after the grace ends it;
	// the sticky reason stays timeout even though it then "exits" by signal.
	mem := &ledger.Memory{}
	p, base := sh(t, `trap '' TERM; sleep 30 & wait; sleep 30`, subprocess.WithTimeout(200*time.Millisecond),
		subprocess.WithKillGrace(300*time.Millisecond), subprocess.WithLedger(mem))
	_, err := dispatch(p, request("stubborn"))
	e := wantCode(t, err, executor.CodeTimeout)
	if e.Message != "tool 'stubborn' exceeded 200ms and was killed" {
		t.Fatalf("message = %q", e.Message)
	}
	rows := mem.Records()
	if len(rows) != 1 || rows[0].Outcome != ledger.OutcomeTimeout || rows[0].ExitCode != nil || rows[0].Signal == nil || *rows[0].Signal != "SIGKILL" {
		t.Fatalf("rows = %+v, want one timeout row with signal SIGKILL and a null exit code", rows)
	}
	assertEmpty(t, base)
}

func TestGrandchildHoldingThePipesDoesNotHangTheDispatch(t *testing.T) {
	// The grandchild leaves the process group (setsid) and keeps stdout
	// open for 30 s after the tool itself exits 0.
	p, base := sh(t, `setsid sleep 30 & printf '{"ok":1}'`)
	start := time.Now()
	res, err := dispatch(p, request("daemonizer"))
	if err != nil || string(res) != `{"ok":1}` {
		t.Fatalf("res %s, err %v", res, err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("the dispatch waited %v for an escaped grandchild", d)
	}
	assertEmpty(t, base)
}

func TestGrandchildInTheGroupIsKilled(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	p, _ := sh(t, fmt.Sprintf(`sleep 30 >/dev/null 2>&1 & echo $! > %s; echo null`, pidFile))
	if _, err := dispatch(p, request("forker")); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid := strings.TrimSpace(string(b))
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil || strings.Contains(string(st), ") Z ") {
			return // gone, or a zombie waiting for init to reap it
		}
		if time.Now().After(deadline) {
			t.Fatalf("grandchild %s is still running after the dispatch: %s", pid, st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestCancellation(t *testing.T) {
	mem := &ledger.Memory{}
	p, base := sh(t, `sleep 30`, subprocess.WithLedger(mem))
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	_, err := p.Dispatch(ctx, request("slow"))
	e := wantCode(t, err, executor.CodeAborted)
	if e.Message != "tool 'slow' was cancelled" || !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	if rows := mem.Records(); len(rows) != 1 || rows[0].Outcome != ledger.OutcomeError {
		t.Fatalf("rows = %+v, want one error row", rows)
	}
	assertEmpty(t, base)

	// Already cancelled: still refused as aborted, recorded, cleaned up.
	_, err = p.Dispatch(ctx, request("slow"))
	wantCode(t, err, executor.CodeAborted)
}

func TestEnvironmentIsReplaced(t *testing.T) {
	t.Setenv("MOAT_TEST_HOST_ONLY", "leak")
	t.Setenv("MOAT_TEST_ALLOWED", "host-value")
	creds := func(context.Context, *executor.Request) ([]executor.Credential, error) {
		return []executor.Credential{{Name: "MOAT_TEST_ALLOWED", Value: "minted"}, {Name: "RULVAR_TOOL", Value: "forged"}, {Name: "TOKEN", Value: "t"}}, nil
	}
	p, _ := sh(t, `env | sort | tr '\n' ';' >&2; exit 9`, subprocess.WithAllowEnv("MOAT_TEST_ALLOWED", "MOAT_TEST_UNSET"), subprocess.WithCredentials(creds))
	_, err := dispatch(p, request("envtool"))
	e := wantCode(t, err, executor.CodeExit)
	got := strings.TrimPrefix(e.Message, "tool 'envtool' exited 9: ")
	// sh adds PWD (and may add SHLVL/_): everything else must be ours.
	var ours []string
	for _, kv := range strings.Split(strings.TrimSuffix(got, ";"), ";") {
		if !strings.HasPrefix(kv, "PWD=") && !strings.HasPrefix(kv, "SHLVL=") && !strings.HasPrefix(kv, "_=") {
			ours = append(ours, kv)
		}
	}
	want := "MOAT_TEST_ALLOWED=minted RULVAR_IDEMPOTENCY_KEY=key RULVAR_RUN_ID=run RULVAR_TOOL=envtool TOKEN=t"
	if strings.Join(ours, " ") != want {
		t.Fatalf("tool environment = %q, want %q", strings.Join(ours, " "), want)
	}
}

func TestSandboxPrefixGetsWorkdirAndCommand(t *testing.T) {
	var seen string
	prefix := func(workdir string, req *executor.Request) ([]string, error) {
		seen = workdir
		return []string{"/bin/sh", "-c", `printf '{"argv":"%s","cwd":"%s"}' "$*" "$(pwd)"`, "launcher"}, nil
	}
	p, err := subprocess.New(subprocess.WithCommand("/real/tool", "--flag"), subprocess.WithSandbox(prefix))
	if err != nil {
		t.Fatal(err)
	}
	req := request("wrapped")
	req.Spec = json.RawMessage(`{"args":["spec-arg", 3]}`)
	res, err := dispatch(p, req)
	if err != nil {
		t.Fatal(err)
	}
	var got struct{ Argv, Cwd string }
	_ = json.Unmarshal(res, &got)
	if got.Argv != "/real/tool --flag spec-arg" || got.Cwd != seen || seen == "" {
		t.Fatalf("launcher saw argv %q in %q (workdir %q)", got.Argv, got.Cwd, seen)
	}
}

func TestSpecCommandWins(t *testing.T) {
	p, err := subprocess.New(subprocess.WithCommand("/nonexistent/fallback"))
	if err != nil {
		t.Fatal(err)
	}
	req := request("spec")
	req.Spec = json.RawMessage(`{"command":"/bin/echo","args":["[1]"]}`)
	if res, err := dispatch(p, req); err != nil || string(res) != "[1]" {
		t.Fatalf("spec command: %s, %v", res, err)
	}
	req.Spec = json.RawMessage(`{"command":""}`)
	_, err = dispatch(p, req)
	e := wantCode(t, err, executor.CodeConfig)
	if e.Message != "tool 'spec' has no command: set executorSpec.command on the tool or command on the executor" {
		t.Fatalf("message = %q", e.Message)
	}
}

func TestCredentialsErrorIsRawAndRecorded(t *testing.T) {
	mem := &ledger.Memory{}
	boom := errors.New("vault unreachable")
	p, base := sh(t, `touch /tmp/should-not-run`, subprocess.WithLedger(mem),
		subprocess.WithCredentials(func(context.Context, *executor.Request) ([]executor.Credential, error) { return nil, boom }))
	_, err := dispatch(p, request("minted"))
	if err != boom {
		t.Fatalf("err = %v, want the raw credentials error", err)
	}
	rows := mem.Records()
	if len(rows) != 1 || rows[0].Outcome != ledger.OutcomeError || rows[0].ExitCode != nil || rows[0].Signal != nil {
		t.Fatalf("rows = %+v, want one error row with null exit code", rows)
	}
	assertEmpty(t, base)
}

package subprocess_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/conformance/testenv"
	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/executor/subprocess"
	"github.com/moat-sandbox/moat/ledger"
)

// failingLedger fails the phases it is told to, and remembers the rest.
type failingLedger struct {
	ledger.Memory
	intentErr, recordErr error
}

func (l *failingLedger) Intent(ctx context.Context, i ledger.Intent) error {
	if l.intentErr != nil {
		return l.intentErr
	}
	return l.Memory.Intent(ctx, i)
}

func (l *failingLedger) Record(ctx context.Context, r ledger.Record) error {
	if l.recordErr != nil {
		return l.recordErr
	}
	return l.Memory.Record(ctx, r)
}

// recordOnly is a single-phase ledger (no Intent method).
type recordOnly struct{ rows []ledger.Record }

func (l *recordOnly) Record(_ context.Context, r ledger.Record) error {
	l.rows = append(l.rows, r)
	return nil
}

func effectTool(t *testing.T) (script, marker string) {
	marker = filepath.Join(t.TempDir(), "effect")
	return "touch " + marker + "; echo '{}'", marker
}

func TestIntentFailureRefusesBeforeAnyEffect(t *testing.T) {
	script, marker := effectTool(t)
	l := &failingLedger{intentErr: errors.New("disk full")}
	p, base := sh(t, script, subprocess.WithLedger(l))
	_, err := dispatch(p, request("charge"))
	e := wantCode(t, err, executor.CodeLedger)
	if e.Message != "tool 'charge' was not dispatched: the two-phase ledger intent write failed (disk full)" {
		t.Fatalf("message = %q", e.Message)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the tool ran although its intent was not written")
	}
	if len(l.Records()) != 0 {
		t.Fatal("an outcome row was written for a refused dispatch")
	}
	assertEmpty(t, base)
}

func TestRecordFailureAfterSuccess(t *testing.T) {
	script, marker := effectTool(t)
	l := &failingLedger{recordErr: errors.New("read-only file system")}
	p, base := sh(t, script, subprocess.WithLedger(l))
	_, err := dispatch(p, request("charge"))
	e := wantCode(t, err, executor.CodeLedger)
	if e.Message != "tool 'charge' outcome was not recorded: the ledger record write failed (read-only file system)" {
		t.Fatalf("message = %q", e.Message)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatal("the effect should have happened")
	}
	assertEmpty(t, base)
}

func TestRecordAndBodyFailureNamesBoth(t *testing.T) {
	l := &failingLedger{recordErr: errors.New("EIO")}
	p, base := sh(t, "echo boom >&2; exit 4", subprocess.WithLedger(l))
	_, err := dispatch(p, request("both"))
	e := wantCode(t, err, executor.CodeLedger)
	want := "tool 'both' outcome was not recorded: the ledger record write failed (EIO); the dispatch itself had already failed (tool 'both' exited 4: boom)"
	if e.Message != want {
		t.Fatalf("message = %q\nwant      %q", e.Message, want)
	}
	assertEmpty(t, base)
}

func TestTwoPhaseRows(t *testing.T) {
	mem := &ledger.Memory{}
	p, _ := sh(t, `echo '{}'`, subprocess.WithLedger(mem))
	req := request("charge")
	req.Executor = "container"
	for range 2 {
		if _, err := dispatch(p, req); err != nil {
			t.Fatal(err)
		}
	}
	intents, records := mem.Intents(), mem.Records()
	if len(intents) != 2 || len(records) != 2 {
		t.Fatalf("%d intents, %d records; want 2 and 2", len(intents), len(records))
	}
	hash, _ := executor.HashArgs(req.Args)
	for i := range 2 {
		in, rec := intents[i], records[i]
		if in != rec.Intent {
			t.Fatalf("intent %+v and outcome %+v disagree on the shared fields", in, rec.Intent)
		}
		if in.ArgsHash != hash || in.Executor != "container" || in.Tool != "charge" || in.RunID != "run" || in.SpanID != "span" || in.IdempotencyKey != "key" {
			t.Fatalf("intent = %+v", in)
		}
		if len(in.AttemptID) != 36 || rec.Outcome != ledger.OutcomeOK || *rec.ExitCode != 0 || rec.Signal != nil {
			t.Fatalf("record = %+v", rec)
		}
	}
	if intents[0].AttemptID == intents[1].AttemptID {
		t.Fatal("two dispatches share an attemptId")
	}
}

func TestSingleRecordLedger(t *testing.T) {
	l := &recordOnly{}
	p, _ := sh(t, `echo 1`, subprocess.WithLedger(l))
	if _, err := dispatch(p, request("once")); err != nil {
		t.Fatal(err)
	}
	if len(l.rows) != 1 || l.rows[0].Outcome != ledger.OutcomeOK {
		t.Fatalf("rows = %+v", l.rows)
	}
}

func TestClockDrivesStartedAtAndDuration(t *testing.T) {
	mem := &ledger.Memory{}
	t0 := time.UnixMilli(1_700_000_000_000)
	calls := 0
	clock := func() time.Time { calls++; return t0.Add(time.Duration(calls-1) * 1500 * time.Millisecond) }
	p, _ := sh(t, `echo 1`, subprocess.WithLedger(mem), subprocess.WithClock(clock))
	if _, err := dispatch(p, request("clocked")); err != nil {
		t.Fatal(err)
	}
	r := mem.Records()[0]
	if r.StartedAt != 1_700_000_000_000 || r.DurationMs != 1500 {
		t.Fatalf("startedAt %v durationMs %v", r.StartedAt, r.DurationMs)
	}
}

// Bad input is refused, typed, before any workdir or ledger row exists.
func TestBadInputIsRefusedBeforeTheIntent(t *testing.T) {
	for _, tc := range []struct {
		name    string
		command string
		edit    func(*executor.Request)
		code    executor.Code
		want    string
	}{
		{"invalid JSON args", "/bin/true", func(r *executor.Request) { r.Args = json.RawMessage(`{"a":`) }, executor.CodeConfig, "args are not valid JSON"},
		{"no command", "", nil, executor.CodeConfig, "tool 'tool' has no command: set executorSpec.command on the tool or command on the executor"},
		// The reference's mkdtemp of rulvar-exec-../../x- makes /tmp/x-XXXXXX.
		{"tool name climbing out of the base", "/bin/true", func(r *executor.Request) { r.Tool = "../../x" }, executor.CodeConfig, "holds a '/'"},
		{"tool name with a slash", "/bin/true", func(r *executor.Request) { r.Tool = "a/b" }, executor.CodeConfig, "holds a '/'"},
		{"tool name with a NUL", "/bin/true", func(r *executor.Request) { r.Tool = "a\x00b" }, executor.CodeConfig, "NUL byte"},
		{"tool name not UTF-8", "/bin/true", func(r *executor.Request) { r.Tool = "a\xffb" }, executor.CodeConfig, "not valid UTF-8"},
		{"executor tag not UTF-8", "/bin/true", func(r *executor.Request) { r.Executor = "\xff" }, executor.CodeConfig, "not valid UTF-8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := &ledger.Memory{}
			base := t.TempDir()
			p, err := subprocess.New(subprocess.WithCommand(tc.command), subprocess.WithWorkdirBase(base), subprocess.WithLedger(mem))
			if err != nil {
				t.Fatal(err)
			}
			req := request("tool")
			if tc.edit != nil {
				tc.edit(req)
			}
			_, err = dispatch(p, req)
			e := wantCode(t, err, tc.code)
			if !strings.Contains(e.Message, tc.want) {
				t.Fatalf("message %q does not say %q", e.Message, tc.want)
			}
			if len(mem.Intents())+len(mem.Records()) != 0 {
				t.Fatal("a ledger row was written for a refused request")
			}
			assertEmpty(t, base)
		})
	}
}

func TestBadConfigurationIsRefusedAtConstruction(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		opt  subprocess.Option
		want string
	}{
		{"negative timeout", subprocess.WithTimeout(-time.Second), "timeout -1s is negative"},
		{"negative grace", subprocess.WithKillGrace(-time.Second), "kill grace -1s is negative"},
		{"negative cap", subprocess.WithMaxOutputBytes(-1), "output cap -1 is negative"},
		{"missing workdir base", subprocess.WithWorkdirBase("/nonexistent/base"), `workdir base "/nonexistent/base" is not usable`},
		{"workdir base is a file", subprocess.WithWorkdirBase(file), "is not a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := subprocess.New(subprocess.WithCommand("/bin/true"), tc.opt)
			if !errors.Is(err, executor.ErrConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want a config error saying %q", err, tc.want)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	p, err := subprocess.New()
	if err != nil {
		t.Fatal(err)
	}
	c := p.Config()
	if c.Timeout != 30*time.Second || c.KillGrace != 2*time.Second || c.MaxOutputBytes != 1<<20 || c.WorkdirBase != os.TempDir() {
		t.Fatalf("defaults = %+v", c)
	}
}

func TestUnwritableWorkdirBaseAsAnOrdinaryUser(t *testing.T) {
	if testenv.RunAsUser(t, testenv.NobodyUID, testenv.NobodyGID) {
		return
	}
	// /proc is a directory nobody can create entries in, on any host.
	_, err := subprocess.New(subprocess.WithCommand("/bin/true"), subprocess.WithWorkdirBase("/proc"))
	if !errors.Is(err, executor.ErrConfig) || !strings.Contains(err.Error(), "is not writable by this process") {
		t.Fatalf("err = %v, want a config error naming the unwritable base", err)
	}
}

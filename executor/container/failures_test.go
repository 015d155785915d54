package container_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/executor/container"
	"github.com/moat-sandbox/moat/ledger"
)

// failingLedger is a two-phase ledger whose record write fails.
type failingLedger struct{ ledger.Memory }

func (l *failingLedger) Record(context.Context, ledger.Record) error {
	return errors.New("disk full")
}

func TestLedgerPhases(t *testing.T) {
	s := newStub(t, `printf '{}'`)
	mem := &ledger.Memory{}
	p, _ := stubProvider(t, s, container.WithLedger(mem))
	if _, err := dispatch(p, request("phased")); err != nil {
		t.Fatal(err)
	}
	in, rec := mem.Intents(), mem.Records()
	if len(in) != 1 || len(rec) != 1 {
		t.Fatalf("%d intents and %d records, want 1 and 1", len(in), len(rec))
	}
	if rec[0].Intent != in[0] || in[0].AttemptID == "" || in[0].Executor != "container" {
		t.Fatalf("intent %+v and outcome %+v do not share their fields and attemptId", in[0], rec[0].Intent)
	}
}

func TestRecordFailure(t *testing.T) {
	s := newStub(t, `printf '{}'`)
	p, base := stubProvider(t, s, container.WithLedger(&failingLedger{}))
	_, err := dispatch(p, request("rec"))
	e := wantCode(t, err, executor.CodeLedger)
	if want := "container tool 'rec' outcome was not recorded: the ledger record write failed (disk full)"; e.Message != want {
		t.Fatalf("message %q, want %q", e.Message, want)
	}
	assertEmpty(t, base)
}

func TestCredentialsFailure(t *testing.T) {
	s := newStub(t, `printf '{}'`)
	mem := &ledger.Memory{}
	boom := errors.New("vault sealed")
	p, base := stubProvider(t, s, container.WithLedger(mem), container.WithCredentials(func(context.Context, *executor.Request) ([]executor.Credential, error) {
		return nil, boom
	}))
	_, err := dispatch(p, request("creds"))
	if err != boom {
		t.Fatalf("err = %v, want the raw credentials error", err)
	}
	rows := mem.Records()
	if len(rows) != 1 || rows[0].Outcome != ledger.OutcomeError || rows[0].ExitCode != nil {
		t.Fatalf("rows %+v, want one error row with a null exit code", rows)
	}
	assertEmpty(t, base)
}

func TestExitIsTypedWithoutSignalPart(t *testing.T) {
	s := newStub(t, `echo "  the tool broke " >&2; exit 5`)
	mem := &ledger.Memory{}
	p, _ := stubProvider(t, s, container.WithLedger(mem))
	_, err := dispatch(p, request("crash"))
	e := wantCode(t, err, executor.CodeExit)
	if want := "container tool 'crash' exited 5: the tool broke"; e.Message != want {
		t.Fatalf("message %q, want %q", e.Message, want)
	}
	if rows := mem.Records(); len(rows) != 1 || rows[0].Outcome != ledger.OutcomeError || *rows[0].ExitCode != 5 {
		t.Fatalf("rows %+v", rows)
	}
	// A CLI ended by a signal nobody sent: null, and no signal part.
	s = newStub(t, `kill -9 $$`)
	p, _ = stubProvider(t, s)
	_, err = dispatch(p, request("sig"))
	if e := wantCode(t, err, executor.CodeExit); e.Message != "container tool 'sig' exited null" {
		t.Fatalf("message %q", e.Message)
	}
	if len(s.lines(t, "rm")) == 0 {
		t.Fatalf("a CLI killed by a signal did not lead to the removal of its container")
	}
}

func TestProtocol(t *testing.T) {
	s := newStub(t, `printf 'this is not json'`)
	mem := &ledger.Memory{}
	p, _ := stubProvider(t, s, container.WithLedger(mem))
	_, err := dispatch(p, request("sloppy"))
	e := wantCode(t, err, executor.CodeProtocol)
	if want := "tool 'sloppy' did not write a JSON result to stdout (write diagnostics to stderr)"; e.Message != want {
		t.Fatalf("message %q, want the shared protocol message", e.Message)
	}
	rows := mem.Records()
	if len(rows) != 1 || rows[0].Outcome != ledger.OutcomeError || rows[0].ExitCode == nil || *rows[0].ExitCode != 0 || rows[0].Executor != "container" {
		t.Fatalf("rows %+v, want one error row, exitCode 0, executor container", rows)
	}
}

func TestConfig(t *testing.T) {
	s := newStub(t, `printf '{}'`)
	p, base := stubProvider(t, s, container.WithCommand(""))
	_, err := dispatch(p, request("nocmd"))
	e := wantCode(t, err, executor.CodeConfig)
	if want := "tool 'nocmd' has no command: set executorSpec.command or the executor command"; e.Message != want {
		t.Fatalf("message %q, want %q", e.Message, want)
	}
	assertEmpty(t, base)
	if _, err := container.New(); executor.CodeOf(err) != executor.CodeConfig || !strings.Contains(err.Error(), "WithImage") {
		t.Fatalf("New without an image: %v, want a config error naming WithImage", err)
	}
	if _, err := container.New(container.WithImage("x"), container.WithWorkMount("work")); executor.CodeOf(err) != executor.CodeConfig {
		t.Fatalf("New with a relative work mount: %v, want a config error", err)
	}
}

func TestSpawn(t *testing.T) {
	p, err := container.New(container.WithImage("x"), container.WithCommand("/bin/true"), container.WithCLI("moat-no-such-cli"), container.WithLookupEnv(lookup))
	if err != nil {
		t.Fatal(err)
	}
	_, err = dispatch(p, request("spawned"))
	e := wantCode(t, err, executor.CodeSpawn)
	if !strings.HasPrefix(e.Message, "container tool 'spawned' could not launch 'moat-no-such-cli': ") {
		t.Fatalf("message %q", e.Message)
	}
}

// A timed-out CLI is stopped through its process group, with the
// container's prefix, and its container is removed by name.
func TestTimeoutRemovesTheContainer(t *testing.T) {
	s := newStub(t, `trap '' TERM; sleep 30 & wait; sleep 30`)
	mem := &ledger.Memory{}
	p, base := stubProvider(t, s, container.WithLedger(mem), container.WithTimeout(200*time.Millisecond), container.WithKillGrace(200*time.Millisecond))
	start := time.Now()
	_, err := dispatch(p, request("slow"))
	e := wantCode(t, err, executor.CodeTimeout)
	if e.Message != "container tool 'slow' exceeded 200ms and was killed" {
		t.Fatalf("message %q", e.Message)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the timed-out dispatch took %v", d)
	}
	rows := mem.Records()
	if len(rows) != 1 || rows[0].Outcome != ledger.OutcomeTimeout {
		t.Fatalf("rows %+v", rows)
	}
	if got, want := strings.Join(s.lines(t, "rm"), " "), "kill moat-"+rows[0].AttemptID+" rm -f moat-"+rows[0].AttemptID; got != want {
		t.Fatalf("kill path ran %q, want %q", got, want)
	}
	assertEmpty(t, base)
}

// The CLI's failures to start a container on this kind of host are typed,
// naming the cause and the fix (stderr lines as podman 4.3 writes them).
func TestStartFailuresAreDiagnosed(t *testing.T) {
	for _, tc := range []struct {
		stderr string
		code   int
		cause  container.Cause
		fix    string
	}{
		{"Error: OCI runtime error: crun: cgroups in hybrid mode not supported, drop all controllers from cgroupv2", 126, container.CauseHybridCgroups, `WithRuntime("runc")`},
		{"Error: runc: runc create failed: unable to start container process: error during container init: error setting rlimits for ready process: error setting rlimit type 7: operation not permitted: OCI permission denied", 126, container.CauseUlimits, "WithUlimits("},
		{"Error: crun: setrlimit `RLIMIT_NOFILE`: Operation not permitted: OCI permission denied", 126, container.CauseUlimits, "WithUlimits("},
	} {
		s := newStub(t, fmt.Sprintf("echo '%s' >&2; exit %d", tc.stderr, tc.code))
		p, _ := stubProvider(t, s)
		_, err := dispatch(p, request("boot"))
		e := wantCode(t, err, executor.CodeSetup)
		var se *container.StartError
		if !errors.As(err, &se) || se.Cause != tc.cause {
			t.Fatalf("err %v, want a StartError with cause %s", err, tc.cause)
		}
		if !strings.HasPrefix(e.Message, "container tool 'boot' did not run: ") || !strings.Contains(e.Message, tc.fix) || !strings.Contains(e.Message, tc.stderr) {
			t.Fatalf("message %q does not name the fix %s and the CLI's line", e.Message, tc.fix)
		}
	}
	// The same text from a tool that exits 1 is the tool's own exit.
	s := newStub(t, "echo 'error setting rlimit type 7' >&2; exit 1")
	p, _ := stubProvider(t, s)
	_, err := dispatch(p, request("boot"))
	wantCode(t, err, executor.CodeExit)
}

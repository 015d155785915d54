package container_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/conformance/testenv"
	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/executor/container"
	"github.com/moat-sandbox/moat/ledger"
)

// The reference values below were observed by running the reference's own
// containerExecutor (@rulvar/executor 1.248.0, o-stepper/rulvar 54c04dc7,
// bundled from its TypeScript source) on Node v20.20.2 on this host, with a
// stub CLI as here.

// TestCLIThatCannotBeStartedIsRecordedAfterTheIntent: as the reference, a
// CLI that cannot be started is an attempted dispatch: the intent, then an
// error outcome with exitCode and signal null, and the reference's message.
func TestCLIThatCannotBeStartedIsRecordedAfterTheIntent(t *testing.T) {
	type tcase struct {
		name, cli string
		env       map[string]string
		reference string
	}
	cases := []tcase{{"missing", "/no/such/docker", hostEnv,
		"container tool 't' could not launch '/no/such/docker': spawn /no/such/docker ENOENT"}}
	// No PATH in the CLI's environment: /usr/bin:/bin, where a name only
	// /usr/local/bin holds (go, on the development host) is not.
	if local := testenv.LocalBinOnly(); local != "" {
		cases = append(cases, tcase{"bare name without PATH", local, map[string]string{},
			"container tool 't' could not launch '" + local + "': spawn " + local + " ENOENT"})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mem := &ledger.Memory{}
			base := t.TempDir()
			p, err := container.New(container.WithImage("img"), container.WithCommand("/bin/true"), container.WithCLI(tc.cli),
				container.WithWorkdirBase(base), container.WithLedger(mem),
				container.WithLookupEnv(func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }))
			if err != nil {
				t.Fatal(err)
			}
			_, err = dispatch(p, request("t"))
			if e := wantCode(t, err, executor.CodeSpawn); e.Message != tc.reference {
				t.Errorf("message %q, the reference's %q", e.Message, tc.reference)
			}
			in, rows := mem.Intents(), mem.Records()
			if len(in) != 1 || len(rows) != 1 || rows[0].Outcome != ledger.OutcomeError || rows[0].ExitCode != nil || rows[0].Signal != nil {
				t.Fatalf("%d intents, outcomes %+v; the reference's one intent and one error outcome with null exit", len(in), rows)
			}
			assertEmpty(t, base)
		})
	}
}

// TestEnvListInInsertionOrder: the -e list is the reference's, RULVAR_*
// first, then the forwarded host variables that are set in forwardEnv's
// order, then the minted ones in the order minted (a name forwarded and
// minted keeps its forwarded place); the CLI's environment holds them in
// the same order after the daemon's variables.
func TestEnvListInInsertionOrder(t *testing.T) {
	s := newStub(t, `tr '\0' '\n' < /proc/$$/environ > "`+"$out"+`/environ"; printf '{}'`)
	creds := func(context.Context, *executor.Request) ([]executor.Credential, error) {
		return []executor.Credential{{Name: "ZED", Value: "1"}, {Name: "ALPHA", Value: "2"}, {Name: "RV_FWD", Value: "minted"}, {Name: "MID", Value: "3"}}, nil
	}
	p, _ := stubProvider(t, s, container.WithDaemonEnv(), container.WithForwardEnv("RV_UNSET", "RV_FWD", "HOME"), container.WithCredentials(creds))
	if _, err := dispatch(p, request("t")); err != nil {
		t.Fatal(err)
	}
	var es []string
	argv := s.lines(t, "argv")
	for i, a := range argv {
		if a == "-e" {
			es = append(es, argv[i+1])
		}
	}
	// The reference's list for forwardEnv [LANG, HOME] (both set) and
	// credentials {ZED, ALPHA, HOME, MID}: RULVAR_TOOL RULVAR_RUN_ID
	// RULVAR_IDEMPOTENCY_KEY LANG HOME ZED ALPHA MID.
	want := "RULVAR_TOOL RULVAR_RUN_ID RULVAR_IDEMPOTENCY_KEY RV_FWD HOME ZED ALPHA MID"
	if got := strings.Join(es, " "); got != want {
		t.Errorf("-e list %q, want %q", got, want)
	}
	env := s.lines(t, "environ")
	var names []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		names = append(names, k)
	}
	// The reference's CLI environment for the same, with no daemonEnv:
	// LANG HOME ZED ALPHA MID RULVAR_TOOL RULVAR_RUN_ID
	// RULVAR_IDEMPOTENCY_KEY, HOME with the minted value.
	if got, want := strings.Join(names, " "), "RV_FWD HOME ZED ALPHA MID RULVAR_TOOL RULVAR_RUN_ID RULVAR_IDEMPOTENCY_KEY"; got != want {
		t.Errorf("CLI environment %q, want %q", got, want)
	}
	if env[0] != "RV_FWD=minted" {
		t.Errorf("CLI environment %q: a minted value must overwrite the forwarded one in its place", env)
	}
}

// TestZeroKillGraceKillsTheCLIAtOnce: killGraceMs 0 sends SIGKILL with the
// SIGTERM (the reference: 207 ms for a 200 ms timeout against a CLI that
// ignores SIGTERM), not after the container default of 5 s.
func TestZeroKillGraceKillsTheCLIAtOnce(t *testing.T) {
	s := newStub(t, `trap '' TERM; exec sleep 30`)
	mem := &ledger.Memory{}
	const timeout = time.Second
	p, base := stubProvider(t, s, container.WithLedger(mem), container.WithTimeout(timeout), container.WithKillGrace(0))
	if c := p.Config(); c.KillGrace != 0 {
		t.Fatalf("kill grace %v, want 0", c.KillGrace)
	}
	start := time.Now()
	_, err := dispatch(p, request("slow"))
	wantCode(t, err, executor.CodeTimeout)
	if d := time.Since(start); d >= timeout+container.DefaultKillGrace {
		t.Fatalf("the dispatch took %v: the kill waited the default grace of %v", d, container.DefaultKillGrace)
	}
	if rows := mem.Records(); len(rows) != 1 || rows[0].Signal == nil || *rows[0].Signal != "SIGKILL" {
		t.Fatalf("rows %+v, want one ended by SIGKILL", rows)
	}
	assertEmpty(t, base)
}

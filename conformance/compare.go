package conformance

import (
	"encoding/json"
	"os/signal"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/ledger"
)

func init() {
	// raise: the tool kills itself with args.signal, as `kill -N $$` or
	// abort(3) would: through a shell, whose exec leaves every signal at its
	// default action (Go's runtime would turn some into exit status 2).
	probes["raise"] = func(args map[string]json.RawMessage) any {
		var sig int
		_ = json.Unmarshal(args["signal"], &sig)
		err := syscall.Exec("/bin/sh", []string{"sh", "-c", "kill -" + strconv.Itoa(sig) + " $$; sleep 10"}, nil)
		return map[string]any{"exec": errText(err)}
	}
	// ignore-term: a tool that ignores SIGTERM and sleeps.
	probes["ignore-term"] = func(map[string]json.RawMessage) any {
		signal.Ignore(syscall.SIGTERM)
		time.Sleep(100 * time.Second)
		return map[string]any{"slept": true}
	}
}

// ending is what the ledger and the error say about how one dispatch ended.
type ending struct {
	Outcome  ledger.Outcome
	ExitCode *int
	Signal   *string
	Code     executor.Code
}

func (e ending) String() string {
	b, _ := json.Marshal(map[string]any{"outcome": e.Outcome, "exitCode": e.ExitCode, "signal": e.Signal, "code": e.Code})
	return string(b)
}

func sameEnding(a, b ending) bool {
	eqInt := a.ExitCode == nil && b.ExitCode == nil || a.ExitCode != nil && b.ExitCode != nil && *a.ExitCode == *b.ExitCode
	eqStr := a.Signal == nil && b.Signal == nil || a.Signal != nil && b.Signal != nil && *a.Signal == *b.Signal
	return a.Outcome == b.Outcome && a.Code == b.Code && eqInt && eqStr
}

// compareCases are the endings a sandbox must not change: the tool's own
// exit codes and self-inflicted signals, and the pipeline's timeout against
// a tool without a SIGTERM handler (ended by SIGTERM, long before the
// grace) and against one that ignores it (SIGKILL after the grace).
var compareCases = []struct {
	name   string
	args   string
	cfg    Config
	signal string // the signal both must record, "" for none
}{
	{"ok", `{"behavior":"echo","payload":1}`, Config{}, ""},
	{"exit 3", `{"behavior":"exit","code":3}`, Config{}, ""},
	{"kill -9 self", `{"behavior":"raise","signal":9}`, Config{}, "SIGKILL"},
	{"abort", `{"behavior":"raise","signal":6}`, Config{}, "SIGABRT"},
	{"kill -TERM self", `{"behavior":"raise","signal":15}`, Config{}, "SIGTERM"},
	{"timeout without a handler", `{"behavior":"sleep","ms":100000}`, Config{Timeout: 300 * time.Millisecond, KillGrace: grace(30 * time.Second)}, "SIGTERM"},
	// The tool must have installed its SIGTERM handler before the timeout
	// fires, or the SIGTERM ends it: 2 s leaves room for a runner's start on
	// a loaded host or under TCG (300 ms ended it by SIGTERM in a VM beside
	// a busy host, in both providers).
	{"timeout ignoring SIGTERM", `{"behavior":"ignore-term"}`, Config{Timeout: 2 * time.Second, KillGrace: grace(300 * time.Millisecond)}, "SIGKILL"},
}

// Compare runs the same tool behaviours under a reference provider (the
// subprocess provider: a plain process) and a candidate, and checks that
// each ends the same way: the outcome, exit code and signal recorded in the
// ledger, and the error code of the dispatch. A sandbox must not change how
// a tool ends, nor how long a timeout takes to end one.
func Compare(t *testing.T, reference, candidate Factory) {
	t.Helper()
	runner, err := runnerPath()
	if err != nil {
		t.Fatalf("conformance: prepare the runner program: %v", err)
	}
	for _, c := range compareCases {
		t.Run(c.name, func(t *testing.T) {
			var got [2]ending
			for i, f := range []Factory{reference, candidate} {
				k := &kit{t: t, id: "compare", runner: runner, factory: f}
				mem := &ledger.Memory{}
				cfg := c.cfg
				cfg.Ledger = mem
				_, err := k.dispatch(k.provider(cfg), k.request("cmp", c.args))
				rows := mem.Records()
				if len(rows) != 1 {
					k.fatalf("%d outcome rows, want 1", len(rows))
				}
				got[i] = ending{Outcome: rows[0].Outcome, ExitCode: rows[0].ExitCode, Signal: rows[0].Signal, Code: executor.CodeOf(err)}
			}
			if !sameEnding(got[0], got[1]) {
				t.Fatalf("the reference ends %s, the candidate %s", got[0], got[1])
			}
			if s := got[1].Signal; (c.signal == "") != (s == nil) || s != nil && *s != c.signal {
				t.Fatalf("both end %s, want signal %q", got[1], c.signal)
			}
		})
	}
}

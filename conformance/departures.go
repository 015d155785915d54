package conformance

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/ledger"
)

func init() {
	// argv: the arguments the tool was started with, after its name.
	probes["argv"] = func(map[string]json.RawMessage) any {
		return map[string]any{"argv": append([]string{}, os.Args[1:]...)}
	}
}

// grace is a KillGrace for Config.
func grace(d time.Duration) *time.Duration { return &d }

// departureChecks are behaviours of the reference's executors that its own
// kit does not check and that moat once departed from (issue 32); the
// expected values are what the reference's subprocessExecutor
// (@rulvar/executor 1.248.0) did when run on them.
var departureChecks = []check{
	{"r1", "kills at once with killGraceMs 0", func(k *kit) {
		// The tool ignores SIGTERM: only the SIGKILL ends it. The
		// reference ends such a dispatch 36 ms after its timeout.
		const timeout = time.Second
		start := time.Now()
		err := k.fail(k.provider(Config{Timeout: timeout, KillGrace: grace(0)}), k.request("stubborn", `{"behavior":"ignore-term"}`))
		k.code(err, executor.CodeTimeout)
		if d := time.Since(start); d >= timeout+executor.DefaultKillGrace {
			k.fatalf("the dispatch took %v: with killGraceMs 0 the SIGKILL must follow the SIGTERM at once, not after a grace", d)
		}
	}},
	{"r2", "dispatches any tool name and records the executor tag as given", func(k *kit) {
		mem := &ledger.Memory{}
		req := k.request("github.create_issue", `{"behavior":"echo","payload":1}`)
		req.Executor = "my-executor"
		var got struct{ Tool string }
		k.decode(k.ok(k.provider(Config{Ledger: mem}), req), &got)
		if got.Tool != "github.create_issue" {
			k.fatalf("the tool was told its name is %q, want github.create_issue", got.Tool)
		}
		rows := mem.Records()
		if len(rows) != 1 || rows[0].Tool != "github.create_issue" || rows[0].Executor != "my-executor" {
			k.fatalf("rows %+v, want tool github.create_issue and executor my-executor as given", rows)
		}
		if !strings.Contains(filepath.Base(rows[0].Workdir), "exec-github.create_issue-") {
			k.fatalf("workdir %s is not named after the tool (rulvar-exec-github.create_issue-XXXXXX)", rows[0].Workdir)
		}
	}},
	{"r3", "reads the spec's command and args member by member", func(k *kit) {
		p := k.provider(Config{})
		argv := func(spec string) []string {
			req := k.request("specced", `{"behavior":"argv"}`)
			req.Spec = json.RawMessage(spec)
			var got struct{ Argv []string }
			k.decode(k.ok(p, req), &got)
			return got.Argv
		}
		base := argv(`{}`)
		// A command that is not a string falls back to the executor's,
		// and the spec's string args are kept.
		if got := argv(`{"command":5,"args":["x",7,"y"]}`); !slices.Equal(got, append(slices.Clone(base), "x", "y")) {
			k.fatalf("spec {command: 5, args: [x, 7, y]} ran with args %q, want %q then x y", got, base)
		}
		// Args that are not an array are none.
		if got := argv(`{"args":"x"}`); !slices.Equal(got, base) {
			k.fatalf("spec {args: 'x'} ran with args %q, want the executor's %q", got, base)
		}
	}},
}

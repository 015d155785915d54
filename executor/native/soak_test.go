package native_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/conformance/testenv"
	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/executor/native"
	"github.com/moat-sandbox/moat/ledger"
	"github.com/moat-sandbox/moat/policies"
)

// soakTool is the tool of every soak dispatch: it reads the request and
// does what its args' mode says. ok answers with the request's own n, so a
// result that reached the wrong dispatch is seen; sleep outlasts the
// timeout provider's limit (its argument, 3600.MARK, finds it afterwards); cap writes past the output cap; oom and pids
// run into the memory and pids limits.
const soakTool = `IFS= read -r req || :
case "$req" in
*'"mode":"ok"'*) n=${req#*'"n":'}; n=${n%%[!0-9]*}; printf '{"n":%s}' "$n" ;;
*'"mode":"exit"'*) echo failing on purpose >&2; exit 3 ;;
*'"mode":"sleep"'*) exec sleep 3600.MARK ;;
*'"mode":"cap"'*) head -c 262144 /dev/zero | tr '\0' x ;;
*'"mode":"oom"'*) exec python3 -c 'b = bytearray(1 << 30)' ;;
*'"mode":"pids"'*) i=0; while [ $i -lt 64 ]; do sleep 30 & i=$((i+1)); done 2>/dev/null; exit 3 ;;
esac`

// soakMix is the share of each outcome, out of 100 dispatches. Without
// cgroup limits (nobody on this host) oom and pids run as ok.
var soakMix = []struct {
	mode string
	n    int
}{{"ok", 76}, {"exit", 8}, {"cap", 6}, {"oom", 4}, {"pids", 4}, {"sleep", 2}}

func soakMode(i int, limits bool) string {
	k := i * 37 % 100 // 37 is prime to 100: every mode comes early and often
	for _, m := range soakMix {
		if k < m.n {
			if !limits && (m.mode == "oom" || m.mode == "pids") {
				return "ok"
			}
			return m.mode
		}
		k -= m.n
	}
	return "ok"
}

// TestSoakDispatches (issue 22): MOAT_SOAK_DISPATCHES dispatches (default
// 200; `make soak` runs 10,000) through the library with a warm pool, two
// at a time, with mixed outcomes, each checked; then nothing may be left:
// no descriptor or goroutine of this process, no sandbox process, no
// mount, no cgroup leaf, no workdir, and one intent and one outcome in the
// ledger for every dispatch. As root with cgroup limits, then as nobody
// without (this host delegates no cgroup to nobody).
func TestSoakDispatches(t *testing.T) {
	asRootAndNobody(t, testSoakDispatches)
}

func testSoakDispatches(t *testing.T) {
	n := testenv.SoakCount(t, "MOAT_SOAK_DISPATCHES", 200)
	limits := os.Geteuid() == 0
	mark := fmt.Sprintf("%d%d", os.Getpid(), time.Now().UnixNano()%1000000)
	base := t.TempDir()
	os.Chmod(base, 0o755)
	pol, err := policies.Builtin("default")
	if err != nil {
		t.Fatal(err)
	}
	pol.Limits.Memory, pol.Limits.Pids = "64M", 32
	var cg []native.Option
	if limits {
		pol.Limits.Required = []string{"memory", "pids"}
	} else {
		cg = append(cg, native.WithoutCgroups())
	}
	mem := &ledger.Memory{}
	provider := func(timeout time.Duration) *native.Provider {
		p, err := native.New(append([]native.Option{native.WithPolicy(pol), native.WithPool(2),
			native.WithCommand("/bin/sh", "-c", strings.ReplaceAll(soakTool, "MARK", mark)),
			native.WithTimeout(timeout), native.WithKillGrace(500 * time.Millisecond),
			native.WithMaxOutputBytes(64 << 10), native.WithWorkdirBase(base), native.WithLedger(mem)}, cg...)...)
		if err != nil {
			t.Fatalf("native.New: %v", err)
		}
		return p
	}
	// One dispatch first: what the runtime and the packages set up once
	// (Go's netpoller, the seccomp program cache) is not a leak.
	warm := provider(30 * time.Second)
	if res, err := warm.Dispatch(context.Background(), &executor.Request{Tool: "soak", Args: json.RawMessage(`{"mode":"ok","n":0}`),
		RunID: "soak", SpanID: "warm", IdempotencyKey: "soak-warm"}); err != nil || string(res) != `{"n":0}` {
		t.Fatalf("warm-up dispatch: %s, %v", res, err)
	}
	warm.Close()
	mem = &ledger.Memory{} // the soak's own rows only
	before := testenv.Snapshot(t)
	leaves := leafCount(t, warm) // before the pools below fill
	main, short := provider(30*time.Second), provider(300*time.Millisecond)
	parents := main.Cgroups().Parents

	want := map[string]executor.Code{"exit": executor.CodeExit, "cap": executor.CodeOutputCap, "oom": executor.CodeOOM,
		"pids": executor.CodeExit, "sleep": executor.CodeTimeout}
	var mu sync.Mutex
	counts := map[string]int{}
	spent := map[string]time.Duration{}
	var failures []string
	elapsed := testenv.Spread(n, 2, func(i int) {
		mode := soakMode(i, limits)
		p := main
		if mode == "sleep" {
			p = short
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		t0 := time.Now()
		res, err := p.Dispatch(ctx, &executor.Request{Tool: "soak", Args: json.RawMessage(fmt.Sprintf(`{"mode":%q,"n":%d}`, mode, i)),
			RunID: "soak", SpanID: strconv.Itoa(i), IdempotencyKey: "soak-" + strconv.Itoa(i)})
		cancel()
		problem := ""
		var e *executor.Error
		switch {
		case mode == "ok" && (err != nil || string(res) != fmt.Sprintf(`{"n":%d}`, i)):
			problem = fmt.Sprintf("result %s, error %v", res, err)
		case mode != "ok" && (!errors.As(err, &e) || e.Code != want[mode]):
			problem = fmt.Sprintf("error %v, want code %s", err, want[mode])
		case mode == "pids" && !strings.Contains(e.Message, "pids limit"):
			problem = fmt.Sprintf("error %v does not name the pids limit", err)
		}
		mu.Lock()
		counts[mode]++
		spent[mode] += time.Since(t0)
		if problem != "" && len(failures) < 20 {
			failures = append(failures, fmt.Sprintf("dispatch %d (%s): %s", i, mode, problem))
		}
		mu.Unlock()
	})
	stats := main.PoolStats()
	for _, f := range failures {
		t.Error(f)
	}
	main.Close()
	short.Close()

	// Pooled sandboxes hold leaves until Close.
	if after := leafCount(t, main); after != leaves {
		t.Errorf("cgroup leaves of this process: %d before, %d after", leaves, after)
	}
	testenv.CheckLeaks(t, before, base)
	if left := sandboxInits(t); len(left) > 0 {
		t.Errorf("sandbox inits left: %v", left)
	}
	if left := processesWithArg(mark); len(left) > 0 {
		t.Errorf("tool processes left: %v", left)
	}
	if ents, _ := os.ReadDir(base); len(ents) > 0 {
		t.Errorf("%d workdirs left in %s", len(ents), base)
	}
	if in, out := len(mem.Intents()), len(mem.Records()); in != n || out != n {
		t.Errorf("ledger: %d intents and %d outcomes for %d dispatches", in, out, n)
	}
	var per []string
	for _, m := range soakMix {
		if c := counts[m.mode]; c > 0 {
			per = append(per, fmt.Sprintf("%s %d (mean %v)", m.mode, c, (spent[m.mode]/time.Duration(c)).Round(100*time.Microsecond)))
		}
	}
	t.Logf("soak as uid %d (cgroup limits %v, parents %v): %d dispatches in %v, %.0f/s, 2 at a time; outcomes: %s; "+
		"main pool hits %d misses %d; leaks: %s", os.Geteuid(), limits, parents, n, elapsed.Round(time.Millisecond),
		float64(n)/elapsed.Seconds(), strings.Join(per, ", "), stats.Hits, stats.Misses, map[bool]string{true: "none", false: "see errors"}[!t.Failed()])
	if !limits && !testenv.ReRun() {
		testenv.Skipf(t, "not root: the oom and pids outcomes were not tested")
	}
}

// processesWithArg lists the processes with arg (exactly) in their
// command line, the sleeps of the tool's sleep mode.
func processesWithArg(mark string) []string {
	ents, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range ents {
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cmd), "3600."+mark) {
			out = append(out, e.Name()+": "+strings.ReplaceAll(string(cmd), "\x00", " "))
		}
	}
	return out
}

package native_test

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/cgroups"
	"github.com/moat-sandbox/moat/conformance/testenv"
	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/executor/native"
	"github.com/moat-sandbox/moat/ledger"
	"github.com/moat-sandbox/moat/policies"
)

// limitedProvider runs argv under the default policy with the given limits,
// in the cgroups of m (nil: the provider's own manager).
func limitedProvider(t *testing.T, argv []string, edit func(*policies.Policy), opts ...native.Option) *native.Provider {
	t.Helper()
	pol, err := policies.Builtin("default")
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(pol)
	}
	pol.Limits.Required = []string{"memory", "pids", "cpus"} // fail loudly if not enforced
	p, err := native.New(append([]native.Option{native.WithPolicy(pol), native.WithCommand(argv[0], argv[1:]...)}, opts...)...)
	if err != nil {
		t.Fatalf("native.New: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func dispatchOnce(t *testing.T, p *native.Provider) (json.RawMessage, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return p.Dispatch(ctx, &executor.Request{Tool: "limited", Args: json.RawMessage(`{}`), RunID: "r", SpanID: "s", IdempotencyKey: "k"})
}

func TestMemoryHogIsReportedAsOOM(t *testing.T) {
	_ = runAsDelegatedNobody(t) // as nobody in a delegated subtree, then as root
	mem := &ledger.Memory{}
	p := limitedProvider(t, []string{"python3", "-c", "import sys; sys.stdin.read(); x = bytearray(300 << 20); print(len(x))"},
		func(p *policies.Policy) { p.Limits.Memory = "48M" }, append(cgroupOptions(t), native.WithLedger(mem))...)
	_, err := dispatchOnce(t, p)
	var e *executor.Error
	if !errors.As(err, &e) || e.Code != executor.CodeOOM || !strings.Contains(e.Message, "memory limit of 50331648 bytes") {
		t.Fatalf("err = %v, want code oom naming the limit", err)
	}
	rows := mem.Records()
	if len(rows) != 1 || rows[0].ExitCode != nil || rows[0].Signal == nil || *rows[0].Signal != "SIGKILL" || rows[0].Outcome != ledger.OutcomeError {
		t.Fatalf("ledger rows = %+v, want one error row with the kill signal and a null exit code", rows)
	}
}

func TestForkBombStopsAtThePidsLimit(t *testing.T) {
	testenv.RequireRoot(t)
	bomb := `cat >/dev/null; i=0; while [ $i -lt 500 ]; do sleep 30 & i=$((i+1)); done 2>/dev/null; exit 3`
	p := limitedProvider(t, []string{"/bin/sh", "-c", bomb}, func(p *policies.Policy) { p.Limits.Pids = 20 })
	_, err := dispatchOnce(t, p)
	var e *executor.Error
	if !errors.As(err, &e) || e.Code != executor.CodeExit || !strings.Contains(e.Message, "pids limit") {
		t.Fatalf("err = %v, want an exit error whose message reports the pids limit", err)
	}
	// The host is unaffected: it still forks, and nothing of the bomb is left.
	if out, err := exec.Command("/bin/sh", "-c", "echo alive").Output(); err != nil || string(out) != "alive\n" {
		t.Fatalf("the host cannot fork after the bomb: %v", err)
	}
}

func TestCPUQuotaHoldsABusyLoop(t *testing.T) {
	testenv.RequireRoot(t)
	var mu sync.Mutex
	var used time.Duration
	busy := `import sys, time; sys.stdin.read(); end = time.time() + 1.5
while time.time() < end: pass
print(1)`
	p := limitedProvider(t, []string{"python3", "-c", busy}, func(p *policies.Policy) { p.Limits.CPUs = 0.2 },
		native.WithUsage(func(_ *executor.Request, u cgroups.Usage) { mu.Lock(); used = u.CPUTime; mu.Unlock() }))
	start := time.Now()
	if _, err := dispatchOnce(t, p); err != nil {
		t.Fatal(err)
	}
	wall := time.Since(start)
	mu.Lock()
	defer mu.Unlock()
	// Measured by the cgroup itself; a generous bound, not a timing test.
	if used <= 0 || float64(used) > 0.6*float64(wall) {
		t.Fatalf("the busy loop used %v of CPU in %v of wall time under a 0.2 CPU quota", used, wall)
	}
	t.Logf("CPU %v in %v wall under cpus=0.2", used, wall)
}

// leafCount counts this process's leaf directories under the provider's
// cgroup parents. Leaves are named after their owner ("<pid>-<start>-<id>"),
// so the leaves of other moat processes (test packages run in parallel)
// do not count.
func leafCount(t *testing.T, p *native.Provider) int {
	n := 0
	mine := strconv.Itoa(os.Getpid()) + "-"
	for _, parent := range p.Cgroups().Parents {
		ents, err := os.ReadDir(parent)
		if errors.Is(err, fs.ErrNotExist) {
			continue // a closed provider removed the parent it made: no leaf left
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if e.IsDir() && strings.HasPrefix(e.Name(), mine) {
				n++
			}
		}
	}
	return n
}

func TestNoLeftoverCgroupAfter100Dispatches(t *testing.T) {
	testenv.RequireRoot(t)
	p := limitedProvider(t, []string{"/bin/true"}, nil)
	before := leafCount(t, p)
	for i := range 100 {
		if _, err := dispatchOnce(t, p); err != nil {
			t.Fatalf("dispatch %d: %v", i, err)
		}
	}
	if n := leafCount(t, p); n != before {
		t.Fatalf("%d cgroup leaves after 100 dispatches, %d before", n, before)
	}
}

// A moat killed in the middle of a dispatch leaves its leaf behind; the next
// provider removes it at start.
func TestLeftoversOfAKilledMoatAreRemoved(t *testing.T) {
	if os.Getenv("MOAT_TEST_CRASHER") == "1" {
		p := limitedProvider(t, []string{"/bin/sleep", "60"}, nil)
		dispatchOnce(t, p) // killed by the parent test meanwhile
		return
	}
	testenv.RequireRoot(t)
	self, _ := os.Executable()
	crasher := exec.Command(self, "-test.run=^TestLeftoversOfAKilledMoatAreRemoved$")
	crasher.Env = append(os.Environ(), "MOAT_TEST_CRASHER=1")
	if err := crasher.Start(); err != nil {
		t.Fatal(err)
	}
	// Leaves are named <owner pid>-<owner start time>-<id>.
	parents := limitedProvider(t, []string{"/bin/true"}, nil).Cgroups().Parents
	prefix := filepath.Join(parents[0], strconv.Itoa(crasher.Process.Pid)+"-")
	deadline := time.Now().Add(20 * time.Second)
	for !hasLeaf(prefix) {
		if time.Now().After(deadline) {
			crasher.Process.Kill()
			t.Fatal("the crasher never created its leaf")
		}
		time.Sleep(20 * time.Millisecond)
	}
	crasher.Process.Signal(syscall.SIGKILL)
	crasher.Wait()
	if !hasLeaf(prefix) {
		t.Fatal("the killed moat's leaf vanished by itself; nothing to clean")
	}
	limitedProvider(t, []string{"/bin/true"}, nil) // New cleans stale leaves
	deadline = time.Now().Add(10 * time.Second)
	for hasLeaf(prefix) {
		if time.Now().After(deadline) {
			t.Fatalf("the leaf of the killed moat (pid %d) is still there", crasher.Process.Pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func hasLeaf(prefix string) bool {
	matches, _ := filepath.Glob(prefix + "*")
	return len(matches) > 0
}

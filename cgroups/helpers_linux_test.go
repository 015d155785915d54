package cgroups

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/conformance/testenv"
)

// helperVar switches a copy of the test binary into a helper process (see
// runHelper); helperArg carries its argument.
const (
	helperVar = "MOAT_CGROUPS_TEST_HELPER"
	helperArg = "MOAT_CGROUPS_TEST_HELPER_ARG"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperVar); mode != "" {
		os.Exit(runHelper(mode, os.Getenv(helperArg)))
	}
	// Children the tests orphan (a shell's background jobs killed with
	// it) are reparented to this process rather than to the host's init,
	// and reaped by reapOrphans (prctl(2), PR_SET_CHILD_SUBREAPER).
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "set child subreaper:", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// reapOrphans waits for the listed processes that became this process's
// children when their parent died, except the one exec.Cmd waits for.
func reapOrphans(pids []int, except int) {
	for _, p := range pids {
		if p != except {
			_, _ = unix.Wait4(p, nil, 0, nil)
		}
	}
}

// runHelper waits for one byte on stdin (the parent has put it in the leaf
// by then) and does one thing:
//
//	hog N    allocate and touch N MiB, then exit 0
//	spin D   burn CPU for the wall-clock duration D
//	sleep D  sleep for D
func runHelper(mode, arg string) int {
	if _, err := os.Stdin.Read(make([]byte, 1)); err != nil {
		fmt.Fprintln(os.Stderr, "helper: read release byte:", err)
		return 3
	}
	switch mode {
	case "devices":
		return devHelper(arg)
	case "hog":
		n, _ := strconv.Atoi(arg)
		var keep [][]byte
		for range n {
			b := make([]byte, 1<<20)
			for i := 0; i < len(b); i += 4096 {
				b[i] = 1
			}
			keep = append(keep, b)
		}
		fmt.Println("allocated", len(keep), "MiB")
		return 0
	case "spin":
		d, _ := time.ParseDuration(arg)
		x := 0
		for start := time.Now(); time.Since(start) < d; {
			for i := range 1000 {
				x += i
			}
		}
		return x & 0 // keep the loop from being optimised away
	case "sleep":
		d, _ := time.ParseDuration(arg)
		time.Sleep(d)
		return 0
	}
	fmt.Fprintln(os.Stderr, "helper: unknown mode", mode)
	return 2
}

func withOwner(o owner) Option { return func(c *config) { c.owner = &o } }
func withUnified() Option      { return func(c *config) { c.unified = true } }

var parentSeq atomic.Int64

// testParent is a parent name no other test (or helper) uses.
func testParent(kind string) string {
	return fmt.Sprintf("moat-test-%s-%d-%d", kind, os.Getpid(), parentSeq.Add(1))
}

// newManager makes a Manager below a fresh parent and removes every
// directory below that parent when the test ends, even on failure.
func newManager(t testing.TB, parent string, opts ...Option) *Manager {
	t.Helper()
	m, err := New(append([]Option{WithParent(parent)}, opts...)...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	parents := m.Posture().Parents
	t.Cleanup(func() {
		for _, p := range parents {
			removeTree(t, p)
		}
		if err := m.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		for _, p := range parents {
			if exists(p) {
				t.Errorf("parent %s left behind", p)
			}
		}
	})
	return m
}

// removeTree kills what runs in the leaves below dir (all started by this
// test) and removes them.
func removeTree(t testing.TB, dir string) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		sub := filepath.Join(dir, e.Name())
		removeTree(t, sub)
		for range 100 {
			pids, _ := readPids(sub)
			if len(pids) == 0 {
				break
			}
			for _, p := range pids {
				_ = unix.Kill(p, unix.SIGKILL)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err := rmdir(sub); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	}
}

// limitsOf builds OCI resources; zero leaves a limit out.
func limitsOf(memory, pids int64, cpus float64) *specs.LinuxResources {
	r := &specs.LinuxResources{}
	if memory > 0 {
		r.Memory = &specs.LinuxMemory{Limit: &memory}
	}
	if pids > 0 {
		r.Pids = &specs.LinuxPids{Limit: &pids}
	}
	if cpus > 0 {
		q, p := int64(cpus*100000), uint64(100000)
		r.CPU = &specs.LinuxCPU{Quota: &q, Period: &p}
	}
	return r
}

// started is a child in a leaf, released to run.
type started struct {
	cmd   *exec.Cmd
	begin time.Time
}

// lockedBuffer is a bytes.Buffer safe for exec.Cmd's copying goroutine
// and the test reading it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Len()
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startIn starts cmd inside leaf: at clone time with CLONE_INTO_CGROUP when
// the leaf has an fd (v2), else by Add before releasing the child, which
// blocks reading stdin until then.
func startIn(t testing.TB, leaf *Leaf, cmd *exec.Cmd) *started {
	t.Helper()
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	// The helper's stderr (a fork bomb's "Cannot fork" lines) goes to the
	// test log only when the test fails: written to the test's own stderr
	// it could split a "--- PASS" line that the VM summary looks for.
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	cmd.WaitDelay = 5 * time.Second // children that keep the pipe open do not hold Wait
	t.Cleanup(func() {
		if t.Failed() && stderr.Len() > 0 {
			t.Logf("%v stderr:\n%s", cmd.Args, stderr.String())
		}
	})
	fd, v2 := leaf.FD()
	if v2 {
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %v: %v", cmd.Args, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	if !v2 {
		if err := leaf.Add(cmd.Process.Pid); err != nil {
			t.Fatalf("Add: %v", err)
		}
	}
	if _, err := io.WriteString(in, "go\n"); err != nil {
		t.Fatalf("release child: %v", err)
	}
	in.Close()
	return &started{cmd: cmd, begin: time.Now()}
}

// helper returns a command running this test binary in a helper mode.
func helper(t testing.TB, mode, arg string) *exec.Cmd {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), helperVar+"="+mode, helperArg+"="+arg)
	return cmd
}

// killedBy reports the signal that ended a waited command, or 0.
func killedBy(err error) syscall.Signal {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return ws.Signal()
		}
	}
	return 0
}

// requireV1Limits skips unless this host gives root the three v1 limits.
func requireV1Limits(t testing.TB, m *Manager) {
	t.Helper()
	p := m.Posture()
	switch p.Layout {
	case V1, Hybrid:
	case Unified:
		// Not a missing capability: v2_limits_linux_test.go checks the
		// same limits on a v2 host.
		t.Skipf("cgroup layout is %v, not v1 or hybrid: the TestV2 tests cover it", p.Layout)
	default:
		testenv.Skipf(t, "cgroup layout is %v, not v1 or hybrid", p.Layout)
	}
	if err := p.Require(Memory, Pids, CPU); err != nil {
		testenv.Skipf(t, "v1 limits not available: %v", err)
	}
}

// leafDirs lists the directories below the manager's parents.
func leafDirs(t testing.TB, m *Manager) []string {
	t.Helper()
	var out []string
	for _, p := range m.Posture().Parents {
		ents, err := os.ReadDir(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if e.IsDir() {
				out = append(out, filepath.Join(p, e.Name()))
			}
		}
	}
	return out
}

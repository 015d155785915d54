package cgroups

import (
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/conformance/testenv"
)

// The limit checks are the same on every layout; the v1 tests and the v2
// tests (root, and rootless in a delegated subtree) run them with a Manager
// of their own.

// leafProcs lists the processes in a leaf, whatever its layout.
func leafProcs(leaf *Leaf) ([]int, error) {
	switch ops := leaf.ops.(type) {
	case *v1Leaf:
		return ops.procs()
	case *v2Leaf:
		return readPids(ops.dir)
	}
	return nil, nil
}

func checkOOM(t *testing.T, m *Manager) {
	leaf, err := m.Create("hog", limitsOf(64<<20, 0, 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { leaf.Delete() })
	c := startIn(t, leaf, helper(t, "hog", "200"))
	if err := c.cmd.Wait(); killedBy(err) != syscall.SIGKILL {
		t.Fatalf("hog allocating 200 MiB under a 64 MiB limit ended with %v, want SIGKILL", err)
	}
	u, err := leaf.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if !u.OOMKilled || u.OOMKills == 0 {
		t.Errorf("Stats = %+v, want an OOM kill", u)
	}
	if u.MemoryPeak > 64<<20+(1<<20) || u.MemoryPeak < 32<<20 {
		t.Errorf("MemoryPeak = %d, want between 32 MiB and the 64 MiB limit", u.MemoryPeak)
	}
	// Events reads the same kill, and nothing else.
	if ev, err := leaf.Events(); err != nil || !ev.OOMKilled || ev.OOMKills != u.OOMKills || ev.MemoryPeak != 0 {
		t.Errorf("Events = %+v, %v; want the OOM kill of Stats (%d) and no peak", ev, err, u.OOMKills)
	}
}

func checkUnderLimit(t *testing.T, m *Manager) {
	leaf, err := m.Create("fits", limitsOf(128<<20, 0, 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { leaf.Delete() })
	c := startIn(t, leaf, helper(t, "hog", "16"))
	if err := c.cmd.Wait(); err != nil {
		t.Fatalf("16 MiB under a 128 MiB limit: %v", err)
	}
	u, err := leaf.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if u.OOMKilled || u.MemoryPeak < 16<<20 {
		t.Errorf("Stats = %+v, want no OOM and a peak of at least 16 MiB", u)
	}
}

func checkPidsLimit(t *testing.T, m *Manager) {
	leaf, err := m.Create("bomb", limitsOf(0, 20, 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { leaf.Delete() })
	// Bounded: at most 500 sleeping children, all in the leaf.
	script := `read x; i=0; while [ $i -lt 500 ]; do sleep 60 & i=$((i+1)); done; wait`
	c := startIn(t, leaf, exec.Command("/bin/sh", "-c", script))
	var u Usage
	ok, err := poll(20*time.Second, func() (bool, error) {
		u, err = leaf.Stats()
		return u.PidsLimitHits > 0, err
	})
	if err != nil || !ok {
		t.Fatalf("pids limit never hit: %+v, %v", u, err)
	}
	if ev, err := leaf.Events(); err != nil || ev.PidsLimitHits == 0 || ev.PidsCurrent != 0 {
		t.Errorf("Events = %+v, %v; want the pids limit hits and no current count", ev, err)
	}
	if u.PidsCurrent > 20 || u.PidsCurrent < 10 {
		t.Errorf("PidsCurrent = %d, want at most the limit 20 (and the bomb near it)", u.PidsCurrent)
	}
	if err := exec.Command("/bin/true").Run(); err != nil {
		t.Errorf("the host cannot fork while the bomb runs: %v", err)
	}
	inside, err := leafProcs(leaf)
	if err != nil {
		t.Fatal(err)
	}
	if err := leaf.Kill(); err != nil {
		t.Fatal(err)
	}
	reapOrphans(inside, c.cmd.Process.Pid)
	if pids, err := leafProcs(leaf); err != nil || len(pids) != 0 {
		t.Errorf("after Kill the leaf still holds %v (%v)", pids, err)
	}
	// The shell may have given up ("Cannot fork") before Kill; the pids
	// charge drops once every task is reaped.
	_ = c.cmd.Wait()
	if ok, _ := poll(5*time.Second, func() (bool, error) { u, err := leaf.Stats(); return u.PidsCurrent == 0, err }); !ok {
		u, _ := leaf.Stats()
		t.Errorf("after Kill PidsCurrent = %d", u.PidsCurrent)
	}
}

func checkCPUQuota(t *testing.T, m *Manager) {
	leaf, err := m.Create("spin", limitsOf(0, 0, 0.2))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { leaf.Delete() })
	c := startIn(t, leaf, helper(t, "spin", "1500ms"))
	if err := c.cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	wall := time.Since(c.begin)
	u, err := leaf.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("wall %v, cpu %v, throttled %d periods (%v)", wall, u.CPUTime, u.CPUThrottled, u.CPUThrottledTime)
	if u.CPUTime <= 0 || float64(u.CPUTime) > 0.6*float64(wall) {
		t.Errorf("CPUTime = %v for %v of wall time, want above 0 and below 0.6 of it", u.CPUTime, wall)
	}
	if u.CPUThrottled == 0 {
		t.Errorf("no throttled period with a 0.2 CPU quota")
	}
}

func checkKill(t *testing.T, m *Manager) {
	leaf, err := m.Create("kill", limitsOf(64<<20, 20, 0.5))
	if err != nil {
		t.Fatal(err)
	}
	if l, ok := leaf.ops.(*v2Leaf); ok && !exists(filepath.Join(l.dir, "cgroup.kill")) {
		testenv.Skipf(t, "no cgroup.kill (kernel older than 5.14)")
	}
	c := startIn(t, leaf, exec.Command("/bin/sh", "-c", "read x; sleep 60 & sleep 60 & sleep 60"))
	if _, err := poll(10*time.Second, func() (bool, error) { u, err := leaf.Stats(); return u.PidsCurrent >= 3, err }); err != nil {
		t.Fatal(err)
	}
	inside, err := leafProcs(leaf)
	if err != nil {
		t.Fatal(err)
	}
	if err := leaf.Kill(); err != nil {
		t.Fatal(err)
	}
	reapOrphans(inside, c.cmd.Process.Pid)
	if sig := killedBy(c.cmd.Wait()); sig != syscall.SIGKILL {
		t.Errorf("child ended with signal %v, want SIGKILL", sig)
	}
	if pids, err := leafProcs(leaf); err != nil || len(pids) != 0 {
		t.Errorf("after Kill the leaf still holds %v (%v)", pids, err)
	}
	if err := leaf.Delete(); err != nil {
		t.Fatal(err)
	}
	if err := leaf.Delete(); err != nil {
		t.Errorf("second Delete: %v", err)
	}
	if d := leafDirs(t, m); len(d) != 0 {
		t.Errorf("left behind: %v", d)
	}
}

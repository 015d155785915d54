package cgroups

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/conformance/testenv"
)

func rootManager(t *testing.T) *Manager {
	t.Helper()
	testenv.RequireRoot(t)
	m := newManager(t, testParent("v1"))
	requireV1Limits(t, m)
	return m
}

func TestMemoryHogIsOOMKilled(t *testing.T) {
	m := rootManager(t)
	leaf, err := m.Create("hog", limitsOf(64<<20, 0, 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { leaf.Delete() })
	c := startIn(t, leaf, helper(t, "hog", "200"))
	err = c.cmd.Wait()
	if sig := killedBy(err); sig != syscall.SIGKILL {
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
}

func TestMemoryUnderLimitIsNotOOM(t *testing.T) {
	m := rootManager(t)
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

func TestForkBombStopsAtPidsLimit(t *testing.T) {
	m := rootManager(t)
	leaf, err := m.Create("bomb", limitsOf(0, 20, 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { leaf.Delete() })
	// Bounded: at most 500 sleeping children, all in the leaf.
	script := `read x; i=0; while [ $i -lt 500 ]; do sleep 60 & i=$((i+1)); done; wait`
	c := startIn(t, leaf, exec.Command("/bin/sh", "-c", script))
	var u Usage
	ok, err := poll(10*time.Second, func() (bool, error) {
		u, err = leaf.Stats()
		return u.PidsLimitHits > 0, err
	})
	if err != nil || !ok {
		t.Fatalf("pids limit never hit: %+v, %v", u, err)
	}
	if u.PidsCurrent > 20 || u.PidsCurrent < 10 {
		t.Errorf("PidsCurrent = %d, want at most the limit 20 (and the bomb near it)", u.PidsCurrent)
	}
	if err := exec.Command("/bin/true").Run(); err != nil {
		t.Errorf("the host cannot fork while the bomb runs: %v", err)
	}
	inside, err := leaf.ops.(*v1Leaf).procs()
	if err != nil {
		t.Fatal(err)
	}
	if err := leaf.Kill(); err != nil {
		t.Fatal(err)
	}
	reapOrphans(inside, c.cmd.Process.Pid)
	if pids, err := leaf.ops.(*v1Leaf).procs(); err != nil || len(pids) != 0 {
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

func TestCPUQuotaThrottles(t *testing.T) {
	m := rootManager(t)
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

func TestKillEmptiesLeaf(t *testing.T) {
	m := rootManager(t)
	leaf, err := m.Create("kill", limitsOf(64<<20, 20, 0.5))
	if err != nil {
		t.Fatal(err)
	}
	c := startIn(t, leaf, exec.Command("/bin/sh", "-c", "read x; sleep 60 & sleep 60 & sleep 60"))
	if _, err := poll(5*time.Second, func() (bool, error) { u, err := leaf.Stats(); return u.PidsCurrent >= 3, err }); err != nil {
		t.Fatal(err)
	}
	inside, err := leaf.ops.(*v1Leaf).procs()
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

func TestDeleteKillsRunningProcesses(t *testing.T) {
	m := rootManager(t)
	leaf, err := m.Create("busy", nil)
	if err != nil {
		t.Fatal(err)
	}
	c := startIn(t, leaf, helper(t, "sleep", "60s"))
	if err := leaf.Delete(); err != nil {
		t.Fatal(err)
	}
	if sig := killedBy(c.cmd.Wait()); sig != syscall.SIGKILL {
		t.Errorf("child ended with signal %v, want SIGKILL", sig)
	}
	if d := leafDirs(t, m); len(d) != 0 {
		t.Errorf("left behind: %v", d)
	}
}

func TestCreateDeleteCyclesLeaveNothing(t *testing.T) {
	m := rootManager(t)
	for i := range 100 {
		leaf, err := m.Create("cycle-"+strconv.Itoa(i), limitsOf(64<<20, 20, 0.5))
		if err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		if err := leaf.Delete(); err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
	}
	if d := leafDirs(t, m); len(d) != 0 {
		t.Errorf("left behind after 100 cycles: %v", d)
	}
}

func TestLimitsAreWritten(t *testing.T) {
	m := rootManager(t)
	leaf, err := m.Create("values", limitsOf(64<<20, 20, 0.5))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { leaf.Delete() })
	v1 := leaf.ops.(*v1Leaf)
	want := map[string]string{
		"memory/memory.limit_in_bytes": "67108864",
		"pids/pids.max":                "20",
		"cpu/cpu.cfs_quota_us":         "50000",
		"cpu/cpu.cfs_period_us":        "100000",
	}
	if m.Posture().Memory.Reason == "" { // swap accounting on
		want["memory/memory.memsw.limit_in_bytes"] = "67108864"
	}
	for k, v := range want {
		ctl, file := filepath.Split(k)
		b, err := os.ReadFile(filepath.Join(v1.ctl[filepath.Clean(ctl)], file))
		if err != nil {
			t.Fatal(err)
		}
		if got := string(b[:len(b)-1]); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
}

func TestCleanStale(t *testing.T) {
	testenv.RequireRoot(t)
	parent := testParent("stale")
	live := newManager(t, parent)
	requireV1Limits(t, live)

	gone := exec.Command("/bin/true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	dead, err := New(WithParent(parent), withOwner(owner{pid: gone.Process.Pid, start: 1}))
	if err != nil {
		t.Fatal(err)
	}
	self, err := selfOwner()
	if err != nil {
		t.Fatal(err)
	}
	reused, err := New(WithParent(parent), withOwner(owner{pid: self.pid, start: self.start + 1}))
	if err != nil {
		t.Fatal(err)
	}
	deadLeaf, err := dead.Create("dead", limitsOf(64<<20, 20, 0))
	if err != nil {
		t.Fatal(err)
	}
	orphan := startIn(t, deadLeaf, helper(t, "sleep", "60s"))
	if _, err := reused.Create("reused", nil); err != nil {
		t.Fatal(err)
	}
	mine, err := live.Create("mine", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mine.Delete() })

	if err := live.CleanStale(); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, d := range leafDirs(t, live) {
		got[filepath.Base(d)] = true
	}
	if !got[self.leafName("mine")] || len(got) != 1 {
		t.Errorf("after CleanStale: %v, want only %s", got, self.leafName("mine"))
	}
	if sig := killedBy(orphan.cmd.Wait()); sig != syscall.SIGKILL {
		t.Errorf("the stale leaf's process ended with %v, want SIGKILL", sig)
	}
}

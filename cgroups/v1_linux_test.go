package cgroups

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/moat-sandbox/moat/conformance/testenv"
)

func rootManager(t *testing.T) *Manager {
	t.Helper()
	testenv.RequireRoot(t)
	m := newManager(t, testParent("v1"))
	requireV1Limits(t, m)
	return m
}

func TestMemoryHogIsOOMKilled(t *testing.T)     { checkOOM(t, rootManager(t)) }
func TestMemoryUnderLimitIsNotOOM(t *testing.T) { checkUnderLimit(t, rootManager(t)) }
func TestForkBombStopsAtPidsLimit(t *testing.T) { checkPidsLimit(t, rootManager(t)) }
func TestCPUQuotaThrottles(t *testing.T)        { checkCPUQuota(t, rootManager(t)) }
func TestKillEmptiesLeaf(t *testing.T)          { checkKill(t, rootManager(t)) }

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

	// A period other than the kernel's default is written.
	q, per := int64(25000), uint64(50000)
	odd, err := m.Create("period", &specs.LinuxResources{CPU: &specs.LinuxCPU{Quota: &q, Period: &per}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { odd.Delete() })
	b, err := os.ReadFile(filepath.Join(odd.ops.(*v1Leaf).ctl["cpu"], "cpu.cfs_period_us"))
	if err != nil || string(b) != "50000\n" {
		t.Errorf("cpu.cfs_period_us = %q, %v; want 50000", b, err)
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

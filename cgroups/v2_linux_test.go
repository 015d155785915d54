package cgroups

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/conformance/testenv"
)

// v2Manager uses the unified hierarchy: the real one on a v2 host, the
// controller-less cgroup2 mount on a hybrid host (creation, clone-time join,
// kill, CPU time and removal still work there, limits do not).
func v2Manager(t *testing.T) *Manager {
	t.Helper()
	testenv.RequireRoot(t)
	h, err := Detect()
	if err != nil {
		t.Fatal(err)
	}
	if h.Unified == "" {
		testenv.Skipf(t, "no cgroup2 mount")
	}
	m := newManager(t, testParent("v2"), withUnified())
	if _, ok := m.tree.(*v2Tree); !ok {
		t.Fatalf("no v2 tree: %+v", m.Posture())
	}
	return m
}

func TestV2CloneIntoLeafKillDelete(t *testing.T) {
	m := v2Manager(t)
	leaf, err := m.Create("v2", limitsOf(64<<20, 20, 0.5))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { leaf.Delete() })
	if _, ok := leaf.FD(); !ok {
		t.Fatal("no cgroup fd on v2")
	}
	c := startIn(t, leaf, helper(t, "spin", "60s"))
	b, err := os.ReadFile("/proc/" + itoa(c.cmd.Process.Pid) + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	dir := leaf.ops.(*v2Leaf).dir
	if !strings.Contains(string(b), "0::") || !strings.HasSuffix(strings.TrimSpace(unifiedLine(string(b))), "/"+filepath.Base(dir)) {
		t.Fatalf("child not born in the leaf: %s", b)
	}
	time.Sleep(100 * time.Millisecond)
	if err := leaf.Kill(); err != nil {
		t.Fatal(err)
	}
	if sig := killedBy(c.cmd.Wait()); sig != syscall.SIGKILL {
		t.Errorf("child ended with signal %v, want SIGKILL", sig)
	}
	u, err := leaf.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if u.CPUTime <= 0 {
		t.Errorf("CPUTime = %v after spinning", u.CPUTime)
	}
	if err := leaf.Delete(); err != nil {
		t.Fatal(err)
	}
	if _, ok := leaf.FD(); ok {
		t.Error("FD still reported after Delete")
	}
	if exists(dir) {
		t.Errorf("%s left behind", dir)
	}
	if err := leaf.Delete(); err != nil {
		t.Errorf("second Delete: %v", err)
	}
}

func TestV2PostureOnHybrid(t *testing.T) {
	m := v2Manager(t)
	p := m.Posture()
	if p.Layout != Hybrid {
		t.Skipf("layout is %v; this checks the controller-less cgroup2 mount of a hybrid host", p.Layout)
	}
	if !p.Degraded() || p.Memory.Enforced || p.Memory.Reason == "" || p.Fix == "" {
		t.Errorf("posture on a cgroup2 mount without controllers = %+v, want degraded with reasons", p)
	}
}

func TestV2CreateDeleteCyclesLeaveNothing(t *testing.T) {
	m := v2Manager(t)
	for i := range 100 {
		leaf, err := m.Create("c"+itoa(i), nil)
		if err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		if err := leaf.Delete(); err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
	}
	if d := leafDirs(t, m); len(d) != 0 {
		t.Errorf("left behind: %v", d)
	}
}

func unifiedLine(procCgroup string) string {
	for _, l := range strings.Split(procCgroup, "\n") {
		if strings.HasPrefix(l, "0::") {
			return l
		}
	}
	return ""
}

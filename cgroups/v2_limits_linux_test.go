package cgroups

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/conformance/testenv"
)

// The limits on a pure cgroup v2 host: memory.max, pids.max, cpu.max,
// cgroup.kill and a delegated subtree used by an unprivileged user. They run
// on any v2 host (`make vm-test` boots one: stock Debian kernel, no v1
// hierarchy); v1_linux_test.go and rootless_linux_test.go check the same on
// v1 and hybrid hosts, where these skip.

// v2DelegatedVar carries, into the re-run as nobody, the delegated subtree
// root; it also marks that process as the re-run.
const v2DelegatedVar = "MOAT_CGROUPS_TEST_V2_DELEGATED"

// requireUnified returns the host when it is pure cgroup v2.
func requireUnified(t *testing.T) *Host {
	t.Helper()
	h, err := Detect()
	if err != nil {
		t.Fatal(err)
	}
	switch h.Layout {
	case Unified:
		return h
	case NoCgroups:
		testenv.Skipf(t, "no cgroup filesystem is mounted")
	}
	t.Skipf("cgroup layout is %v: these check the cgroup v2 limits; v1_linux_test.go covers this layout", h.Layout)
	return nil
}

// v2RootManager is a Manager as root with its parent right below the
// hierarchy root, which the no-internal-process rule exempts.
func v2RootManager(t *testing.T) *Manager {
	t.Helper()
	testenv.RequireRoot(t)
	requireUnified(t)
	m := newManager(t, "/"+testParent("v2lim"))
	requireV2Limits(t, m)
	return m
}

func requireV2Limits(t *testing.T, m *Manager) {
	t.Helper()
	if err := m.Posture().Require(Memory, Pids, CPU); err != nil {
		testenv.Skipf(t, "cgroup v2 limits not available: %v (%+v)", err, m.Posture())
	}
	if _, ok := m.tree.(*v2Tree); !ok {
		t.Fatalf("no v2 tree on a v2 host: %+v", m.Posture())
	}
}

func TestV2MemoryMaxOOMKills(t *testing.T)      { checkOOM(t, v2RootManager(t)) }
func TestV2MemoryUnderMaxIsNotOOM(t *testing.T) { checkUnderLimit(t, v2RootManager(t)) }
func TestV2PidsMaxStopsForkBomb(t *testing.T)   { checkPidsLimit(t, v2RootManager(t)) }
func TestV2CPUMaxThrottles(t *testing.T)        { checkCPUQuota(t, v2RootManager(t)) }
func TestV2KillEmptiesLeaf(t *testing.T)        { checkKill(t, v2RootManager(t)) }

func TestV2LimitsAreWritten(t *testing.T) {
	m := v2RootManager(t)
	leaf, err := m.Create("values", limitsOf(64<<20, 20, 0.5))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { leaf.Delete() })
	dir := leaf.ops.(*v2Leaf).dir
	want := map[string]string{"memory.max": "67108864", "pids.max": "20", "cpu.max": "50000 100000"}
	if exists(filepath.Join(dir, "memory.swap.max")) { // swap accounting on: swap off for the sandbox
		want["memory.swap.max"] = "0"
	}
	for file, v := range want {
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(string(b)); got != v {
			t.Errorf("%s = %q, want %q", file, got, v)
		}
	}
}

func TestV2CleanStale(t *testing.T) {
	m := v2RootManager(t)
	parent := strings.TrimPrefix(m.Posture().Parents[0], mustDetect(t).Unified)
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
	deadLeaf, err := dead.Create("dead", limitsOf(64<<20, 20, 0))
	if err != nil {
		t.Fatal(err)
	}
	orphan := startIn(t, deadLeaf, helper(t, "sleep", "60s"))
	mine, err := m.Create("mine", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mine.Delete() })
	if err := m.CleanStale(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range leafDirs(t, m) {
		got = append(got, filepath.Base(d))
	}
	if len(got) != 1 || got[0] != self.leafName("mine") {
		t.Errorf("after CleanStale: %v, want only %s", got, self.leafName("mine"))
	}
	if sig := killedBy(orphan.cmd.Wait()); sig != syscall.SIGKILL {
		t.Errorf("the stale leaf's process ended with %v, want SIGKILL", sig)
	}
}

// TestV2DelegatedSubtreeAsNobody delegates a subtree to nobody the way
// systemd does for Delegate= (the directory and its cgroup.procs,
// cgroup.subtree_control and cgroup.threads chowned), starts a copy of the
// test binary as nobody inside it, and there runs the limit checks through
// a Manager nobody made below it.
func TestV2DelegatedSubtreeAsNobody(t *testing.T) {
	if d := os.Getenv(v2DelegatedVar); d != "" {
		if os.Geteuid() != testenv.NobodyUID {
			t.Fatalf("body runs as uid %d", os.Geteuid())
		}
		checkV2Delegated(t, d)
		return
	}
	testenv.RequireRoot(t)
	h := requireUnified(t)
	for _, c := range v2Wanted {
		if why := enableDown([]string{h.Unified}, c, map[string][]string{}); why != "" {
			testenv.Skipf(t, "the %s controller cannot be enabled at the cgroup2 root: %s", c, why)
		}
	}
	deleg := filepath.Join(h.Unified, testParent("deleg2"))
	runner := filepath.Join(deleg, "runner")
	for _, d := range []string{deleg, runner} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{"", "cgroup.procs", "cgroup.subtree_control", "cgroup.threads"} {
			if err := os.Chown(filepath.Join(d, p), testenv.NobodyUID, testenv.NobodyGID); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Cleanup(func() {
		removeTree(t, deleg)
		if err := rmdir(deleg); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	// Born in the delegated runner group, as a systemd user manager's
	// children are: moving itself there as nobody is refused, the common
	// ancestor's cgroup.procs being root's.
	t.Setenv(v2DelegatedVar, deleg)
	testenv.RunAsUserIn(t, testenv.NobodyUID, testenv.NobodyGID, runner)
}

// TestV2DelegatedSubtreeAsCaller runs the limit checks as the calling
// unprivileged user in the subtree delegated to it: the group enclosing its
// own cgroup, as in a systemd user session's
// `systemd-run --user --scope -p Delegate=yes go test ./cgroups`. As root
// the test above covers delegation.
func TestV2DelegatedSubtreeAsCaller(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("runs as an unprivileged caller; as root TestV2DelegatedSubtreeAsNobody covers delegation")
	}
	h := requireUnified(t)
	if h.SelfUnified == "" {
		testenv.Skipf(t, "this process's cgroup is outside the cgroup2 mount")
	}
	deleg := filepath.Dir(h.SelfUnified)
	for _, p := range []string{deleg, filepath.Join(deleg, "cgroup.procs"), filepath.Join(deleg, "cgroup.subtree_control")} {
		if unix.Faccessat(unix.AT_FDCWD, p, unix.W_OK, unix.AT_EACCESS) != nil {
			testenv.Skipf(t, "uid %d has no cgroup2 subtree delegated around its cgroup (%s is not writable): "+
				"run the tests in a delegated scope, `systemd-run --user --scope -p Delegate=yes ...`", os.Geteuid(), p)
		}
	}
	checkV2Delegated(t, deleg)
}

// checkV2Delegated makes a Manager below the delegated group deleg (whose
// parent enables the controllers, as systemd's delegation does) and runs
// the limit checks in it without root.
func checkV2Delegated(t *testing.T, deleg string) {
	h := mustDetect(t)
	if !strings.HasPrefix(h.SelfUnified, deleg+"/") {
		t.Fatalf("this process's cgroup %s is not inside the delegated %s", h.SelfUnified, deleg)
	}
	m := newManager(t, strings.TrimPrefix(deleg, h.Unified)+"/"+testParent("user"))
	if err := m.Posture().Require(Memory, Pids, CPU); err != nil {
		t.Fatalf("posture in a delegated subtree as uid %d: %v (%+v)", os.Geteuid(), err, m.Posture())
	}
	if err := m.CleanStale(); err != nil {
		t.Fatal(err)
	}
	t.Run("clone-into-leaf", func(t *testing.T) { checkV2CloneInto(t, m) })
	t.Run("memory.max", func(t *testing.T) { checkOOM(t, m) })
	t.Run("pids.max", func(t *testing.T) { checkPidsLimit(t, m) })
	t.Run("cpu.max", func(t *testing.T) { checkCPUQuota(t, m) })
	t.Run("cgroup.kill", func(t *testing.T) { checkKill(t, m) })
}

func checkV2CloneInto(t *testing.T, m *Manager) {
	leaf, err := m.Create("born", limitsOf(64<<20, 20, 0.5))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { leaf.Delete() })
	c := startIn(t, leaf, helper(t, "sleep", "60s"))
	b, err := os.ReadFile("/proc/" + itoa(c.cmd.Process.Pid) + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	if dir := leaf.ops.(*v2Leaf).dir; !strings.HasSuffix(strings.TrimSpace(unifiedLine(string(b))), "/"+filepath.Base(dir)) {
		t.Fatalf("child not born in %s: %s", dir, b)
	}
	if err := leaf.Delete(); err != nil {
		t.Fatal(err)
	}
	if sig := killedBy(c.cmd.Wait()); sig != syscall.SIGKILL {
		t.Errorf("child ended with signal %v, want SIGKILL", sig)
	}
}

func mustDetect(t *testing.T) *Host {
	t.Helper()
	h, err := Detect()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

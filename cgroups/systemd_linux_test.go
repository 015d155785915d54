package cgroups

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/conformance/testenv"
	"golang.org/x/sys/unix"
)

// scopeChildVar marks the re-run of TestSystemdScopeWithoutWrapper that
// plays the moat process; its value is the user bus address.
const scopeChildVar = "MOAT_CGROUPS_TEST_SCOPE_CHILD"

// testUserBus finds the user's systemd manager as the CLI does.
func testUserBus() string {
	if a := os.Getenv("DBUS_SESSION_BUS_ADDRESS"); a != "" {
		return a
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		if fi, err := os.Stat(filepath.Join(d, "bus")); err == nil && fi.Mode()&os.ModeSocket != 0 {
			return "unix:path=" + filepath.Join(d, "bus")
		}
	}
	return ""
}

// requireUserManager skips the test plainly ("not this layout") unless it
// runs as an unprivileged user with a systemd user manager on pure cgroup
// v2 (the Vagrant VM's user pass), and returns that manager's bus.
func requireUserManager(t *testing.T) string {
	t.Helper()
	if os.Geteuid() == 0 {
		t.Skip("not this layout: runs as an unprivileged user with a systemd user manager")
	}
	if h := mustDetect(t); h.Layout != Unified {
		t.Skipf("not this layout: needs pure cgroup v2 (layout %v)", h.Layout)
	}
	bus := testUserBus()
	if bus == "" {
		t.Skip("not this layout: no systemd user bus ($DBUS_SESSION_BUS_ADDRESS, $XDG_RUNTIME_DIR/bus)")
	}
	return bus
}

// undelegated makes, below this test's own (delegated) cgroup, a group
// whose cgroup.controllers is empty: its parent never enables a controller
// for it. A process started there is where a login shell's processes are
// on a systemd host: in a group no limit can be set below, so the test
// runner's own delegated scope cannot help it.
func undelegated(t *testing.T) string {
	t.Helper()
	h := mustDetect(t)
	base := filepath.Join(h.SelfUnified, testParent("nodeleg"))
	dir := filepath.Join(base, "h")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Skipf("not this layout: cannot make a group below this test's own cgroup %s: %v", h.SelfUnified, err)
	}
	t.Cleanup(func() {
		for _, d := range []string{dir, base} {
			if err := rmdir(d); err != nil {
				t.Errorf("cleanup %s: %v", d, err)
			}
		}
	})
	if avail, _ := fields(dir, "cgroup.controllers"); len(avail) != 0 {
		t.Fatalf("%s offers controllers %v; the test needs a group without", dir, avail)
	}
	return dir
}

// TestSystemdScopeWithoutWrapper: an unprivileged moat whose cgroup offers
// no controllers (not delegated) gets a transient Delegate=yes scope from
// the user's systemd manager over the user bus, enforces memory (an OOM
// kill), pids (a fork bomb stops) and cpu limits below it, and leaves no
// scope or leaf behind once it exits; two such processes at once get a
// scope each. It needs a systemd user manager (the Vagrant VM's user
// pass), and skips plainly elsewhere.
func TestSystemdScopeWithoutWrapper(t *testing.T) {
	if bus := os.Getenv(scopeChildVar); bus != "" {
		scopeChild(t, bus)
		return
	}
	bus := requireUserManager(t)
	dir := undelegated(t)
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)

	type run struct {
		cmd *exec.Cmd
		out bytes.Buffer
		err error
	}
	start := func() *run {
		r := &run{cmd: exec.Command(os.Args[0], "-test.run", "^TestSystemdScopeWithoutWrapper$", "-test.v", "-test.count=1")}
		r.cmd.Env = append(os.Environ(), scopeChildVar+"="+bus)
		r.cmd.Stdout, r.cmd.Stderr = &r.out, &r.out
		// Born in the undelegated group (clone3 CLONE_INTO_CGROUP).
		r.cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
		if err := r.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return r
	}
	check := func(r *run) string {
		if r.err != nil || !strings.Contains(r.out.String(), "--- PASS: TestSystemdScopeWithoutWrapper") {
			t.Fatalf("the moat process in %s: %v\n%s", dir, r.err, r.out.String())
		}
		_, scope, ok := strings.Cut(r.out.String(), "SCOPE=")
		scope, _, _ = strings.Cut(scope, "\n")
		if !ok || !strings.HasSuffix(scope, ".scope") {
			t.Fatalf("the child named no scope:\n%s", r.out.String())
		}
		return scope
	}

	t.Run("one", func(t *testing.T) {
		r := start()
		r.err = r.cmd.Wait()
		scope := check(r)
		gone(t, scope)
	})
	t.Run("two-at-once", func(t *testing.T) {
		rs := []*run{start(), start()}
		var wg sync.WaitGroup
		for _, r := range rs {
			wg.Add(1)
			go func() { defer wg.Done(); r.err = r.cmd.Wait() }()
		}
		wg.Wait()
		a, b := check(rs[0]), check(rs[1])
		if a == b {
			t.Fatalf("both processes used the scope %s", a)
		}
		gone(t, a)
		gone(t, b)
	})
	if procs, _ := fields(dir, "cgroup.procs"); len(procs) != 0 {
		t.Errorf("processes left in %s: %v", dir, procs)
	}
}

// gone waits for the scope's cgroup (and every leaf moat made in it) to
// disappear: systemd collects a scope whose processes all exited.
func gone(t *testing.T, scopeDir string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for exists(scopeDir) {
		if time.Now().After(deadline) {
			var left []string
			filepath.WalkDir(scopeDir, func(p string, d os.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					left = append(left, p)
				}
				return nil
			})
			t.Fatalf("the scope %s is still there 10 s after its process exited: %v", scopeDir, left)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// scopeChild is the moat process: it must get its limits from a scope.
func scopeChild(t *testing.T, bus string) {
	before := mustDetect(t)
	if avail, _ := fields(before.SelfUnified, "cgroup.controllers"); len(avail) != 0 {
		t.Fatalf("the child starts in %s, which offers %v", before.SelfUnified, avail)
	}
	m, err := New(WithSystemdBus(bus))
	if err != nil {
		t.Fatal(err)
	}
	p := m.Posture()
	if p.Source != SourceSystemdScope {
		t.Fatalf("Source = %q (%s), want %q; posture %+v", p.Source, p.SourceDetail, SourceSystemdScope, p)
	}
	if err := p.Require(Memory, Pids, CPU); err != nil {
		t.Fatalf("in a systemd scope: %v", err)
	}
	h := mustDetect(t)
	scope := filepath.Dir(h.SelfUnified)
	if !strings.HasSuffix(scope, ".scope") || !strings.HasPrefix(filepath.Base(scope), scopePrefix+strconv.Itoa(os.Getpid())+"-") {
		t.Fatalf("this process is in %s, want a leaf of its moat scope", h.SelfUnified)
	}
	os.Stdout.WriteString("SCOPE=" + scope + "\n")
	// A second Manager of the same process (a library's provider and its
	// pool) shares the scope instead of asking for another.
	m2, err := New(WithSystemdBus(bus))
	if err != nil {
		t.Fatal(err)
	}
	if p2 := m2.Posture(); p2.Source != SourceSystemdScope || p2.Parents[0] != p.Parents[0] {
		t.Errorf("a second Manager: %+v, want the same scope and parent %v", p2, p.Parents)
	}
	m2.Close()
	t.Run("memory.max", func(t *testing.T) { checkOOM(t, m) })
	t.Run("pids.max", func(t *testing.T) { checkPidsLimit(t, m) })
	t.Run("cpu.max", func(t *testing.T) { checkCPUQuota(t, m) })
	if left := leafDirs(t, m); len(left) != 0 {
		t.Errorf("leaves left: %v", left)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if exists(p.Parents[0]) {
		t.Errorf("Close left %s", p.Parents[0])
	}
}

// TestRootlessV2WithoutBus: unprivileged, in a cgroup2 group that is not
// delegated (the controller-less cgroup2 mount of a hybrid host stands in
// for a login session scope), moat with no user bus, or with one nobody
// answers on, behaves as before (no cgroup, every limit degraded) and says
// why: not delegated, and no bus or the error talking to it.
func TestRootlessV2WithoutBus(t *testing.T) {
	if testenv.RunAsUser(t, testenv.NobodyUID, testenv.NobodyGID) {
		return
	}
	h := mustDetect(t)
	if h.Unified == "" || h.SelfUnified == "" {
		testenv.Skipf(t, "no cgroup2 mount that holds this process")
	}
	if writable(h.SelfUnified) {
		t.Skipf("not this layout: this process's cgroup2 group %s is writable (delegated)", h.SelfUnified)
	}
	for _, tc := range []struct {
		name, bus, want string
	}{
		{"no bus", "", "no systemd user bus was given"},
		{"nobody answers", "unix:path=" + filepath.Join(t.TempDir(), "no-bus"), "connect to the user's systemd manager"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := New(withUnified(), WithSystemdBus(tc.bus))
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			p := m.Posture()
			if p.Source != SourceNone || !strings.Contains(p.SourceDetail, "is not delegated to uid") || !strings.Contains(p.SourceDetail, tc.want) {
				t.Fatalf("posture %+v; want source none saying the group is not delegated and %q", p, tc.want)
			}
			if !p.Degraded() || p.Memory.Enforced || !strings.Contains(p.Memory.Reason, tc.want) || p.Fix == "" {
				t.Fatalf("posture %+v; want every limit degraded with the reason and a fix", p)
			}
			if _, err := m.Create("x", limitsOf(64<<20, 0, 0)); !errors.Is(err, ErrNoDelegation) {
				t.Fatalf("Create = %v, want ErrNoDelegation", err)
			}
		})
	}
}

// delegatedChildVar marks the re-run of TestDelegatedCgroupUsedAsIs that
// runs alone in a Delegate=yes scope.
const delegatedChildVar = "MOAT_CGROUPS_TEST_DELEGATED_CHILD"

// TestDelegatedCgroupUsedAsIs: a moat process alone in a cgroup already
// delegated to it (here a `systemd-run --user --scope -p Delegate=yes`)
// uses it, moving itself into a leaf of its own so that controllers can be
// enabled for the leaves' parent, and asks systemd for nothing: the source
// is "delegated" even with a bus. It needs a systemd user manager (the
// Vagrant VM's user pass) and skips plainly elsewhere.
func TestDelegatedCgroupUsedAsIs(t *testing.T) {
	if bus := os.Getenv(delegatedChildVar); bus != "" {
		before := mustDetect(t).SelfUnified
		m, err := New(WithSystemdBus(bus))
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		p := m.Posture()
		if p.Source != SourceDelegated || p.Require(Memory, Pids, CPU) != nil {
			t.Fatalf("alone in the delegated %s: posture %+v, want source delegated, every limit enforced", before, p)
		}
		after := mustDetect(t).SelfUnified
		if filepath.Dir(after) != before || !strings.HasPrefix(filepath.Base(after), selfLeafPrefix) {
			t.Fatalf("this process moved from %s to %s, want a %s leaf below it", before, after, selfLeafPrefix)
		}
		t.Run("pids.max", func(t *testing.T) { checkPidsLimit(t, m) })
		return
	}
	bus := requireUserManager(t)
	if _, err := exec.LookPath("systemd-run"); err != nil {
		t.Skip("not this layout: no systemd-run")
	}
	cmd := exec.Command("systemd-run", "--user", "--scope", "-p", "Delegate=yes", "--quiet", "--",
		os.Args[0], "-test.run", "^TestDelegatedCgroupUsedAsIs$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), delegatedChildVar+"="+bus)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestDelegatedCgroupUsedAsIs") {
		t.Fatalf("the moat process in a delegated scope: %v\n%s", err, out)
	}
}

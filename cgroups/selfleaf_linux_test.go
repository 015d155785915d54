package cgroups

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/conformance/testenv"
	"golang.org/x/sys/unix"
)

// givenBackChildVar marks the re-run of TestDelegatedGroupGivenBack that
// plays the moat process.
const givenBackChildVar = "MOAT_CGROUPS_TEST_GIVEN_BACK_CHILD"

// TestDelegatedGroupGivenBack: a moat process alone in a delegated group (a
// service's or a scope's own) moves itself into a leaf and turns controllers
// on in the group, which then can take no process (the no-internal-process
// rule); its Close gives everything back: the process is in the group
// again, the group's subtree_control is as it was, nothing is left below,
// and another process can be started there. A second moat in the same group
// then works as the first did. It needs a systemd user manager (the Vagrant
// VM's user pass) and skips plainly elsewhere.
func TestDelegatedGroupGivenBack(t *testing.T) {
	if os.Getenv(givenBackChildVar) != "" {
		givenBackChild(t)
		return
	}
	if testenv.InDelegatedScope(t) {
		return
	}
	group := testenv.DelegatedGroup(t)
	for range 2 { // the second moat reuses the group the first gave back
		runMoatIn(t, group, t.Name())
		testenv.CheckGivenBack(t, group)
	}
}

// runMoatIn runs the re-run of the test name as the moat process, born in
// group, and fails t unless it passes.
func runMoatIn(t *testing.T, group, name string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", "^"+name+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), givenBackChildVar+"=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := testenv.StartIn(group, cmd); err != nil {
		t.Fatalf("start the moat process in %s: %v", group, err)
	}
	if err := cmd.Wait(); err != nil || !strings.Contains(out.String(), "--- PASS: "+name+" (") {
		t.Fatalf("the moat process in %s: %v\n%s", group, err, out.String())
	}
}

// TestDelegatedGroupKeptWhileASandboxRuns: a Close while a sandbox still
// runs below the group (a caller that closes too early) gives nothing back:
// the kernel would refuse to turn the controllers off, and moving moat back
// must not happen under a live sandbox. Close says so, the sandbox keeps its
// leaf and its limits, and moat stays in its own leaf; once the sandbox is
// gone, the next Manager of the process takes the loan over and its Close
// gives the group back. Vagrant VM's user pass, like
// TestDelegatedGroupGivenBack.
func TestDelegatedGroupKeptWhileASandboxRuns(t *testing.T) {
	if os.Getenv(givenBackChildVar) != "" {
		keptChild(t)
		return
	}
	if testenv.InDelegatedScope(t) {
		return
	}
	group := testenv.DelegatedGroup(t)
	runMoatIn(t, group, t.Name())
	// What a moat that could not give back leaves, removed here so the
	// group can go: its parents and leaf, then the controllers.
	ents, _ := os.ReadDir(group)
	for _, e := range ents {
		if e.IsDir() {
			if err := rmdir(filepath.Join(group, e.Name())); err != nil {
				t.Error(err)
			}
		}
	}
	if err := writeFile(group, "cgroup.subtree_control", "-memory -pids -cpu"); err != nil {
		t.Error(err)
	}
}

// keptChild is the moat process that closes with a sandbox running.
func keptChild(t *testing.T) {
	m, err := New()
	if err != nil {
		t.Fatal(err)
	}
	self := mustDetect(t).SelfUnified
	if !strings.HasPrefix(filepath.Base(self), selfLeafPrefix) {
		t.Fatalf("this process is in %s, want a %s leaf", self, selfLeafPrefix)
	}
	leaf, err := m.Create("busy", limitsOf(0, 20, 0))
	if err != nil {
		t.Fatal(err)
	}
	s := startIn(t, leaf, helper(t, "sleep", "60s"))
	// The sandbox is in its leaf once the helper runs there.
	dir := filepath.Join(m.Posture().Parents[0], m.owner.leafName("busy"))
	if err := m.Close(); err == nil || !strings.Contains(err.Error(), "give back the delegated cgroup") {
		t.Fatalf("Close with a sandbox running = %v, want an error saying the group could not be given back", err)
	}
	if in := mustDetect(t).SelfUnified; in != self {
		t.Fatalf("after Close this process is in %s, want it left in %s", in, self)
	}
	if s.cmd.Process.Signal(unix.Signal(0)) != nil {
		t.Fatal("the sandbox process is gone")
	}
	if max, err := os.ReadFile(filepath.Join(dir, "pids.max")); err != nil || strings.TrimSpace(string(max)) != "20" {
		t.Fatalf("the sandbox's %s/pids.max = %q (%v), want its limit of 20 kept", dir, max, err)
	}
	s.cmd.Process.Kill()
	s.cmd.Wait()
	if err := leaf.Delete(); err != nil {
		t.Fatal(err)
	}
	// The loan is kept, not forgotten: the next Manager takes it over and
	// its Close gives the group back.
	m2, err := New()
	if err != nil {
		t.Fatal(err)
	}
	if err := m2.Close(); err != nil {
		t.Fatalf("Close of the next Manager, the sandbox gone: %v", err)
	}
	if in := mustDetect(t).SelfUnified; in != filepath.Dir(self) {
		t.Fatalf("after the next Manager's Close this process is in %s, want it back in %s", in, filepath.Dir(self))
	}
}

// givenBackChild is the moat process, born alone in the delegated group.
func givenBackChild(t *testing.T) {
	group := mustDetect(t).SelfUnified
	m, err := New(WithSystemdBus(testUserBus()))
	if err != nil {
		t.Fatal(err)
	}
	p := m.Posture()
	if p.Source != SourceDelegated || p.Require(Memory, Pids, CPU) != nil {
		m.Close()
		t.Fatalf("alone in the delegated %s: posture %+v, want source delegated, every limit enforced", group, p)
	}
	if in := mustDetect(t).SelfUnified; filepath.Dir(in) != group || !strings.HasPrefix(filepath.Base(in), selfLeafPrefix) {
		m.Close()
		t.Fatalf("this process is in %s, want a %s leaf of %s", in, selfLeafPrefix, group)
	}
	// What Close must undo: while moat works below it, the group takes no
	// process.
	blocked := exec.Command("/bin/true")
	if err := testenv.StartIn(group, blocked); err == nil {
		blocked.Wait()
		m.Close()
		t.Fatalf("a process started in %s while moat's controllers were on there", group)
	} else if !errors.Is(err, unix.EBUSY) {
		m.Close()
		t.Fatalf("start a process in %s while moat works below it: %v, want EBUSY", group, err)
	}
	t.Run("pids.max", func(t *testing.T) { checkPidsLimit(t, m) })
	if err := m.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if in := mustDetect(t).SelfUnified; in != group {
		t.Fatalf("after Close this process is in %s, want %s again", in, group)
	}
	if on, _ := fields(group, "cgroup.subtree_control"); len(on) != 0 {
		t.Fatalf("after Close %s/cgroup.subtree_control = %v, want it empty", group, on)
	}
}

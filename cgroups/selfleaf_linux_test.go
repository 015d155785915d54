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
	for _, run := range []string{"first", "second"} {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestDelegatedGroupGivenBack$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), givenBackChildVar+"=1")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := testenv.StartIn(group, cmd); err != nil {
			t.Fatalf("start the %s moat in %s: %v", run, group, err)
		}
		if err := cmd.Wait(); err != nil || !strings.Contains(out.String(), "--- PASS: TestDelegatedGroupGivenBack (") {
			t.Fatalf("the %s moat in %s: %v\n%s", run, group, err, out.String())
		}
		testenv.CheckGivenBack(t, group)
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

package main

import (
	"debug/elf"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/conformance/testenv"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// The process model (issue 29, D1): the pid an engine gets is the
// container's init, which create spawned and left to the engine's
// subreaper.

var namespaces = []string{"user", "mnt", "pid", "net", "ipc", "uts"}

// nsOf reads the namespace links of pid.
func nsOf(t *testing.T, pid int) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, ns := range namespaces {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, ns))
		if err != nil {
			t.Fatalf("namespaces of %d: %v", pid, err)
		}
		m[ns] = l
	}
	return m
}

// childrenOf lists the children of pid's main thread.
func childrenOf(t *testing.T, pid int) []int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		n, _ := strconv.Atoi(f)
		out = append(out, n)
	}
	return out
}

// TestPidIsTheInit: the pid in --pid-file and in state is the sandbox's
// init: its namespaces are none of the host's, and are those of the
// container's process (its child) once it runs.
func TestPidIsTheInit(t *testing.T) { testPidIsTheInit(t) }

// TestPidIsTheInitAsNobody is TestPidIsTheInit run by nobody.
func TestPidIsTheInitAsNobody(t *testing.T) { asNobody(t, testPidIsTheInit) }

func testPidIsTheInit(t *testing.T) {
	root := t.TempDir()
	b, _ := bundle(t, "/bin/sleep", "100")
	pidFile := filepath.Join(t.TempDir(), "pid")
	if _, errs, code := rt(t, root, "create", "--bundle", b, "--pid-file", pidFile, "p1"); code != 0 {
		t.Fatalf("create: exit %d: %s", code, errs)
	}
	defer rt(t, root, "delete", "--force", "p1")
	pid := readPid(t, pidFile)
	if st := ociState(t, root, "p1"); st.Pid != pid {
		t.Fatalf("state pid %d, pid file %d", st.Pid, pid)
	}
	if raw := rawState(t, root, "p1"); raw.Monitor == pid || raw.Monitor <= 0 {
		t.Fatalf("the monitor's pid %d, the init's %d", raw.Monitor, pid)
	}
	if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); string(b) != "moat-sandbox-init\x00" {
		t.Fatalf("pid %d runs %q, want the sandbox init", pid, b)
	}
	// A static build (.ci/test's second pass) hands the prepared init over
	// to the C tail, and so tests that init's exec; a dynamic one keeps the
	// Go init.
	comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if tail := string(comm) == "moat-sandbox-in\n"; tail != staticBuild(t) {
		t.Fatalf("the init is %q in a build that is static: %v", comm, staticBuild(t))
	}
	initNS, host := nsOf(t, pid), nsOf(t, os.Getpid())
	for _, ns := range namespaces {
		if initNS[ns] == host[ns] {
			t.Errorf("the init's %s namespace is the host's", ns)
		}
	}
	if _, errs, code := rt(t, root, "start", "p1"); code != 0 {
		t.Fatalf("start: exit %d: %s", code, errs)
	}
	waitStatus(t, root, "p1", specs.StateRunning)
	kids := childrenOf(t, pid)
	if len(kids) != 1 {
		t.Fatalf("the init has children %v, want the container's process alone", kids)
	}
	for ns, l := range nsOf(t, kids[0]) {
		if l != initNS[ns] {
			t.Errorf("the process's %s namespace %s is not the init's %s", ns, l, initNS[ns])
		}
	}
	if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", kids[0])); string(b) != "/bin/sleep\x00100\x00" {
		t.Fatalf("the init's child runs %q", b)
	}
}

// TestSubreaperReapsTheInit: an engine's shim, a child subreaper, reaps the
// pid create gave it and gets the container's status: the process's exit
// code, 128+N for a process that died of signal N (as runc's init shows
// it), and SIGKILL itself when the container is killed; everything else
// create left (the monitor) ends once the container has.
func TestSubreaperReapsTheInit(t *testing.T) { testSubreaperReapsTheInit(t) }

// TestSubreaperReapsTheInitAsNobody is TestSubreaperReapsTheInit run by
// nobody.
func TestSubreaperReapsTheInitAsNobody(t *testing.T) { asNobody(t, testSubreaperReapsTheInit) }

func testSubreaperReapsTheInit(t *testing.T) {
	root := t.TempDir()
	for i, c := range []struct {
		script string
		kill   string
		code   int
		signal int
	}{
		{script: "exit 7", code: 7},
		{script: "kill -TERM $$", code: 143},
		{script: "exec sleep 100", kill: "KILL", code: -1, signal: 9},
		{script: "exec sleep 100", kill: "TERM", code: 143},
	} {
		id := "s" + strconv.Itoa(i)
		b, _ := bundle(t, "/bin/sh", "-c", c.script)
		pidFile := filepath.Join(t.TempDir(), "pid")
		h := startHarness(t, 0, runtimeBin(t), "--root", root, "create", "--bundle", b, "--pid-file", pidFile, id)
		if r := h.command(); r.Code != 0 {
			t.Fatalf("create under the harness: %+v", r)
		}
		pid := readPid(t, pidFile)
		if _, errs, code := rt(t, root, "start", id); code != 0 {
			t.Fatalf("start: exit %d: %s", code, errs)
		}
		if c.kill != "" {
			waitStatus(t, root, id, specs.StateRunning)
			if _, errs, code := rt(t, root, "kill", id, c.kill); code != 0 {
				t.Fatalf("kill: exit %d: %s", code, errs)
			}
		}
		if r := h.reap(pid); r.Code != c.code || r.Signal != c.signal {
			t.Errorf("%q (kill %s): the subreaper reaped %+v, want code %d signal %d", c.script, c.kill, r, c.code, c.signal)
		}
		if !h.finished(20 * time.Second) {
			t.Fatalf("%q: something create left outlived the container: %+v", c.script, h.seen)
		}
		if st := ociState(t, root, id); st.Status != specs.StateStopped {
			t.Errorf("%q: state %s after the end", c.script, st.Status)
		}
		if _, errs, code := rt(t, root, "delete", id); code != 0 {
			t.Fatalf("delete: exit %d: %s", code, errs)
		}
	}
}

// TestCreateKilledLeavesNothing: create killed at any point of its work
// leaves no process (the harness, their subreaper, reaps every one: the
// init ends at its sync socket's EOF, the monitor undoes what create did),
// no cgroup leaf, and no state that delete cannot remove.
func TestCreateKilledLeavesNothing(t *testing.T) {
	testenv.RequireRoot(t) // the bundle's pids limit makes a cgroup leaf
	root := t.TempDir()
	_, spec := bundle(t, "/bin/sleep", "100")
	limit := int64(64)
	spec.Linux.Resources = &specs.LinuxResources{Pids: &specs.LinuxPids{Limit: &limit}}
	b := writeBundle(t, spec)
	killed := 0
	var delays []time.Duration
	for d := time.Millisecond; d < 150*time.Millisecond; d += d/4 + time.Millisecond {
		delays = append(delays, d)
	}
	for i, d := range delays {
		id := fmt.Sprintf("kc%d-%d", os.Getpid(), i)
		h := startHarness(t, d, runtimeBin(t), "--root", root, "create", "--bundle", b, id)
		r := h.command()
		if r.Signal == 0 {
			// create finished before the kill: a container like any other.
			if _, errs, code := rt(t, root, "delete", "--force", id); code != 0 {
				t.Fatalf("delete --force of %s: exit %d: %s", id, code, errs)
			}
		} else {
			killed++
		}
		if !h.finished(20 * time.Second) {
			t.Fatalf("create killed after %v: processes outlived it: %+v", d, h.seen)
		}
		h.next(func(reaped) bool { return false }) // everything it printed
		t.Logf("create killed after %v: reaped %+v", d, h.seen)
		if leaves := leavesOf(id); len(leaves) > 0 {
			t.Errorf("create killed after %v left cgroup leaves %v", d, leaves)
		}
		if _, _, code := rt(t, root, "state", id); code == 0 {
			t.Errorf("create killed after %v left a container that state reports", d)
		}
		if _, errs, code := rt(t, root, "delete", id); code != 0 && !strings.Contains(errs, "does not exist") {
			t.Errorf("create killed after %v: delete: exit %d: %s", d, code, errs)
		}
		if _, err := os.Stat(filepath.Join(root, id)); err == nil {
			t.Errorf("create killed after %v: its state directory survived delete", d)
		}
	}
	if killed == 0 {
		t.Fatal("no create was killed before it finished: the test proved nothing")
	}
	t.Logf("%d of the creates were killed before they finished", killed)
}

// leavesOf finds cgroup directories named for container id (moat names a
// leaf OWNER-START-ID) anywhere under /sys/fs/cgroup.
func leavesOf(id string) []string {
	var out []string
	filepath.WalkDir("/sys/fs/cgroup", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fs.SkipDir
		}
		if d.IsDir() && strings.HasSuffix(d.Name(), "-"+leafID(id)) {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// TestKilledMonitorAlsoEndsACreatedContainer: the sandbox of a created
// container, waiting for its start with no parent-death signal, ends when
// its monitor is killed too.
func TestKilledMonitorAlsoEndsACreatedContainer(t *testing.T) {
	root := t.TempDir()
	b, _ := bundle(t, "/bin/true")
	if _, errs, code := rt(t, root, "create", "--bundle", b, "m1"); code != 0 {
		t.Fatalf("create: exit %d: %s", code, errs)
	}
	raw := rawState(t, root, "m1")
	if raw.Monitor <= 0 || raw.Monitor == raw.Pid {
		t.Fatalf("the state names monitor %d, init %d", raw.Monitor, raw.Pid)
	}
	if err := unix.Kill(raw.Monitor, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !gone(raw.Pid, 10*time.Second) {
		t.Fatalf("the created container's init %d outlived its killed monitor", raw.Pid)
	}
	if st := ociState(t, root, "m1"); st.Status != specs.StateStopped {
		t.Fatalf("state %s", st.Status)
	}
	if _, errs, code := rt(t, root, "delete", "m1"); code != 0 {
		t.Fatalf("delete: exit %d: %s", code, errs)
	}
}

// staticBuild says whether this test binary is static (no PT_INTERP).
func staticBuild(t *testing.T) bool {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false
		}
	}
	return true
}

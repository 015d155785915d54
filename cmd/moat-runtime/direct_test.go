package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/conformance/testenv"
	"github.com/moat-sandbox/moat/nsexec/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// asNobody runs body again as nobody, in a copy of the test binary:
// rootless, the runtime maps the process's uid 0 onto the caller's own id.
func asNobody(t *testing.T, body func(*testing.T)) {
	t.Helper()
	if testenv.RunAsUser(t, testenv.NobodyUID, testenv.NobodyGID) {
		return
	}
	body(t)
}

// waitStatus polls state until the container has status want.
func waitStatus(t *testing.T, root, id string, want specs.ContainerState) specs.State {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := ociState(t, root, id)
		if st.Status == want {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("container %s is %s after 10 s, want %s", id, st.Status, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestLifecycle walks runc's protocol as an engine does: create (the
// process waits), state, start (it runs), kill, delete.
func TestLifecycle(t *testing.T) { testLifecycle(t) }

// TestLifecycleAsNobody is TestLifecycle run by nobody.
func TestLifecycleAsNobody(t *testing.T) { asNobody(t, testLifecycle) }

func testLifecycle(t *testing.T) {
	root := t.TempDir()
	b, _ := bundle(t, "/bin/sh", "-c", "echo started as $(id -u); exec sleep 30")
	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(t.TempDir(), "pid")
	if _, errs, code := rtIO(t, root, out, "create", "--bundle", b, "--pid-file", pidFile, "c1"); code != 0 {
		t.Fatalf("create: exit %d: %s", code, errs)
	}
	st := ociState(t, root, "c1")
	pidb, _ := os.ReadFile(pidFile)
	if st.Status != specs.StateCreated || strconv.Itoa(st.Pid) != string(pidb) || st.ID != "c1" || st.Bundle != b {
		t.Fatalf("after create: state %+v, pid file %q", st, pidb)
	}
	time.Sleep(100 * time.Millisecond)
	if got, _ := os.ReadFile(out.Name()); len(got) != 0 {
		t.Fatalf("the process ran before start: %q", got)
	}
	if _, errs, code := rt(t, root, "create", "--bundle", b, "c1"); code == 0 || !strings.Contains(errs, "already exists") {
		t.Fatalf("a second create of c1: exit %d: %s", code, errs)
	}
	if _, errs, code := rt(t, root, "start", "c1"); code != 0 {
		t.Fatalf("start: exit %d: %s", code, errs)
	}
	waitStatus(t, root, "c1", specs.StateRunning)
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, _ := os.ReadFile(out.Name())
		if string(got) == "started as 0\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("container output %q", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, errs, code := rt(t, root, "start", "c1"); code == 0 || !strings.Contains(errs, "cannot start an already running container") {
		t.Fatalf("a second start: exit %d: %s", code, errs)
	}
	if _, errs, code := rt(t, root, "delete", "c1"); code == 0 || !strings.Contains(errs, "that is not stopped") {
		t.Fatalf("delete of a running container without --force: exit %d: %s", code, errs)
	}
	if _, errs, code := rt(t, root, "kill", "c1", "KILL"); code != 0 {
		t.Fatalf("kill: exit %d: %s", code, errs)
	}
	if st := waitStatus(t, root, "c1", specs.StateStopped); st.Pid != 0 {
		t.Fatalf("a stopped container reports pid %d", st.Pid)
	}
	if _, errs, code := rt(t, root, "kill", "c1", "KILL"); code == 0 {
		t.Fatalf("kill of a stopped container succeeded: %s", errs)
	}
	if _, errs, code := rt(t, root, "delete", "c1"); code != 0 {
		t.Fatalf("delete: exit %d: %s", code, errs)
	}
	if _, errs, code := rt(t, root, "state", "c1"); code == 0 || !strings.Contains(errs, "does not exist") {
		t.Fatalf("state after delete: exit %d: %s", code, errs)
	}
	if entries, _ := os.ReadDir(root); len(entries) != 0 {
		t.Fatalf("state left behind: %v", entries)
	}
}

// TestDeleteCreated: delete refuses a created container, as the runtime
// spec asks, and delete --force ends it.
func TestDeleteCreated(t *testing.T) {
	root := t.TempDir()
	b, _ := bundle(t, "/bin/true")
	if _, errs, code := rt(t, root, "create", "--bundle", b, "c2"); code != 0 {
		t.Fatalf("create: exit %d: %s", code, errs)
	}
	pid := ociState(t, root, "c2").Pid
	if _, errs, code := rt(t, root, "delete", "c2"); code == 0 || !strings.Contains(errs, "not stopped") {
		t.Fatalf("delete of a created container: exit %d: %s", code, errs)
	}
	if st := ociState(t, root, "c2"); st.Status != specs.StateCreated {
		t.Fatalf("a refused delete changed the container: %+v", st)
	}
	if _, errs, code := rt(t, root, "delete", "--force", "c2"); code != 0 {
		t.Fatalf("delete: exit %d: %s", code, errs)
	}
	if unix.Kill(pid, 0) == nil {
		if b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); !strings.Contains(string(b), ") Z") {
			t.Fatalf("the monitor %d outlived delete", pid)
		}
	}
}

// TestRunExitStatus: run exits with the process's status, 128+N for a
// signal, as runc run does.
func TestRunExitStatus(t *testing.T) { testRunExitStatus(t) }

// TestRunExitStatusAsNobody is TestRunExitStatus run by nobody.
func TestRunExitStatusAsNobody(t *testing.T) { asNobody(t, testRunExitStatus) }

func testRunExitStatus(t *testing.T) {
	root := t.TempDir()
	for script, want := range map[string]int{"exit 7": 7, "true": 0, "kill -9 $$": 137, "kill -TERM $$": 143} {
		b, _ := bundle(t, "/bin/sh", "-c", script)
		if _, errs, code := rt(t, root, "run", "--bundle", b, "r1"); code != want {
			t.Errorf("run %q: exit %d, want %d: %s", script, code, want, errs)
		}
	}
	if entries, _ := os.ReadDir(root); len(entries) != 0 {
		t.Fatalf("run left state behind: %v", entries)
	}
}

// TestRefusalIsClear: a config moat does not honour fails create with the
// field named, and leaves no state.
func TestRefusalIsClear(t *testing.T) {
	root := t.TempDir()
	_, spec := bundle(t, "/bin/true")
	spec.Hooks = &specs.Hooks{StartContainer: []specs.Hook{{Path: "/bin/true"}}}
	spec.Linux.Namespaces = spec.Linux.Namespaces[:4] // no mount namespace
	b := writeBundle(t, spec)
	_, errs, code := rt(t, root, "create", "--bundle", b, "c3")
	if code != 1 || !contains2(errs, "hooks.startContainer", "mount", "moat always creates a new one") {
		t.Fatalf("create: exit %d: %s", code, errs)
	}
	if entries, _ := os.ReadDir(root); len(entries) != 0 {
		t.Fatalf("a refused create left state: %v", entries)
	}
	for _, id := range []string{"../x", "-x", ""} {
		if _, errs, code := rt(t, root, "create", "--bundle", b, "--", id); code == 0 || !strings.Contains(errs, "container id") {
			t.Errorf("id %q: exit %d: %s", id, code, errs)
		}
	}
	if _, errs, code := rt(t, root, "exec", "c3", "/bin/true"); code == 0 || !strings.Contains(errs, "does not exist") {
		t.Fatalf("exec into no container: exit %d: %s", code, errs)
	}
	// --systemd-cgroup: TestSystemdCgroupRefusedWithoutSystemd.
}

// TestConsoleSocket: with process.terminal the master of a new pty goes
// to --console-socket and the process's stdio is its slave.
func TestConsoleSocket(t *testing.T) { testConsoleSocket(t) }

// TestConsoleSocketAsNobody is TestConsoleSocket run by nobody.
func TestConsoleSocketAsNobody(t *testing.T) { asNobody(t, testConsoleSocket) }

func testConsoleSocket(t *testing.T) {
	root := t.TempDir()
	_, spec := bundle(t, "/bin/sh", "-c", "test -t 0 && test -t 1 && echo tty-ok; stty size")
	spec.Process.Terminal = true
	spec.Process.ConsoleSize = &specs.Box{Height: 33, Width: 101}
	b := writeBundle(t, spec)
	sock := filepath.Join(t.TempDir(), "console.sock")
	master := consoleMaster(t, sock)
	if _, errs, code := rt(t, root, "create", "--bundle", b, "--console-socket", sock, "tty1"); code != 0 {
		t.Fatalf("create: exit %d: %s", code, errs)
	}
	m := <-master
	if m == nil {
		t.Fatal("no pty master came over the console socket")
	}
	defer m.Close()
	if _, errs, code := rt(t, root, "start", "tty1"); code != 0 {
		t.Fatalf("start: exit %d: %s", code, errs)
	}
	var got []byte
	buf := make([]byte, 256)
	m.SetReadDeadline(time.Now().Add(5 * time.Second))
	for !strings.Contains(string(got), "33 101") {
		n, err := m.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			break
		}
	}
	if !strings.Contains(string(got), "tty-ok") || !strings.Contains(string(got), "33 101") {
		t.Fatalf("terminal output %q, want tty-ok and the console size 33 101", got)
	}
	waitStatus(t, root, "tty1", specs.StateStopped)
	rt(t, root, "delete", "tty1")
}

// TestMonitorKilled: when the container's monitor is killed, the container
// dies with it (its init's sync socket's other end is the monitor's alone),
// state says stopped, and delete cleans up.
func TestMonitorKilled(t *testing.T) {
	root := t.TempDir()
	b, _ := bundle(t, "/bin/sleep", "100")
	if _, errs, code := rt(t, root, "run", "--detach", "--bundle", b, "k1"); code != 0 {
		t.Fatalf("run --detach: exit %d: %s", code, errs)
	}
	st := waitStatus(t, root, "k1", specs.StateRunning)
	mon := rawState(t, root, "k1").Monitor
	if mon <= 0 || mon == st.Pid {
		t.Fatalf("monitor pid %d, init pid %d", mon, st.Pid)
	}
	if err := unix.Kill(mon, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, root, "k1", specs.StateStopped)
	if !gone(st.Pid, 10*time.Second) {
		t.Fatalf("the container's init %d outlived its killed monitor", st.Pid)
	}
	if _, errs, code := rt(t, root, "delete", "k1"); code != 0 {
		t.Fatalf("delete: exit %d: %s", code, errs)
	}
}

// rawState reads the runtime's own state.json of container id (the OCI
// state does not carry the monitor's pid).
func rawState(t *testing.T, root, id string) oci.State {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, id, "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	var st oci.State
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// gone waits until pid is gone or a zombie.
func gone(pid int, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil || strings.Contains(string(b), ") Z") {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

// TestRunForwardsSignals: a signal sent to `moat-runtime run` reaches the
// container's process, as with runc run.
func TestRunForwardsSignals(t *testing.T) {
	root := t.TempDir()
	b, _ := bundle(t, "/bin/sh", "-c", "trap 'exit 42' TERM; while :; do sleep 0.05; done")
	cmd := exec.Command(runtimeBin(t), "--root", root, "run", "--bundle", b, "sig1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if out, _, code := rt(t, root, "state", "sig1"); code == 0 && strings.Contains(out, `"running"`) {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatal("the container did not run within 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // the trap is set
	cmd.Process.Signal(unix.SIGTERM)
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 42 {
		t.Fatalf("run after SIGTERM: %v, want exit 42 from the container's trap", err)
	}
}

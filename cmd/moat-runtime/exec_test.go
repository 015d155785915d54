package main

import (
	"encoding/json"
	"fmt"
	"net"
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
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// exec (issue 29, D2): the container's init forks the process; exec, or its
// waiter, stands for it.

// running creates and starts a container of spec under root and returns
// its init's pid; it is deleted when the test ends.
func running(t *testing.T, root, id string, spec *specs.Spec) int {
	t.Helper()
	b := writeBundle(t, spec)
	if _, errs, code := rt(t, root, "run", "--detach", "--bundle", b, id); code != 0 {
		t.Fatalf("run --detach: exit %d: %s", code, errs)
	}
	t.Cleanup(func() { rt(t, root, "delete", "--force", id) })
	return waitStatus(t, root, id, specs.StateRunning).Pid
}

// sleeper is the test image's container that runs until it is killed.
func sleeper(t *testing.T) *specs.Spec {
	_, spec := bundle(t, "/bin/sleep", "1000")
	return spec
}

// TestExec: exec runs a command beside the container's process with its
// output, stdin and status; the environment is the container's plus
// --env, the cwd as asked; it runs in the container's namespaces and
// cgroup, under its filter (a syscall the profile denies fails), with no
// capability, no_new_privs, and no descriptor but its stdio.
func TestExec(t *testing.T) { testExec(t) }

// TestExecAsNobody is TestExec run by nobody.
func TestExecAsNobody(t *testing.T) { asNobody(t, testExec) }

func testExec(t *testing.T) {
	root := t.TempDir()
	spec := sleeper(t)
	spec.Process.Env = append(spec.Process.Env, "FROM=container")
	// A profile that allows everything but mkdir/mkdirat, as the
	// container's own filter.
	spec.Linux.Seccomp = &specs.LinuxSeccomp{DefaultAction: specs.ActAllow, Architectures: []specs.Arch{specs.ArchX86_64},
		Syscalls: []specs.LinuxSyscall{{Names: []string{"mkdir", "mkdirat"}, Action: specs.ActErrno}}}
	if os.Geteuid() == 0 {
		limit := int64(64) // a cgroup leaf of the container's own
		spec.Linux.Resources = &specs.LinuxResources{Pids: &specs.LinuxPids{Limit: &limit}}
	}
	pid := running(t, root, "e1", spec)

	out, errs, code := rt(t, root, "exec", "--env", "ADDED=1", "--cwd", "/tmp", "e1", "/bin/sh", "-c", `echo "$FROM $ADDED $(pwd) $(id -u)"; exit 5`)
	if code != 5 || out != "container 1 /tmp 0\n" {
		t.Fatalf("exec: exit %d, output %q: %s", code, out, errs)
	}
	var script strings.Builder
	for _, ns := range namespaces {
		script.WriteString("readlink /proc/self/ns/" + ns + "; ")
	}
	script.WriteString("cat /proc/self/cgroup; grep -E '^(Cap|NoNewPrivs|Seccomp:)' /proc/self/status; ls /proc/self/fd; mkdir /tmp/x 2>&1; true")
	out, errs, code = rt(t, root, "exec", "e1", "/bin/sh", "-c", script.String())
	if code != 0 {
		t.Fatalf("exec: exit %d: %s", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	initNS := nsOf(t, pid)
	for i, ns := range namespaces {
		if lines[i] != initNS[ns] {
			t.Errorf("exec'd %s namespace %s, the container's %s", ns, lines[i], initNS[ns])
		}
	}
	cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", childrenOf(t, pid)[0]))
	if got := strings.Join(lines[len(namespaces):len(namespaces)+strings.Count(string(cg), "\n")], "\n") + "\n"; got != string(cg) {
		t.Errorf("exec'd cgroups\n%s\nthe container's process's\n%s", got, cg)
	}
	for _, want := range []string{"CapInh:\t0000000000000000", "CapPrm:\t0000000000000000", "CapEff:\t0000000000000000",
		"CapBnd:\t0000000000000000", "CapAmb:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2", "\n0\n1\n2\n3\n",
		"mkdir: can't create directory '/tmp/x': Operation not permitted"} {
		if !strings.Contains(out, want) {
			t.Errorf("exec'd process: no %q in\n%s", want, out)
		}
	}
	if strings.Contains(out, "\n4\n") {
		t.Errorf("exec'd process has descriptors beside its stdio:\n%s", out)
	}
	// stdin passes through.
	cmd := exec.Command(runtimeBin(t), "--root", root, "exec", "e1", "/bin/cat")
	cmd.Stdin = strings.NewReader("through\n")
	if b, err := cmd.Output(); err != nil || string(b) != "through\n" {
		t.Fatalf("exec cat: %q %v", b, err)
	}
	// --process: the whole process from a file.
	pf := filepath.Join(t.TempDir(), "process.json")
	p := *spec.Process
	p.Args, p.Cwd, p.Env = []string{"/bin/sh", "-c", "echo $ONLY $FROM; pwd"}, "/proc", []string{"ONLY=this"}
	jb, _ := json.Marshal(p)
	os.WriteFile(pf, jb, 0o644)
	if out, errs, code := rt(t, root, "exec", "--process", pf, "e1"); code != 0 || out != "this\n/proc\n" {
		t.Fatalf("exec --process: exit %d, %q: %s", code, out, errs)
	}
}

// TestExecRefusals: what the container's process does not have is refused,
// naming the field, and nothing runs: another user (the init holds no
// CAP_SETUID), a capability, preserved descriptors, a tty without a console
// socket; an exec into a created, stopped or missing container fails with
// runc's words.
func TestExecRefusals(t *testing.T) {
	root := t.TempDir()
	running(t, root, "e2", sleeper(t))
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--user", "1000:1000", "e2", "/bin/true"}, "process.user"},
		{[]string{"--additional-gids", "10", "e2", "/bin/true"}, "process.user.additionalGids"},
		{[]string{"--cap", "CAP_SYS_ADMIN", "e2", "/bin/true"}, "--cap: CAP_SYS_ADMIN"},
		{[]string{"--preserve-fds", "2", "e2", "/bin/true"}, "--preserve-fds"},
		{[]string{"--tty", "e2", "/bin/true"}, "needs --console-socket"},
		{[]string{"--cwd", "tmp", "e2", "/bin/true"}, "process.cwd"},
		{[]string{"e2"}, "wants a command"},
		{[]string{"e2", "/nonexistent"}, "no such file or directory"},
		{[]string{"nosuch", "/bin/true"}, "container does not exist"},
	} {
		if out, errs, code := rt(t, root, append([]string{"exec"}, c.args...)...); code == 0 || !strings.Contains(errs, c.want) {
			t.Errorf("exec %v: exit %d, %q, stderr %q; want a refusal naming %q", c.args, code, out, errs, c.want)
		}
	}
	b, _ := bundle(t, "/bin/true")
	if _, errs, code := rt(t, root, "create", "--bundle", b, "e3"); code != 0 {
		t.Fatalf("create: exit %d: %s", code, errs)
	}
	if _, errs, code := rt(t, root, "exec", "e3", "/bin/true"); code == 0 || !strings.Contains(errs, "cannot exec in a created container") {
		t.Errorf("exec into a created container: exit %d: %s", code, errs)
	}
	rt(t, root, "start", "e3")
	waitStatus(t, root, "e3", specs.StateStopped)
	if _, errs, code := rt(t, root, "exec", "e3", "/bin/true"); code == 0 || !strings.Contains(errs, "cannot exec in a stopped container") {
		t.Errorf("exec into a stopped container: exit %d: %s", code, errs)
	}
	rt(t, root, "delete", "e3")
}

// TestExecTTY: exec -t sends a new pty's master to the console socket and
// the process's stdio is its slave.
func TestExecTTY(t *testing.T) {
	root := t.TempDir()
	running(t, root, "t1", sleeper(t))
	sock := filepath.Join(t.TempDir(), "console.sock")
	master := consoleMaster(t, sock)
	out, errs, code := rt(t, root, "exec", "-t", "--console-socket", sock, "t1", "/bin/sh", "-c", "test -t 0 && test -t 1 && echo tty-ok; exit 3")
	if code != 3 {
		t.Fatalf("exec -t: exit %d, %q: %s", code, out, errs)
	}
	m := <-master
	if m == nil {
		t.Fatal("no pty master came over the console socket")
	}
	defer m.Close()
	m.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 64)
	n, _ := m.Read(buf)
	if !strings.Contains(string(buf[:n]), "tty-ok") {
		t.Fatalf("terminal output %q", buf[:n])
	}
}

// consoleMaster accepts one console-socket connection at sock and sends
// the pty master it carries (nil if none came), made non-blocking so that
// its reads take deadlines.
func consoleMaster(t *testing.T, sock string) <-chan *os.File {
	t.Helper()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	master := make(chan *os.File, 1)
	go func() {
		c, err := ln.AcceptUnix()
		if err != nil {
			master <- nil
			return
		}
		defer c.Close()
		buf, oob := make([]byte, 64), make([]byte, unix.CmsgSpace(4))
		_, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
		msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil || len(msgs) != 1 {
			master <- nil
			return
		}
		fds, _ := unix.ParseUnixRights(&msgs[0])
		unix.SetNonblock(fds[0], true)
		master <- os.NewFile(uintptr(fds[0]), "master")
	}()
	return master
}

// TestExecDetach: exec --detach leaves a waiter whose pid goes to
// --pid-file; an engine's shim (the subreaper harness) reaps that waiter
// with the exec'd process's status: its exit code, or the signal it died
// of; a signal sent to the waiter reaches the process, and a SIGKILLed
// waiter takes the process with it.
func TestExecDetach(t *testing.T) { testExecDetach(t) }

// TestExecDetachAsNobody is TestExecDetach run by nobody.
func TestExecDetachAsNobody(t *testing.T) { asNobody(t, testExecDetach) }

func testExecDetach(t *testing.T) {
	root := t.TempDir()
	running(t, root, "d1", sleeper(t))
	for _, c := range []struct {
		script string
		signal syscall.Signal // sent to the waiter
		code   int
		died   int
	}{
		{script: "exit 6", code: 6},
		{script: "trap 'exit 42' USR1; echo > /tmp/ready; while :; do sleep 0.05; done", signal: unix.SIGUSR1, code: 42},
		{script: "echo > /tmp/ready; exec sleep 100", signal: unix.SIGTERM, code: -1, died: int(unix.SIGTERM)},
		{script: "echo > /tmp/ready; exec sleep 100", signal: unix.SIGKILL, code: -1, died: int(unix.SIGKILL)},
	} {
		rt(t, root, "exec", "d1", "/bin/sh", "-c", "rm -f /tmp/ready")
		pidFile := filepath.Join(t.TempDir(), "pid")
		h := startHarness(t, 0, runtimeBin(t), "--root", root, "exec", "--detach", "--pid-file", pidFile, "d1", "/bin/sh", "-c", c.script)
		if r := h.command(); r.Code != 0 {
			t.Fatalf("exec --detach: %+v", r)
		}
		waiter := readPid(t, pidFile)
		if c.signal != 0 {
			deadline := time.Now().Add(10 * time.Second)
			for {
				if _, _, code := rt(t, root, "exec", "d1", "/bin/test", "-e", "/tmp/ready"); code == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%q never got ready", c.script)
				}
				time.Sleep(20 * time.Millisecond)
			}
			if err := unix.Kill(waiter, c.signal); err != nil {
				t.Fatal(err)
			}
		}
		if r := h.reap(waiter); r.Code != c.code || r.Signal != c.died {
			t.Errorf("%q (signal %v): the subreaper reaped the waiter %+v, want code %d signal %d", c.script, c.signal, r, c.code, c.died)
		}
		if !h.finished(10 * time.Second) {
			t.Fatalf("%q: the harness still has children: %+v", c.script, h.seen)
		}
		if out, ok := noLine(t, root, "d1", "sleep 100"); !ok {
			t.Errorf("%q: the exec'd process outlived its waiter:\n%s", c.script, out)
		}
	}
}

// TestExecSignals: a signal sent to `moat-runtime exec` reaches the
// process, which exits or dies of it; exec then exits with its code or
// dies of the same signal.
func TestExecSignals(t *testing.T) {
	root := t.TempDir()
	running(t, root, "g1", sleeper(t))
	for _, c := range []struct {
		script string
		code   int
		died   syscall.Signal
	}{
		{"trap 'exit 43' TERM; echo > /tmp/ready; while :; do sleep 0.05; done", 43, 0},
		{"echo > /tmp/ready; exec sleep 100", -1, unix.SIGTERM},
	} {
		rt(t, root, "exec", "g1", "/bin/sh", "-c", "rm -f /tmp/ready")
		cmd := exec.Command(runtimeBin(t), "--root", root, "exec", "g1", "/bin/sh", "-c", c.script)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			if _, _, code := rt(t, root, "exec", "g1", "/bin/test", "-e", "/tmp/ready"); code == 0 {
				break
			}
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				t.Fatalf("%q never got ready", c.script)
			}
			time.Sleep(20 * time.Millisecond)
		}
		cmd.Process.Signal(unix.SIGTERM)
		err := cmd.Wait()
		ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
		if c.died != 0 {
			if !ws.Signaled() || ws.Signal() != c.died {
				t.Errorf("%q: exec ended %v, want to die of %v as its process did", c.script, err, c.died)
			}
		} else if ws.ExitStatus() != c.code {
			t.Errorf("%q: exec ended %v, want exit %d", c.script, err, c.code)
		}
	}
}

// TestExecKilledClient: a SIGKILLed exec (nothing stands for its process
// any more) takes its process with it, and the monitor serves on.
func TestExecKilledClient(t *testing.T) {
	root := t.TempDir()
	running(t, root, "k2", sleeper(t))
	pidFile := filepath.Join(t.TempDir(), "pid")
	cmd := exec.Command(runtimeBin(t), "--root", root, "exec", "--pid-file", pidFile, "k2", "/bin/sleep", "100")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(pidFile); err == nil {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatal("exec never wrote its pid file")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if readPid(t, pidFile) != cmd.Process.Pid {
		t.Fatalf("the pid file of an attached exec names %d, not exec itself (%d)", readPid(t, pidFile), cmd.Process.Pid)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if out, ok := noLine(t, root, "k2", "/bin/sleep 100"); !ok {
		t.Fatalf("the process of a killed exec runs on:\n%s", out)
	}
	if out, errs, code := rt(t, root, "exec", "k2", "/bin/echo", "served"); code != 0 || out != "served\n" {
		t.Fatalf("the monitor after a killed exec: exit %d, %q: %s", code, out, errs)
	}
}

// TestExecConcurrent: many execs at once, each with its own output and
// status.
func TestExecConcurrent(t *testing.T) {
	root := t.TempDir()
	running(t, root, "c9", sleeper(t))
	var wg sync.WaitGroup
	errs := make(chan string, 24)
	for i := range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, stderr, code := rt(t, root, "exec", "c9", "/bin/sh", "-c", "echo "+strconv.Itoa(i)+"; exit "+strconv.Itoa(i))
			if code != i || out != strconv.Itoa(i)+"\n" {
				errs <- fmt.Sprintf("exec %d: exit %d, %q: %s", i, code, out, stderr)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// TestExecConfined: an exec'd process cannot signal or ptrace outside its
// container: a host process's pid is no pid in the container's namespace,
// the host process survives, and moat's hostile syscall battery fails
// every attack inside the exec'd process as in the container's own (the
// default filter: the config names none).
func TestExecConfined(t *testing.T) {
	testenv.RequireRoot(t)
	goBin, err := exec.LookPath("go")
	if err != nil {
		testenv.Skipf(t, "the attacker program is built from source and needs the go command")
	}
	dir, err := os.MkdirTemp("", "moat-oci-attacker-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	bin := filepath.Join(dir, "attacker")
	build := exec.Command(goBin, "build", "-o", bin, "./testdata/attacker")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the attacker: %v\n%s", err, out)
	}
	root := t.TempDir()
	spec := sleeper(t)
	spec.Mounts = append(spec.Mounts, specs.Mount{Destination: "/attacker", Type: "bind", Source: bin, Options: []string{"bind", "ro"}})
	// The bind's target in the (shared, read-only) test image.
	if err := os.WriteFile(filepath.Join(spec.Root.Path, "attacker"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	running(t, root, "h1", spec)
	victim := exec.Command("sleep", "100")
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	defer victim.Process.Kill()
	out, errs, code := rt(t, root, "exec", "h1", "/bin/kill", "-9", strconv.Itoa(victim.Process.Pid))
	if code == 0 {
		t.Errorf("kill -9 of a host pid from an exec'd process succeeded: %q %s", out, errs)
	}
	if err := victim.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the host process did not survive: %v", err)
	}
	out, errs, code = rt(t, root, "exec", "h1", "/attacker")
	if code != 0 {
		t.Fatalf("attacker: exit %d: %s", code, errs)
	}
	checkAttackReport(t, out, "in an exec'd process")
}

// noLine waits (10 s at most) until no process of container id runs the
// command line l, and says whether that happened, with ps's last output.
func noLine(t *testing.T, root, id, l string) (string, bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, _, _ := rt(t, root, "exec", id, "/bin/ps", "-o", "args")
		found := false
		for _, x := range strings.Split(out, "\n") {
			found = found || strings.TrimSpace(x) == l
		}
		if !found {
			return out, true
		}
		if time.Now().After(deadline) {
			return out, false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

//go:build linux

package nsexec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// adopted prepares cfg WithHandover, detaches it and adopts it in this same
// process, as moat-runtime's monitor adopts what its create detached; proc
// is the init as this process's child.
func adopted(t *testing.T, cfg *Config) (*Adopted, *Process) {
	t.Helper()
	s, err := Prepare(context.Background(), cfg, WithHandover())
	if err != nil {
		t.Fatalf("prepare: %v", err)
	}
	h, proc, err := s.Detach()
	if err != nil {
		s.Close()
		t.Fatalf("detach: %v", err)
	}
	a, err := Adopt(h)
	if err != nil {
		t.Fatalf("adopt: %v", err)
	}
	t.Cleanup(func() { a.Close(); proc.Wait() })
	return a, proc
}

// execOut runs spec in a and returns its output and status.
func execOut(t *testing.T, a *Adopted, spec ExecSpec, stdin string) (string, Exit) {
	t.Helper()
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	e, err := a.Exec(context.Background(), spec, Stdio{Stdin: inR, Stdout: outW, Stderr: outW})
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		t.Fatalf("exec %q: %v", spec.Args, err)
	}
	go func() { io.WriteString(inW, stdin); inW.Close() }()
	var out bytes.Buffer
	io.Copy(&out, outR)
	outR.Close()
	return out.String(), e.Wait()
}

// startTool starts a's tool with stdin on a pipe whose write end it
// returns (closing it ends a tool that reads it).
func startTool(t *testing.T, a *Adopted, args []string) *os.File {
	t.Helper()
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	err = a.Start(context.Background(), args, []string{"PATH=/usr/bin:/bin"}, Stdio{Stdin: inR})
	inR.Close()
	if err != nil {
		inW.Close()
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { inW.Close() })
	return inW
}

var hostEnv = []string{"PATH=/usr/bin:/bin"}

// TestAdoptedExec: a sandbox handed over runs its tool and, beside it, the
// processes asked for: their output, stdin and status, their cwd and
// environment as asked, all in the tool's namespaces, the tool's
// credentials and no capability; and the tool's status is the init's
// report.
func TestAdoptedExec(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		a, proc := adopted(t, &Config{})
		if a.Pid() != proc.Pid() {
			t.Fatalf("adopted pid %d, spawned %d", a.Pid(), proc.Pid())
		}
		if _, err := a.Exec(context.Background(), ExecSpec{Args: []string{"/bin/true"}, Cwd: "/"}, Stdio{}); !errors.Is(err, ErrNotRunning) {
			t.Fatalf("exec before the start: %v, want ErrNotRunning", err)
		}
		in := startTool(t, a, []string{"sh", "-c", "read x; exit 7"})
		out, e := execOut(t, a, ExecSpec{Args: []string{"sh", "-c", `read x; echo "$x $(pwd) $FOO $(id -u):$(id -g)"; exit 3`},
			Env: append(hostEnv, "FOO=bar"), Cwd: "/tmp", UID: DefaultUID, GID: DefaultGID}, "in\n")
		if e.Code != 3 || out != fmt.Sprintf("in /tmp bar %d:%d\n", DefaultUID, DefaultGID) {
			t.Fatalf("exec: %q, %+v", out, e)
		}
		// Same namespaces as the init (and so the tool): the inodes seen
		// from inside are those of /proc/<init>/ns on the host.
		script := ""
		for _, ns := range []string{"user", "mnt", "pid", "net", "ipc", "uts"} {
			script += "readlink /proc/self/ns/" + ns + "; "
		}
		out, e = execOut(t, a, ExecSpec{Args: []string{"sh", "-c", script}, Env: hostEnv, Cwd: "/", UID: DefaultUID, GID: DefaultGID}, "")
		var want []string
		for _, ns := range []string{"user", "mnt", "pid", "net", "ipc", "uts"} {
			l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", a.Pid(), ns))
			if err != nil {
				t.Fatal(err)
			}
			self, _ := os.Readlink("/proc/self/ns/" + ns)
			if l == self {
				t.Fatalf("the init's %s namespace is the host's", ns)
			}
			want = append(want, l)
		}
		if e.Code != 0 || strings.Fields(out) == nil || strings.Join(strings.Fields(out), " ") != strings.Join(want, " ") {
			t.Fatalf("exec'd namespaces %q, want the init's %q", out, want)
		}
		in.Close()
		if x := a.Wait(); x.Code != 7 {
			t.Fatalf("the tool's status %+v, want 7 as the init reported it", x)
		}
		if x, err := proc.Wait(); err != nil || x.Code != 7 {
			t.Fatalf("the init's own status %+v %v, want 7", x, err)
		}
		if _, err := a.Exec(context.Background(), ExecSpec{Args: []string{"/bin/true"}, Cwd: "/"}, Stdio{}); !errors.Is(err, ErrSandboxGone) {
			t.Fatalf("exec after the end: %v, want ErrSandboxGone", err)
		}
	})
}

// TestAdoptedExecOffersNothing: an exec'd process is under the sandbox's
// filter (a denied syscall fails), holds no capability in any set with
// no_new_privs and locked securebits, and has no descriptor but its stdio;
// and while it runs every thread of the init is under the filter, so what
// it forks from carries it (in both inits: the Go init in a dynamic build,
// the C tail in a static one).
func TestAdoptedExecOffersNothing(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		cfg := probeConfig(t, "caps")
		cfg.Args, cfg.Env = nil, nil
		cfg.Seccomp = denyMkdirat(t)
		a, _ := adopted(t, cfg)
		startTool(t, a, []string{"sh", "-c", "read x"})
		probe := func(name string) string {
			out, e := execOut(t, a, ExecSpec{Args: []string{"/probe"}, Env: []string{probeVar + "=" + name}, Cwd: "/", UID: DefaultUID, GID: DefaultGID}, "")
			if e.Code != 0 {
				t.Fatalf("probe %s: %+v: %s", name, e, out)
			}
			return out
		}
		if out := probe("caps"); out != "ok\n" {
			t.Errorf("caps: %q", out)
		}
		if out := probe("mkdir"); out != "mkdirat: operation not permitted\nSeccomp: 2\n" {
			t.Errorf("mkdir under the filter: %q", out)
		}
		if out := probe("fds"); out != "0 1 2\n" {
			t.Errorf("descriptors of an exec'd process: %q, want its stdio alone", out)
		}
		if out := probe("exe"); out != "ok\n" {
			t.Errorf("/proc/1/exe: %q", out)
		}
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", a.Pid()))
		if err != nil {
			t.Fatal(err)
		}
		for _, task := range tasks {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", a.Pid(), task.Name()))
			if err != nil {
				continue
			}
			if !strings.Contains(string(b), "\nSeccomp:\t2\n") || !strings.Contains(string(b), "\nNoNewPrivs:\t1\n") {
				t.Errorf("init thread %s is not under the filter with no_new_privs while it serves execs", task.Name())
			}
		}
	})
}

// TestAdoptedExecRefusals: a program that is not there, another uid than
// the tool's (the init holds no CAP_SETUID), a cwd that is missing: each
// refused with its errno, nothing started, and the sandbox serves on.
func TestAdoptedExecRefusals(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		a, _ := adopted(t, &Config{})
		startTool(t, a, []string{"sh", "-c", "read x"})
		for _, c := range []struct {
			spec  ExecSpec
			errno []unix.Errno
		}{
			{ExecSpec{Args: []string{"/nonexistent"}, Cwd: "/", UID: DefaultUID, GID: DefaultGID}, []unix.Errno{unix.ENOENT}},
			// Another id: EPERM without CAP_SETUID, or EINVAL for an id
			// the sandbox's user namespace does not map.
			{ExecSpec{Args: []string{"/bin/true"}, Cwd: "/", UID: 0, GID: 0}, []unix.Errno{unix.EPERM, unix.EINVAL}},
			{ExecSpec{Args: []string{"/bin/true"}, Cwd: "/", UID: DefaultUID, GID: DefaultGID + 1}, []unix.Errno{unix.EPERM, unix.EINVAL}},
			{ExecSpec{Args: []string{"/bin/true"}, Cwd: "/nonexistent", UID: DefaultUID, GID: DefaultGID}, []unix.Errno{unix.ENOENT}},
		} {
			_, err := a.Exec(context.Background(), c.spec, Stdio{})
			se := setupErr(t, err, StepExec, nil)
			if !slices.Contains(c.errno, se.Errno) {
				t.Errorf("exec %+v: %v, want one of %v", c.spec, err, c.errno)
			}
		}
		if out, e := execOut(t, a, ExecSpec{Args: []string{"echo", "still"}, Env: hostEnv, Cwd: "/", UID: DefaultUID, GID: DefaultGID}, ""); e.Code != 0 || out != "still\n" {
			t.Fatalf("after the refusals: %q %+v", out, e)
		}
	})
}

// TestAdoptedExecSignals: a signal sent to an exec'd process reaches it and
// it dies of it, reported as that signal; the tool and other execs run on.
func TestAdoptedExecSignals(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		a, _ := adopted(t, &Config{})
		startTool(t, a, []string{"sh", "-c", "read x"})
		outR, outW, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer outR.Close()
		e, err := a.Exec(context.Background(), ExecSpec{Args: []string{"sh", "-c", "trap 'echo usr1' USR1; echo ready; while :; do sleep 0.05; done"},
			Env: hostEnv, Cwd: "/", UID: DefaultUID, GID: DefaultGID}, Stdio{Stdout: outW})
		outW.Close()
		if err != nil {
			t.Fatal(err)
		}
		if e.Pid() <= 1 {
			t.Fatalf("exec'd pid %d inside", e.Pid())
		}
		buf := make([]byte, 64)
		outR.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, _ := outR.Read(buf); string(buf[:n]) != "ready\n" {
			t.Fatalf("exec'd output %q", buf[:n])
		}
		if err := e.Signal(unix.SIGUSR1); err != nil {
			t.Fatal(err)
		}
		if n, _ := outR.Read(buf); string(buf[:n]) != "usr1\n" {
			t.Fatalf("after SIGUSR1: %q", buf[:n])
		}
		if err := e.Signal(unix.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if x := e.Wait(); x.Signal != unix.SIGTERM {
			t.Fatalf("after SIGTERM: %+v", x)
		}
		if err := e.Signal(unix.SIGTERM); !errors.Is(err, ErrSandboxGone) {
			t.Fatalf("signal to an ended exec: %v", err)
		}
		if out, x := execOut(t, a, ExecSpec{Args: []string{"echo", "on"}, Env: hostEnv, Cwd: "/", UID: DefaultUID, GID: DefaultGID}, ""); x.Code != 0 || out != "on\n" {
			t.Fatalf("the sandbox after a signalled exec: %q %+v", out, x)
		}
	})
}

// TestAdoptedExecConcurrent: many execs at once each get their own output
// and status.
func TestAdoptedExecConcurrent(t *testing.T) {
	a, _ := adopted(t, &Config{})
	startTool(t, a, []string{"sh", "-c", "read x"})
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, e := execOut(t, a, ExecSpec{Args: []string{"sh", "-c", "echo " + strconv.Itoa(i) + "; exit " + strconv.Itoa(i%100)},
				Env: hostEnv, Cwd: "/", UID: DefaultUID, GID: DefaultGID}, "")
			if out != strconv.Itoa(i)+"\n" || e.Code != i%100 {
				errs <- fmt.Errorf("exec %d: %q %+v", i, out, e)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestAdoptedEndKillsExecs: when the tool ends, the init exits and every
// exec'd process dies with the pid namespace, reported as killed.
func TestAdoptedEndKillsExecs(t *testing.T) {
	a, _ := adopted(t, &Config{})
	in := startTool(t, a, []string{"sh", "-c", "read x"})
	e, err := a.Exec(context.Background(), ExecSpec{Args: []string{"sleep", "100"}, Env: hostEnv, Cwd: "/", UID: DefaultUID, GID: DefaultGID}, Stdio{})
	if err != nil {
		t.Fatal(err)
	}
	in.Close()
	select {
	case <-e.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the exec'd process outlived its sandbox")
	}
	if x := e.Wait(); x.Signal != unix.SIGKILL {
		t.Fatalf("exec'd status %+v, want killed", x)
	}
}

// TestHandoverSyncIsTheLifeline: a detached sandbox whose every copy of the
// sync socket closes ends (it has no parent-death signal to do it), before
// and after its start; and one killed through the adopter's pidfd ends
// with SIGKILL.
func TestHandoverSyncIsTheLifeline(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		s, err := Prepare(context.Background(), &Config{}, WithHandover())
		if err != nil {
			t.Fatal(err)
		}
		h, proc, err := s.Detach()
		if err != nil {
			t.Fatal(err)
		}
		h.Close()
		waitProc(t, proc)

		a, proc := adopted(t, &Config{})
		startTool(t, a, []string{"sleep", "100"})
		a.Close()
		waitProc(t, proc)

		a, proc = adopted(t, &Config{})
		startTool(t, a, []string{"sleep", "100"})
		if err := a.Signal(unix.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if x := a.Wait(); x.Signal != unix.SIGKILL {
			t.Fatalf("killed: %+v", x)
		}
		if x, _ := proc.Wait(); x.Signal != unix.SIGKILL {
			t.Fatalf("the init's own status %+v, want SIGKILL", x)
		}
		if err := a.Signal(unix.SIGTERM); !errors.Is(err, ErrSandboxGone) {
			t.Fatalf("signal after the end: %v", err)
		}
	})
}

func waitProc(t *testing.T, p *Process) {
	t.Helper()
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the sandbox outlived the last copy of its sync socket")
	}
}

// TestDetachNeedsHandover: a sandbox prepared without WithHandover (whose
// init dies with this process) is not detached, and Start refuses the
// option.
func TestDetachNeedsHandover(t *testing.T) {
	s, err := Prepare(context.Background(), &Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, _, err := s.Detach(); !errors.Is(err, ErrNotHandedOver) {
		t.Fatalf("detach: %v", err)
	}
	if _, err := Start(context.Background(), &Config{Args: []string{"/bin/true"}}, Stdio{}, WithHandover()); err == nil {
		t.Fatal("Start accepted WithHandover")
	}
	if _, err := Prepare(context.Background(), &Config{Workdir: workdir(t)}, WithHandover()); err == nil {
		t.Fatal("a lent workdir was accepted for a handover")
	}
}

// TestAdoptRefusesWrongFiles: the handover's numbers must match its files.
func TestAdoptRefusesWrongFiles(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	self, err := unix.PidfdOpen(os.Getpid(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Adopt(&Handover{Pid: os.Getpid(), Sync: r, PidFD: os.NewFile(uintptr(self), "pidfd")}); err == nil {
		t.Fatal("a pipe adopted as the sync socket")
	}
	fds, _ := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	defer unix.Close(fds[1])
	self, _ = unix.PidfdOpen(os.Getpid(), 0)
	if _, err := Adopt(&Handover{Pid: 1, Sync: os.NewFile(uintptr(fds[0]), "s"), PidFD: os.NewFile(uintptr(self), "pidfd")}); err == nil {
		t.Fatal("a pidfd of another pid adopted")
	}
}

// TestInitRefusesBrokenExecFrames: an exec frame whose body the init's
// check refuses fails alone (EINVAL) and the sandbox serves on; a frame
// that breaks the protocol (an unknown type, an exec without its three
// descriptors) ends the sandbox, as nothing after it could be framed.
func TestInitRefusesBrokenExecFrames(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		a, _ := adopted(t, &Config{})
		startTool(t, a, []string{"sh", "-c", "read x"})
		// A body with a relative cwd, sent raw under a registered id.
		a.mu.Lock()
		a.nextID++
		e := &Exec{a: a, id: a.nextID, startCh: make(chan error, 1), done: make(chan struct{})}
		a.execs[e.id] = e
		a.mu.Unlock()
		frame, err := encodeExec(&execRequest{ID: e.id, Cwd: "/", Args: []string{"/bin/true"}, UID: DefaultUID, GID: DefaultGID})
		if err != nil {
			t.Fatal(err)
		}
		bad := bytes.Clone(frame)
		bad[5+execHeader] = 'r' // the cwd "/" becomes "r", relative, of the same length
		if err := a.sendFiles(bad, Stdio{}); err != nil {
			t.Fatal(err)
		}
		if err := a.await(context.Background(), e.startCh); !errors.Is(err, unix.EINVAL) {
			t.Fatalf("a relative cwd: %v, want EINVAL", err)
		}
		if out, x := execOut(t, a, ExecSpec{Args: []string{"echo", "on"}, Env: hostEnv, Cwd: "/", UID: DefaultUID, GID: DefaultGID}, ""); x.Code != 0 || out != "on\n" {
			t.Fatalf("after a refused frame: %q %+v", out, x)
		}
		// An exec frame without descriptors breaks the protocol.
		if err := a.send(frame); err != nil {
			t.Fatal(err)
		}
		select {
		case <-a.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the init served on after an exec frame without its descriptors")
		}
	})
	a, _ := adopted(t, &Config{})
	startTool(t, a, []string{"sh", "-c", "read x"})
	a.send([]byte{'?', 0, 0, 0, 0})
	select {
	case <-a.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the init served on after a message of an unknown type")
	}
}

// TestAdoptedExecWithoutRecvmsg: under a filter that refuses recvmsg, the Go
// init (which received its own request before its filter) runs the tool
// and refuses each exec with EPERM, still ending the sandbox at its
// launcher's EOF; the C tail, which waits under the filter, refuses the
// sandbox at Prepare (TestTailWaitsUnderTheFilter).
func TestAdoptedExecWithoutRecvmsg(t *testing.T) {
	if tailExpected() {
		t.Skip("the C tail refuses such a filter at Prepare (TestTailWaitsUnderTheFilter)")
	}
	a, proc := adopted(t, &Config{Seccomp: denySyscall(t, unix.SYS_RECVMSG)})
	startTool(t, a, []string{"sh", "-c", "read x"})
	_, err := a.Exec(context.Background(), ExecSpec{Args: []string{"/bin/true"}, Cwd: "/", UID: DefaultUID, GID: DefaultGID}, Stdio{})
	setupErr(t, err, StepExec, unix.EPERM)
	a.Close()
	waitProc(t, proc)
}

// TestAdoptedStartFails: a tool that cannot be exec'd fails Start with the
// init's report, and the sandbox ends with the setup's status, 125.
func TestAdoptedStartFails(t *testing.T) {
	a, proc := adopted(t, &Config{})
	err := a.Start(context.Background(), []string{"/nonexistent"}, nil, Stdio{})
	setupErr(t, err, StepExec, unix.ENOENT)
	if x := a.Wait(); x.Code != exitSetup || x.Signal != 0 {
		t.Fatalf("after a failed start: %+v, want %d", x, exitSetup)
	}
	if x, _ := proc.Wait(); x.Code != exitSetup {
		t.Fatalf("the init's own status %+v, want %d", x, exitSetup)
	}
}

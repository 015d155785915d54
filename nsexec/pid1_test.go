//go:build linux

package nsexec

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func init() {
	probes["pid1"] = probePid1
	probes["sigecho"] = probeSigEcho
}

// probePid1 is a tool that tries to reach the init through everything /proc,
// ptrace, pidfds and signals offer, and prints "ok" only if each attempt
// failed and the init is still there, running.
func probePid1() error {
	if os.Getppid() != 1 {
		return fmt.Errorf("the tool's parent is %d, want the init, pid 1", os.Getppid())
	}
	for _, name := range []string{"exe", "root", "cwd", "mem", "environ", "fd", "fd/3", "map_files", "auxv", "task/1/mem", "task/1/environ"} {
		path := "/proc/1/" + name
		flagSet := []int{unix.O_RDONLY, unix.O_WRONLY, unix.O_RDWR}
		if name == "exe" || name == "root" || name == "cwd" || name == "fd/3" {
			// A magic link's target, even as a path handle.
			flagSet = append(flagSet, unix.O_PATH)
		}
		for _, flags := range flagSet {
			if fd, err := unix.Open(path, flags|unix.O_CLOEXEC, 0); err == nil {
				unix.Close(fd)
				return fmt.Errorf("open %s (flags %#x) succeeded", path, flags)
			}
		}
		// An O_PATH handle of the magic link itself must not reopen onto
		// its target either.
		if l, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err == nil {
			fd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(l), unix.O_RDONLY|unix.O_CLOEXEC, 0)
			unix.Close(l)
			if err == nil {
				unix.Close(fd)
				return fmt.Errorf("reopen of %s through an O_PATH handle succeeded", path)
			}
		}
	}
	for _, name := range []string{"exe", "root", "cwd"} {
		if target, err := os.Readlink("/proc/1/" + name); err == nil {
			return fmt.Errorf("readlink /proc/1/%s = %q", name, target)
		}
	}
	if err := unix.PtraceAttach(1); err == nil {
		return errors.New("ptrace attach of pid 1 succeeded")
	}
	if err := unix.PtraceSeize(1); err == nil {
		return errors.New("ptrace seize of pid 1 succeeded")
	}
	buf := make([]byte, 8)
	if _, err := unix.ProcessVMReadv(1, []unix.Iovec{{Base: &buf[0], Len: 8}}, []unix.RemoteIovec{{Base: 0x400000, Len: 8}}, 0); err == nil || err == unix.EFAULT {
		return fmt.Errorf("process_vm_readv of pid 1: %v", err)
	}
	if pidfd, err := unix.PidfdOpen(1, 0); err == nil {
		for fd := 0; fd < 8; fd++ {
			if got, err := unix.PidfdGetfd(pidfd, fd, 0); err == nil {
				unix.Close(got)
				return fmt.Errorf("pidfd_getfd of pid 1's descriptor %d succeeded", fd)
			}
		}
		unix.Close(pidfd)
	}
	// SIGKILL and SIGSTOP from inside the namespace do not reach its init;
	// every catchable signal comes back to the tool, the init acts on none.
	_ = unix.Kill(1, unix.SIGKILL)
	_ = unix.Kill(1, unix.SIGSTOP)
	back := make(chan os.Signal, 8)
	sigs := []syscall.Signal{unix.SIGTERM, unix.SIGSEGV, unix.SIGABRT, unix.SIGINT, unix.SIGUSR1}
	for _, s := range sigs {
		signal.Notify(back, s)
	}
	for _, s := range sigs {
		if err := unix.Kill(1, s); err != nil && err != unix.EPERM {
			return fmt.Errorf("kill(1, %v): %v", s, err)
		} else if err == unix.EPERM {
			continue // the init is another host user's (a root launcher)
		}
		select {
		case got := <-back:
			if got != s {
				return fmt.Errorf("sent %v to pid 1, got %v back", s, got)
			}
		case <-time.After(5 * time.Second):
			return fmt.Errorf("%v sent to pid 1 did not come back to the tool", s)
		}
	}
	if err := unix.Kill(1, 0); err != nil && err != unix.EPERM {
		return fmt.Errorf("pid 1 is gone: %v", err)
	}
	stat, err := os.ReadFile("/proc/1/stat")
	if err != nil {
		return err
	}
	if f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:])); len(f) == 0 || f[0] == "T" || f[0] == "Z" {
		return fmt.Errorf("pid 1 is in state %q", f)
	}
	fmt.Println("ok")
	return nil
}

// TestInitOffersNothing runs the hostile probe as the tool, with a filter
// in force (so the init runs under one too), and checks from the host that
// the init is non-dumpable, filtered, without privileges and without a
// descriptor to any host file while the tool runs.
func TestInitOffersNothing(t *testing.T) {
	requireDefaultDisposition(t)
	bothInits(t, initOffersNothing)
}

// bothInits runs body, as root and as nobody, for a cold sandbox and a
// prepared one, whose init hands over to the C tail in a static build with
// cgo (tail_linux.go).
func bothInits(t *testing.T, body func(t *testing.T, prepared bool)) {
	for _, prepared := range []bool{false, true} {
		name := "cold"
		if prepared {
			name = "prepared"
		}
		t.Run(name, func(t *testing.T) {
			asRootAndNobody(t, func(t *testing.T) { body(t, prepared) })
		})
	}
}

// TestEverySignalForwarded sends each signal a process can catch to the
// sandbox's pid 1, one at a time, and waits for the tool to say it got
// that one: the standard ones and every realtime signal (the last of which
// a custom handler once lost, rootless, on Debian's 6.1 kernel).
func TestEverySignalForwarded(t *testing.T) {
	requireDefaultDisposition(t)
	bothInits(t, func(t *testing.T, prepared bool) {
		p, outR := startPiped(t, probeConfig(t, "sigecho"), prepared)
		defer outR.Close()
		defer func() { p.Signal(unix.SIGKILL); p.Wait() }()
		lines := make(chan string, 128)
		go func() {
			sc := bufio.NewScanner(outR)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		next := func() string {
			select {
			case l := <-lines:
				return l
			case <-time.After(5 * time.Second):
				return "(nothing in 5 s)"
			}
		}
		if l := next(); l != "ready" {
			t.Fatalf("sigecho: %q", l)
		}
		for _, s := range echoedSignals() {
			if err := p.Signal(s); err != nil {
				t.Fatalf("signal %d: %v", s, err)
			}
			if l := next(); l != strconv.Itoa(int(s)) {
				t.Fatalf("sent %d (%v) to pid 1, the tool said %q", s, s, l)
			}
		}
	})
}

// TestSignal34Forwarded: SIGRTMIN, 34, reaches a tool that traps it. Only
// the C tail forwards it: the Go runtime reserves 34 (musl's SIGSYNCCALL),
// so os/signal cannot subscribe to it and the Go init drops it (a limit the
// README states).
func TestSignal34Forwarded(t *testing.T) {
	if !tailExpected() {
		t.Log("this binary's inits are all Go inits, which cannot forward signal 34; the static pass tests the tail's")
		return
	}
	asRootAndNobody(t, func(t *testing.T) {
		outR, outW, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		p, err := start(t, shell(t, `trap "echo got 34" 34; echo up; while :; do sleep 0.05; done`), Stdio{Stdout: outW}, true)
		outW.Close()
		if err != nil {
			t.Fatal(err)
		}
		defer func() { p.Signal(unix.SIGKILL); p.Wait() }()
		r := bufio.NewReader(outR)
		if l, err := r.ReadString('\n'); err != nil || l != "up\n" {
			t.Fatalf("%q %v", l, err)
		}
		if err := p.Signal(syscall.Signal(34)); err != nil {
			t.Fatal(err)
		}
		got := make(chan string, 1)
		go func() { l, _ := r.ReadString('\n'); got <- l }()
		select {
		case l := <-got:
			if l != "got 34\n" {
				t.Fatalf("the tool said %q after signal 34", l)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("signal 34 did not reach the tool")
		}
	})
}

// echoedSignals are the signals TestEverySignalForwarded sends: every one
// the init forwards but SIGPIPE, SIGTTIN, SIGTTOU and SIGTSTP, which the
// Go runtime of the probe treats specially, SIGURG, its preemption signal,
// and SIGPROF and signal 34 (musl's SIGSYNCCALL), which os/signal never
// delivers (TestSignal34Forwarded sends that one to a shell).
func echoedSignals() []syscall.Signal {
	var out []syscall.Signal
	for s := syscall.Signal(1); s <= 64; s++ {
		switch s {
		case unix.SIGKILL, unix.SIGSTOP, unix.SIGCHLD, 32, 33, 34,
			unix.SIGPIPE, unix.SIGTTIN, unix.SIGTTOU, unix.SIGTSTP, unix.SIGURG, unix.SIGPROF:
			continue
		}
		out = append(out, s)
	}
	return out
}

// probeSigEcho says ready, then prints the number of every signal it gets.
func probeSigEcho() error {
	c := make(chan os.Signal, 128)
	for _, s := range echoedSignals() {
		signal.Notify(c, s)
	}
	fmt.Println("ready")
	for s := range c {
		fmt.Println(int(s.(syscall.Signal)))
	}
	return nil
}

// start starts cfg cold, or in a prepared sandbox with the same config.
func start(t *testing.T, cfg *Config, stdio Stdio, prepared bool) (*Process, error) {
	t.Helper()
	if !prepared {
		return Start(context.Background(), cfg, stdio)
	}
	tmpl := *cfg
	tmpl.Args, tmpl.Env = nil, nil
	s, err := Prepare(context.Background(), &tmpl)
	if err != nil {
		return nil, err
	}
	return s.Exec(context.Background(), cfg.Args, cfg.Env, stdio)
}

// startPiped is start with the tool's stdout and stderr on a pipe, whose
// read end it returns (the caller closes it).
func startPiped(t *testing.T, cfg *Config, prepared bool) (*Process, *os.File) {
	t.Helper()
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p, err := start(t, cfg, Stdio{Stdout: outW, Stderr: outW}, prepared)
	outW.Close()
	if err != nil {
		outR.Close()
		t.Fatal(err)
	}
	return p, outR
}

func initOffersNothing(t *testing.T, prepared bool) {
	cfg := probeConfig(t, "pid1")
	cfg.Seccomp = denyMkdirat(t)
	p, outR := startPiped(t, cfg, prepared)
	out, _ := io.ReadAll(outR)
	outR.Close()
	e, err := p.Wait()
	if err != nil || e.Code != 0 || string(out) != "ok\n" {
		t.Fatalf("pid1 probe: %+v %v\noutput: %s", e, err, out)
	}

	cfg = shell(t, "read x")
	cfg.Seccomp = denyMkdirat(t)
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer inW.Close()
	p, err = start(t, cfg, Stdio{Stdin: inR}, prepared)
	inR.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { inW.Close(); p.Wait() }()
	dir := "/proc/" + strconv.Itoa(p.Pid())
	// The launcher's user owns the sandbox's user namespace and may take
	// copies of the init's descriptors (pidfd_getfd(2)); /proc/<pid>/fd
	// of the non-dumpable init is root's alone.
	pidfd, err := unix.PidfdOpen(p.Pid(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pidfd)
	tail := prepared && tailExpected()
	sockets, signalfds := 0, 0
	for fd := 0; fd < 1024; fd++ {
		got, err := unix.PidfdGetfd(pidfd, fd, 0)
		if err == unix.EBADF {
			continue
		}
		if err != nil {
			t.Fatalf("pidfd_getfd of the init's descriptor %d: %v", fd, err)
		}
		var st unix.Stat_t
		err = unix.Fstat(got, &st)
		link, _ := os.Readlink("/proc/self/fd/" + strconv.Itoa(got))
		unix.Close(got)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case st.Mode&unix.S_IFMT == unix.S_IFSOCK:
			sockets++
		case tail && link == "anon_inode:[signalfd]":
			signalfds++ // the C tail's signal queue: no file of the host
		default:
			t.Errorf("the init holds descriptor %d (%s, mode %#o) once the tool runs; only its sync socket (and the tail's signalfd) may stay", fd, link, st.Mode)
		}
	}
	if sockets != 1 || signalfds != btoi(tail) {
		t.Errorf("the init holds %d sockets and %d signalfds, want only its sync socket and %d", sockets, signalfds, btoi(tail))
	}
	tasks, err := os.ReadDir(dir + "/task")
	if err != nil {
		t.Fatal(err)
	}
	if tail && len(tasks) != 1 {
		t.Errorf("the tail runs %d threads, want 1", len(tasks))
	}
	for _, task := range tasks {
		status, err := os.ReadFile(dir + "/task/" + task.Name() + "/status")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(status), "\n") {
			k, v, _ := strings.Cut(line, ":")
			v = strings.TrimSpace(v)
			if (k == "Seccomp" && v != "2") || (k == "NoNewPrivs" && v != "1") {
				t.Errorf("init thread %s: %s %s, want every thread under the filter", task.Name(), k, v)
			}
			if k == "CapEff" || k == "CapPrm" || k == "CapBnd" || k == "CapAmb" {
				if tail && v != "0000000000000000" {
					t.Errorf("the tail holds %s %s, want none", k, v)
				}
			}
		}
	}
	var st unix.Stat_t
	if err := unix.Stat(dir+"/mem", &st); err != nil {
		t.Fatal(err)
	}
	if st.Uid != 0 {
		t.Errorf("/proc/<init>/mem is owned by %d, want root (the init is non-dumpable)", st.Uid)
	}
}

// TestToolStatusAsOutside checks that the sandbox ends as the tool would
// outside: a self-inflicted signal is reported as that signal, exit codes
// pass through, and a signal sent to the sandbox reaches a tool without a
// handler at once.
func TestToolStatusAsOutside(t *testing.T) {
	requireDefaultDisposition(t)
	bothInits(t, func(t *testing.T, prepared bool) {
		for _, c := range []struct {
			script string
			code   int
			sig    syscall.Signal
		}{
			{"kill -9 $$", -1, unix.SIGKILL},
			{"kill -ABRT $$", -1, unix.SIGABRT},
			{"kill -TERM $$", -1, unix.SIGTERM},
			{"exit 137", 137, 0},
			{"exit 0", 0, 0},
		} {
			p, err := start(t, shell(t, c.script), Stdio{}, prepared)
			if err != nil {
				t.Fatal(err)
			}
			e, err := p.Wait()
			if err != nil {
				t.Fatal(err)
			}
			if e.Code != c.code || e.Signal != c.sig {
				t.Errorf("%q: code %d signal %v, want %d %v", c.script, e.Code, e.Signal, c.code, c.sig)
			}
		}
		for _, sig := range []syscall.Signal{unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGQUIT} {
			inR, inW, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			p, err := start(t, shell(t, "echo up; exec sleep 100"), Stdio{Stdout: inW}, prepared)
			inW.Close()
			if err != nil {
				t.Fatal(err)
			}
			b := make([]byte, 3)
			if _, err := inR.Read(b); err != nil {
				t.Fatal(err)
			}
			inR.Close()
			start := time.Now()
			if err := p.Signal(sig); err != nil {
				t.Fatal(err)
			}
			select {
			case <-p.Done():
			case <-time.After(10 * time.Second):
				p.Signal(unix.SIGKILL)
				t.Fatalf("%v did not end a tool without a handler", sig)
			}
			e, err := p.Wait()
			if err != nil || e.Signal != sig {
				t.Errorf("%v sent to the sandbox: %+v %v (after %v), want the tool killed by it", sig, e, err, time.Since(start))
			}
		}
	})
}

// TestOrphansReaped checks that the init reaps the tool's orphans while the
// tool runs: none stays a zombie.
func TestOrphansReaped(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		r := mustRun(t, shell(t, `for i in 1 2 3 4 5; do (true &) ; done; sleep 0.3; `+
			`z=0; for s in /proc/[0-9]*/stat; do case "$(cat $s 2>/dev/null)" in *") Z "*) z=$((z+1));; esac; done; echo zombies $z`))
		if r.stdout != "zombies 0\n" {
			t.Fatalf("got %q", r.stdout)
		}
	})
}

// TestPreparedInitStaysPid1 checks the warm path: a prepared sandbox's init
// starts the tool as its child and forwards a signal to it.
func TestPreparedInitStaysPid1(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		s, err := Prepare(context.Background(), &Config{Workdir: workdir(t)})
		if err != nil {
			t.Fatal(err)
		}
		outR, outW, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		p, err := s.Exec(context.Background(), []string{"/bin/sh", "-c", "echo $PPID; exec sleep 100"}, []string{"PATH=/usr/bin:/bin"}, Stdio{Stdout: outW})
		outW.Close()
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 2)
		if _, err := outR.Read(b); err != nil || string(b) != "1\n" {
			t.Fatalf("the tool's parent: %q %v, want 1", b, err)
		}
		outR.Close()
		if err := p.Signal(unix.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if e, err := p.Wait(); err != nil || e.Signal != unix.SIGTERM {
			t.Fatalf("got %+v %v, want the tool killed by SIGTERM", e, err)
		}
	})
}

// requireDefaultDisposition fails a test that sends the sandbox signals when
// this process inherited one of them ignored (a non-interactive shell
// starts its background jobs with SIGINT and SIGQUIT ignored): the init
// keeps an ignored signal ignored for the tool, as a plain process would
// inherit it, so the test's expectations would not hold. Run the test
// binary with them at their default (env --default-signal=INT,QUIT).
func requireDefaultDisposition(t *testing.T) {
	t.Helper()
	for _, s := range []os.Signal{unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGQUIT} {
		if signal.Ignored(s) {
			t.Fatalf("this test process inherited %v ignored, which its sandboxes keep as a plain process would: run it with the signal at its default", s)
		}
	}
}

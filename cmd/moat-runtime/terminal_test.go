package main

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/conformance/testenv"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// consoleSocket listens at a new --console-socket and returns its path
// and the pty master that comes over it (nil if none came), made
// non-blocking so that its reads take deadlines.
func consoleSocket(t *testing.T) (string, <-chan *os.File) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "console.sock")
	return sock, consoleMaster(t, sock)
}

// TestConsoleIsControlling: with process.terminal the pty is the
// process's controlling terminal, as under runc: /dev/tty opens, the shell
// leads the terminal's foreground group, and ^C on the master ends a sleep
// with SIGINT (130).
func TestConsoleIsControlling(t *testing.T) { testConsoleIsControlling(t) }

// TestConsoleIsControllingAsNobody is TestConsoleIsControlling run by nobody.
func TestConsoleIsControllingAsNobody(t *testing.T) { asNobody(t, testConsoleIsControlling) }

func testConsoleIsControlling(t *testing.T) {
	root := t.TempDir()
	_, spec := bundle(t, "/bin/sh", "-c", `exec 3</dev/tty && echo devtty-ok; [ "$(cut -d' ' -f8 /proc/$$/stat)" = $$ ] && echo foreground-ok; exec sleep 60`)
	spec.Process.Terminal = true
	b := writeBundle(t, spec)
	sock, master := consoleSocket(t)
	if _, errs, code := rt(t, root, "create", "--bundle", b, "--console-socket", sock, "ctty"); code != 0 {
		t.Fatalf("create: exit %d: %s", code, errs)
	}
	defer rt(t, root, "delete", "--force", "ctty")
	m := <-master
	if m == nil {
		t.Fatal("no pty master came over the console socket")
	}
	defer m.Close()
	if _, errs, code := rt(t, root, "start", "ctty"); code != 0 {
		t.Fatalf("start: exit %d: %s", code, errs)
	}
	var got []byte
	buf := make([]byte, 256)
	m.SetReadDeadline(time.Now().Add(10 * time.Second))
	for !strings.Contains(string(got), "foreground-ok") {
		n, err := m.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			t.Fatalf("terminal output %q, want devtty-ok and foreground-ok: %v", got, err)
		}
	}
	if !strings.Contains(string(got), "devtty-ok") {
		t.Fatalf("terminal output %q: /dev/tty did not open", got)
	}
	// sleep is exec'd by then or soon: ^C until the container stops.
	deadline := time.Now().Add(10 * time.Second)
	for ociState(t, root, "ctty").Status != specs.StateStopped {
		if time.Now().After(deadline) {
			t.Fatal("^C did not end the container's sleep")
		}
		m.Write([]byte{0x03})
		time.Sleep(100 * time.Millisecond)
	}
	if st := rawState(t, root, "ctty"); st.Exit == nil || *st.Exit != 130 {
		t.Fatalf("status %v, want 130 (SIGINT)", st.Exit)
	}
}

// TestTerminalMonitorHoldsNoEnginePipe: with a terminal, create's stdout
// and stderr (the pipes containerd's shim reads until they close) are not
// kept by the container's monitor: they end when create exits, while the
// container lives on. The monitor holding them hung `ctr run -t`.
func TestTerminalMonitorHoldsNoEnginePipe(t *testing.T) {
	root := t.TempDir()
	_, spec := bundle(t, "/bin/sleep", "60")
	spec.Process.Terminal = true
	b := writeBundle(t, spec)
	sock, master := consoleSocket(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd := exec.Command(runtimeBin(t), "--root", root, "create", "--bundle", b, "--console-socket", sock, "pipes")
	cmd.Stdout, cmd.Stderr = w, w
	err = cmd.Run()
	w.Close()
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	defer rt(t, root, "delete", "--force", "pipes")
	if m := <-master; m != nil {
		defer m.Close()
	}
	done := make(chan error, 1)
	go func() { _, err := io.ReadAll(r); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("create's stdout is still held open after it exited (by the monitor)")
	}
	if st := ociState(t, root, "pipes"); st.Status != specs.StateCreated {
		t.Fatalf("the container is %s, want created", st.Status)
	}
	if _, errs, code := rt(t, root, "start", "pipes"); code != 0 {
		t.Fatalf("start: exit %d: %s", code, errs)
	}
	waitStatus(t, root, "pipes", specs.StateRunning)
}

// ptyPair opens a pseudo-terminal pair: the master non-blocking (its reads
// take deadlines), the slave for a command that needs a terminal of its
// own (ctr run -t puts its stdin in raw mode).
func ptyPair(t *testing.T) (master, slave *os.File) {
	t.Helper()
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	master = os.NewFile(uintptr(fd), "ptmx")
	t.Cleanup(func() { master.Close() })
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	sfd, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TIOCGPTPEER, uintptr(unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC))
	if errno != 0 {
		t.Fatal(errno)
	}
	slave = os.NewFile(sfd, "pty-slave")
	t.Cleanup(func() { slave.Close() })
	return master, slave
}

// onTerminal runs cmd with the slave of a new pty as its stdio and
// controlling terminal, and returns its exit status and what it wrote,
// or fails if it has not exited within limit.
func onTerminal(t *testing.T, cmd *exec.Cmd, limit time.Duration) (int, string) {
	t.Helper()
	m, s := ptyPair(t)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = s, s, s
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	var out strings.Builder
	read := make(chan struct{})
	go func() {
		defer close(read)
		buf := make([]byte, 512)
		m.SetReadDeadline(time.Now().Add(limit))
		for {
			n, err := m.Read(buf)
			out.Write(buf[:n])
			if err != nil {
				return
			}
		}
	}()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		<-read
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), out.String()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0, out.String()
	case <-time.After(limit):
		cmd.Process.Kill()
		<-done
		<-read
		t.Fatalf("%v still runs after %v: %q", cmd.Args, limit, out.String())
	}
	return 0, ""
}

// podmanInteractive is a user at a terminal (a tmux session) running
// podman run -it IMAGE sh: the shell has job control, ^C ends its sleep
// (130) and ^Z stops one, then the shell's exit is podman's.
func podmanInteractive(t *testing.T, p *podman) {
	tmux, err := exec.LookPath("tmux")
	if err != nil {
		testenv.Skipf(t, "tmux is not installed (Debian: apt-get install tmux)")
	}
	dir := t.TempDir()
	sock, status := filepath.Join(dir, "tmux.sock"), filepath.Join(dir, "status")
	podmanArgv := p.cmd(append(append([]string{"run", "-it", "--rm"}, runFlags()...), testImage, "/bin/sh")...).Args
	tm := func(args ...string) string {
		out, _ := exec.Command(tmux, append([]string{"-S", sock}, args...)...).CombinedOutput()
		return string(out)
	}
	argv := append([]string{"-S", sock, "new-session", "-d", "-s", "moat", "-x", "120", "-y", "40",
		"/bin/sh", "-c", `out=$1; shift; "$@"; echo "exit=$?" > "$out"`, "sh", status}, podmanArgv...)
	if out, err := exec.Command(tmux, argv...).CombinedOutput(); err != nil {
		t.Fatalf("tmux new-session: %v: %s", err, out)
	}
	t.Cleanup(func() { tm("kill-server") })
	screen := func() string { return tm("capture-pane", "-p", "-t", "moat") }
	// until polls the screen for want, doing act (a key) between looks.
	until := func(want string, act ...string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !strings.Contains(screen(), want) {
			if time.Now().After(deadline) {
				t.Fatalf("the terminal never showed %q:\n%s", want, screen())
			}
			if len(act) > 0 {
				tm(append([]string{"send-keys", "-t", "moat"}, act...)...)
			}
			time.Sleep(300 * time.Millisecond)
		}
	}
	until(" #") // the prompt (capture-pane trims its trailing space)
	if s := screen(); strings.Contains(s, "job control turned off") {
		t.Fatalf("the shell has no job control:\n%s", s)
	}
	// The printed words differ from the typed ones (quotes), so the
	// screen shows them only once the shell ran the command.
	// (A shell whose job died of SIGINT drops the rest of its line, so
	// the status is asked for on the next.)
	tm("send-keys", "-t", "moat", `echo s""leeping; sleep 60`, "Enter")
	until("sleeping")
	time.Sleep(500 * time.Millisecond) // the shell forks sleep right after its echo
	tm("send-keys", "-t", "moat", "C-c")
	tm("send-keys", "-t", "moat", `echo "after sleep $?"`, "Enter")
	until("after sleep 130")
	tm("send-keys", "-t", "moat", `echo s""topping; sleep 60`, "Enter")
	until("stopping")
	until("Stopped", "C-z")
	tm("send-keys", "-t", "moat", "kill -9 %1; exit 3", "Enter")
	deadline := time.Now().Add(20 * time.Second)
	for {
		if b, _ := os.ReadFile(status); strings.TrimSpace(string(b)) == "exit=3" {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("podman's status %q, want exit=3:\n%s", b, screen())
		}
		tm("send-keys", "-t", "moat", "exit 3", "Enter") // a shell may first warn of stopped jobs
		time.Sleep(300 * time.Millisecond)
	}
}

// TestExecTTYIsControlling: exec --tty gives the exec'd process its own
// pty as its controlling terminal: /dev/tty opens, it leads the
// terminal's foreground group, and ^C on that master kills it with SIGINT.
func TestExecTTYIsControlling(t *testing.T) { testExecTTY(t) }

// TestExecTTYIsControllingAsNobody is TestExecTTYIsControlling run by nobody.
func TestExecTTYIsControllingAsNobody(t *testing.T) { asNobody(t, testExecTTY) }

func testExecTTY(t *testing.T) {
	root := t.TempDir()
	b, _ := bundle(t, "/bin/sleep", "60")
	if _, errs, code := rt(t, root, "run", "--detach", "--bundle", b, "xtty"); code != 0 {
		t.Fatalf("run --detach: exit %d: %s", code, errs)
	}
	defer rt(t, root, "delete", "--force", "xtty")
	sock, master := consoleSocket(t)
	// exec stands for the process: it dies of the signal that killed it.
	x := exec.Command(runtimeBin(t), "--root", root, "exec", "--tty", "--console-socket", sock, "xtty", "/bin/sh", "-c",
		`exec 3</dev/tty && echo devtty-ok; [ "$(cut -d' ' -f8 /proc/$$/stat)" = $$ ] && echo foreground-ok; exec sleep 60`)
	if err := x.Start(); err != nil {
		t.Fatal(err)
	}
	res := make(chan error, 1)
	go func() { res <- x.Wait() }()
	defer x.Process.Kill()
	m := <-master
	if m == nil {
		t.Fatal("no pty master came over the console socket")
	}
	defer m.Close()
	var got []byte
	buf := make([]byte, 256)
	m.SetReadDeadline(time.Now().Add(10 * time.Second))
	for !strings.Contains(string(got), "foreground-ok") {
		n, err := m.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			t.Fatalf("terminal output %q, want devtty-ok and foreground-ok: %v", got, err)
		}
	}
	if !strings.Contains(string(got), "devtty-ok") {
		t.Fatalf("terminal output %q: /dev/tty did not open", got)
	}
	deadline := time.After(10 * time.Second)
	for {
		m.Write([]byte{0x03})
		select {
		case <-res:
			if ws := x.ProcessState.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGINT {
				t.Fatalf("exec ended %v, want killed by SIGINT", x.ProcessState)
			}
			return
		case <-deadline:
			t.Fatal("^C did not end the exec'd sleep")
		case <-time.After(100 * time.Millisecond):
		}
	}
}

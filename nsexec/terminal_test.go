//go:build linux

package nsexec

import (
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// startOnTerminal starts args with the slave of a new pty as its stdio
// and Config.Terminal, in each of the inits: cold (the Go init), prepared
// with the Go init to the end, and prepared with the C tail where this
// build hands over to it (the static pass). It returns the master.
func startOnTerminal(t *testing.T, how string, args ...string) (*Process, *os.File) {
	t.Helper()
	m, s := openPty(t)
	cfg := &Config{Args: args, Env: []string{"PATH=/usr/bin:/bin", "TERM=dumb", "PS1=$ "}, Terminal: true}
	stdio := Stdio{Stdin: s, Stdout: s, Stderr: s}
	var (
		p   *Process
		err error
	)
	if how == "cold" {
		p, err = Start(context.Background(), cfg, stdio)
	} else {
		var opts []Option
		if how == "prepared-go" {
			opts = append(opts, WithoutTail())
		}
		var pend *Pending
		if pend, err = Prepare(context.Background(), cfg, opts...); err == nil {
			p, err = pend.Exec(context.Background(), cfg.Args, cfg.Env, stdio)
		}
	}
	if err != nil {
		t.Fatalf("start %q: %v", args, err)
	}
	// The init that runs it is the one named: the tail where this build
	// hands over to it, else the Go init.
	comm, _ := os.ReadFile("/proc/" + strconv.Itoa(p.Pid()) + "/comm")
	if tail := strings.TrimSpace(string(comm)) == "moat-sandbox-in"; tail != (how == "prepared" && tailExpected()) {
		t.Fatalf("%s: the init is %q", how, comm)
	}
	s.Close() // the tool's alone now: its end makes the master's reads end
	t.Cleanup(func() { p.Signal(unix.SIGKILL); p.Wait() })
	// A non-blocking copy of the master, so that its reads take deadlines.
	fd, err := unix.FcntlInt(m.Fd(), unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		t.Fatal(err)
	}
	unix.SetNonblock(fd, true)
	pm := os.NewFile(uintptr(fd), "ptmx")
	t.Cleanup(func() { pm.Close() })
	return p, pm
}

// readUntil reads the master until its output has want, or the deadline.
func readUntil(t *testing.T, m *os.File, out *strings.Builder, want string) bool {
	t.Helper()
	m.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 512)
	for !strings.Contains(out.String(), want) {
		n, err := m.Read(buf)
		out.Write(buf[:n])
		if err != nil {
			return strings.Contains(out.String(), want)
		}
	}
	return true
}

func terminalInits(t *testing.T, body func(t *testing.T, how string)) {
	for _, how := range []string{"cold", "prepared-go", "prepared"} {
		t.Run(how, func(t *testing.T) {
			asRootAndNobody(t, func(t *testing.T) { body(t, how) })
		})
	}
}

// TestTerminalIsControlling: with Config.Terminal the pty is the tool's
// controlling terminal: /dev/tty opens (ENXIO without one), the tool leads
// the terminal's session and its group is the foreground one.
func TestTerminalIsControlling(t *testing.T) {
	terminalInits(t, func(t *testing.T, how string) {
		_, m := startOnTerminal(t, how, "/bin/sh", "-c",
			`exec 3</dev/tty && echo devtty-ok; ps -o pid=,sid=,tpgid= -p $$; cut -d' ' -f7 /proc/$$/stat; echo done`)
		var out strings.Builder
		if !readUntil(t, m, &out, "done") {
			t.Fatalf("output %q", out.String())
		}
		if !strings.Contains(out.String(), "devtty-ok") {
			t.Fatalf("/dev/tty did not open: %q", out.String())
		}
		// pid, session, the terminal's foreground group: all the tool's;
		// and its stat's tty_nr is the pty (136, the pts major, << 8).
		lines := strings.Split(out.String(), "\r\n")
		f := strings.Fields(lines[1])
		if len(f) != 3 || f[0] != f[1] || f[1] != f[2] {
			t.Fatalf("the tool does not lead the terminal's session in the foreground: %q", out.String())
		}
		if n, err := strconv.Atoi(lines[2]); err != nil || n>>8 != 136 {
			t.Fatalf("tty_nr %q is not a pty", lines[2])
		}
	})
}

// TestTerminalInterrupt: ^C on the terminal kills the tool with SIGINT
// (the shell's 130), as a terminal does outside a sandbox.
func TestTerminalInterrupt(t *testing.T) {
	terminalInits(t, func(t *testing.T, how string) {
		p, m := startOnTerminal(t, how, "/bin/sleep", "60")
		if _, err := m.Write([]byte{0x03}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-p.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("^C did not end sleep: the terminal sends its SIGINT to no one")
		}
		x, err := p.Wait()
		if err != nil || x.Signal != syscall.SIGINT {
			t.Fatalf("got %+v, %v; want SIGINT", x, err)
		}
	})
}

// TestTerminalJobControl: an interactive shell on the terminal has job
// control: ^Z stops its foreground job, which it then reports stopped.
func TestTerminalJobControl(t *testing.T) {
	terminalInits(t, func(t *testing.T, how string) {
		p, m := startOnTerminal(t, how, "/bin/sh", "-i")
		var out strings.Builder
		if !readUntil(t, m, &out, "$ ") {
			t.Fatalf("no prompt: %q", out.String())
		}
		if strings.Contains(out.String(), "job control turned off") {
			t.Fatalf("the shell has no job control: %q", out.String())
		}
		m.Write([]byte("sleep 60\n"))
		// ^Z until the shell says its job stopped: the shell must have
		// started sleep in the foreground first, which takes its time.
		stopped := false
		for i := 0; i < 50 && !stopped; i++ {
			time.Sleep(100 * time.Millisecond)
			m.Write([]byte{0x1a})
			m.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			buf := make([]byte, 512)
			n, _ := m.Read(buf)
			out.Write(buf[:n])
			stopped = strings.Contains(strings.ToLower(out.String()), "stopped")
		}
		if !stopped {
			t.Fatalf("^Z did not stop the job: %q", out.String())
		}
		// The first exit only warns of the stopped job (dash), the second
		// leaves.
		m.Write([]byte("kill -9 %1; exit 5\nexit 5\n"))
		select {
		case <-p.Done():
		case <-time.After(10 * time.Second):
			readUntil(t, m, &out, "never")
			t.Fatalf("the shell did not exit: %q", out.String())
		}
		if x, err := p.Wait(); err != nil || x.Code != 5 {
			t.Fatalf("got %+v, %v; want exit 5", x, err)
		}
	})
}

// TestTerminalNeedsATerminal: Config.Terminal with a stdin that is no
// terminal fails the exec, naming it, instead of running without one.
func TestTerminalNeedsATerminal(t *testing.T) {
	_, err := Start(context.Background(), &Config{Args: []string{"/bin/true"}, Terminal: true}, Stdio{})
	setupErr(t, err, StepExec, unix.ENOTTY)
}

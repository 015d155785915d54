package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/moat-sandbox/moat/nsexec/hostpath"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// exec (issue 29, D2). The container's init forks the process on the
// monitor's request (nsexec.Adopted.Exec), so it has the container's
// namespaces, cgroup, filter and credentials with no setns from the host;
// it is the init's child, which the engine's subreaper can never reap. So
// the process the engine gets stands for it: `moat-runtime exec` itself, or
// with --detach a small waiter it leaves behind (reparented to the
// subreaper once exec exits), whose pid goes to --pid-file. It forwards
// the signals it gets to the process (through the monitor and the init),
// exits with its status or dies of the same signal, and its end by SIGKILL
// ends the process too (the monitor kills it at the connection's EOF).

// waiterCommand is the hidden command of a detached exec's waiter: the
// connection to the monitor on descriptor 3, a pipe to say it is ready on
// 4.
const waiterCommand = "__exec-wait"

// execOpts are exec's options, runc's.
type execOpts struct {
	id, process, consoleSocket, pidFile, cwd, user string
	tty, detach                                    bool
	env, gids, caps                                []string
	args                                           []string
}

// parseExec reads exec's options, which come before the container ID; what
// follows the ID is the command, options of its own included (runc's
// exec stops at its first argument).
func parseExec(args []string) (execOpts, error) {
	var o execOpts
	p := flagParser{args: args}
	for p.next() {
		name := p.name
		val := func() (string, error) { return p.value() }
		var err error
		var v string
		switch name {
		case "process", "p":
			o.process, err = val()
		case "console-socket":
			o.consoleSocket, err = val()
		case "pid-file":
			o.pidFile, err = val()
		case "cwd":
			o.cwd, err = val()
		case "user", "u":
			o.user, err = val()
		case "env", "e":
			if v, err = val(); err == nil {
				o.env = append(o.env, v)
			}
		case "additional-gids", "g":
			if v, err = val(); err == nil {
				o.gids = append(o.gids, v)
			}
		case "cap", "c":
			if v, err = val(); err == nil {
				o.caps = append(o.caps, v)
			}
		case "preserve-fds":
			if v, err = val(); err == nil && v != "0" {
				err = fmt.Errorf("--preserve-fds %s is not supported: a moat sandbox's process gets stdio only (the CVE-2024-21626 lesson)", v)
			}
		case "apparmor", "process-label":
			if v, err = val(); err == nil && v != "" {
				err = fmt.Errorf("--%s %q is not supported: moat confines with its own user namespace and seccomp filter, not LSM labels", name, v)
			}
		case "cgroup":
			if v, err = val(); err == nil && v != "" {
				err = fmt.Errorf("--cgroup %q is not supported: the process runs in the container's own cgroup", v)
			}
		case "tty", "t":
			o.tty = p.bool()
		case "detach", "d":
			o.detach = p.bool()
		case "no-new-privs", "ignore-paused":
			// no_new_privs is always set (moat's floor); a paused
			// container is refused all the same (execRefusal says why).
		default:
			err = fmt.Errorf("unknown option --%s", name)
		}
		if err != nil {
			return o, err
		}
	}
	rest := p.rest()
	if len(rest) == 0 {
		return o, errors.New("exec wants a container ID")
	}
	o.id, o.args = rest[0], rest[1:]
	if o.process != "" && len(o.args) > 0 {
		return o, errors.New("exec takes --process or a command, not both")
	}
	if o.process == "" && len(o.args) == 0 {
		return o, errors.New("exec wants a command, or --process with a process.json")
	}
	return o, nil
}

// execRequest is what an exec asks the monitor for: a whole process
// (--process), or the container's own with the command, environment
// additions, cwd and user the options give (runc's rules). The monitor
// checks it against the container's (execproc.go).
type execRequest struct {
	Process *specs.Process `json:"process,omitempty"`
	Args    []string       `json:"args,omitempty"`
	Env     []string       `json:"env,omitempty"`
	Cwd     string         `json:"cwd,omitempty"`
	User    *specs.User    `json:"user,omitempty"`
	Caps    []string       `json:"caps,omitempty"`
	// Terminal: the process's stdio is a pty of its own (--tty,
	// process.terminal), to be its controlling terminal.
	Terminal bool `json:"terminal,omitempty"`
}

// request builds the monitor's request, and says whether the process has a
// terminal and of what size.
func (o *execOpts) request() (*execRequest, bool, *specs.Box, error) {
	r := &execRequest{Args: o.args, Env: o.env, Cwd: o.cwd, Caps: o.caps}
	tty, size := o.tty, (*specs.Box)(nil)
	if o.process != "" {
		p, err := readProcess(o.process)
		if err != nil {
			return nil, false, nil, err
		}
		r = &execRequest{Process: p, Caps: o.caps}
		tty, size = p.Terminal, p.ConsoleSize
	}
	if o.user != "" || len(o.gids) > 0 {
		if o.process != "" {
			return nil, false, nil, errors.New("--user and --additional-gids go with a command, not with --process (its user field says it)")
		}
		u, err := parseUser(o.user, o.gids)
		if err != nil {
			return nil, false, nil, err
		}
		r.User = u
	}
	if o.cwd != "" && o.process != "" {
		return nil, false, nil, errors.New("--cwd goes with a command, not with --process (its cwd field says it)")
	}
	switch {
	case tty && o.consoleSocket == "":
		return nil, false, nil, errors.New("a terminal (--tty, process.terminal) needs --console-socket: moat sends the new pty's master there")
	case !tty && o.consoleSocket != "":
		return nil, false, nil, errors.New("--console-socket is for a process with a terminal (--tty, process.terminal)")
	}
	r.Terminal = tty
	return r, tty, size, nil
}

// readProcess reads a process.json, resolved by the rule of nsexec/hostpath
// (a symlink on the way is followed only if root or the caller could have
// planted it): its content goes into the container.
func readProcess(path string) (*specs.Process, error) {
	fd, _, err := hostpath.Open(path, unix.O_RDONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("read --process %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxLine+1))
	if err != nil {
		return nil, fmt.Errorf("read --process %s: %w", path, err)
	}
	if len(b) > maxLine {
		return nil, fmt.Errorf("read --process %s: more than %d bytes", path, maxLine)
	}
	var p specs.Process
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("read --process %s: %w", path, err)
	}
	return &p, nil
}

// parseUser reads --user UID[:GID] and --additional-gids (numbers: the
// container's passwd is not the host's to read).
func parseUser(user string, gids []string) (*specs.User, error) {
	u := &specs.User{}
	id := func(s, what string) (uint32, error) {
		n, err := strconv.ParseUint(s, 10, 32)
		if err != nil || n == 1<<32-1 {
			return 0, fmt.Errorf("--%s %q: use a number, 0 to 4294967294", what, s)
		}
		return uint32(n), nil
	}
	if user != "" {
		us, gs, hasGID := strings.Cut(user, ":")
		var err error
		if u.UID, err = id(us, "user"); err != nil {
			return nil, err
		}
		if hasGID {
			if u.GID, err = id(gs, "user"); err != nil {
				return nil, err
			}
		}
	}
	for _, g := range gids {
		n, err := id(g, "additional-gids")
		if err != nil {
			return nil, err
		}
		u.AdditionalGids = append(u.AdditionalGids, n)
	}
	return u, nil
}

// execCmd is runc exec.
func (r *runtime) execCmd(args []string) error {
	o, err := parseExec(args)
	if err != nil {
		return err
	}
	d, err := r.open(o.id)
	if err != nil {
		return err
	}
	defer d.Close()
	st, alive, err := current(d)
	if err != nil {
		return err
	}
	if !alive || st.Status != specs.StateRunning {
		return fmt.Errorf("exec in container %s: %w", o.id, execRefusal(st.Status))
	}
	req, tty, size, err := o.request()
	if err != nil {
		return err
	}
	stdio := []*os.File{os.Stdin, os.Stdout, os.Stderr}
	if tty {
		pty, err := sendConsole(o.consoleSocket, size)
		if err != nil {
			return err
		}
		defer pty.Close()
		stdio = []*os.File{pty, pty, pty}
	}
	conn, err := dialControl(d.At(controlSocket))
	if errors.Is(err, errNotRunning) {
		return fmt.Errorf("exec in container %s: %w", o.id, execRefusal(specs.StateStopped))
	}
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(controlTimeout))
	if err := writeLine(conn, ctlRequest{Op: "exec", Exec: req}, stdio...); err != nil {
		return fmt.Errorf("exec in container %s: reach its monitor: %w", o.id, err)
	}
	lc := &lineConn{c: conn}
	var rep ctlReply
	files, err := lc.readLine(&rep)
	closeAll(files)
	if err != nil {
		return fmt.Errorf("exec in container %s: its monitor did not answer: %w", o.id, err)
	}
	if !rep.OK {
		return fmt.Errorf("exec in container %s: %s", o.id, rep.Error)
	}
	conn.SetDeadline(time.Time{})
	if o.detach {
		return startWaiter(conn, lc, o.pidFile)
	}
	if o.pidFile != "" {
		if err := writePidFile(o.pidFile, os.Getpid()); err != nil {
			conn.Close() // the process is killed: nothing stands for it
			return err
		}
	}
	return exitCode(waitExec(conn, lc, nil))
}

// startWaiter leaves a waiter behind for a detached exec, with the
// connection, and writes its pid to the pid file once it forwards signals.
func startWaiter(conn *net.UnixConn, lc *lineConn, pidFile string) error {
	if len(lc.buf) > maxLine || len(lc.fds) > 0 {
		return errors.New("exec: the monitor sent more than its start")
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cf, err := conn.File()
	if err != nil {
		return err
	}
	defer cf.Close()
	rd, wr, err := os.Pipe()
	if err != nil {
		return err
	}
	defer rd.Close()
	// What the monitor sent after the start (the end of a process that
	// ended at once) goes to the waiter with the connection.
	w := exec.Command(self, waiterCommand, string(lc.buf))
	// No stdio of the engine's: the process has it; the waiter stands for
	// the process's status alone. Its own session: the caller's terminal
	// signals go where the engine sends them.
	w.ExtraFiles = []*os.File{cf, wr}
	w.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = w.Start()
	wr.Close()
	if err != nil {
		return fmt.Errorf("exec: start its waiter: %w", err)
	}
	var b [1]byte
	if n, _ := rd.Read(b[:]); n != 1 {
		w.Process.Kill()
		w.Wait()
		return errors.New("exec: its waiter died before it was ready")
	}
	if pidFile != "" {
		if err := writePidFile(pidFile, w.Process.Pid); err != nil {
			w.Process.Kill() // and with it the process (the monitor's rule)
			w.Wait()
			return err
		}
	}
	return w.Process.Release()
}

// waiterMain is a detached exec's waiter; its one argument is what exec
// had read of the connection after the start.
func waiterMain(argv []string) int {
	c, err := net.FileConn(os.NewFile(3, "exec"))
	if err != nil || len(argv) != 1 {
		return exitFail
	}
	conn, ok := c.(*net.UnixConn)
	if !ok {
		return exitFail
	}
	return waitExec(conn, &lineConn{c: conn, buf: []byte(argv[0])}, os.NewFile(4, "ready"))
}

// waitExec forwards the signals this process gets to the exec'd process
// until the monitor reports its end, and returns its exit code, or dies of
// the signal that killed it. ready, if not nil, is told once the signals
// are caught.
func waitExec(conn *net.UnixConn, lc *lineConn, ready *os.File) int {
	sigs := make(chan os.Signal, 64)
	signal.Notify(sigs, waiterSignals()...)
	if ready != nil {
		ready.Write([]byte{1})
		ready.Close()
	}
	go func() {
		for s := range sigs {
			writeLine(conn, ctlRequest{Op: "signal", Signal: int(s.(syscall.Signal))})
		}
	}()
	var rep ctlReply
	for rep.Exit == nil {
		files, err := lc.readLine(&rep)
		closeAll(files)
		if err != nil {
			// The monitor is gone, and the container with it.
			rep.Exit = &exitStatus{Code: -1, Signal: int(unix.SIGKILL)}
		}
	}
	signal.Stop(sigs)
	return dieAs(rep.Exit)
}

// dieAs returns the exit code of x, or dies of the signal that killed the
// process (without a core of its own), so that the engine's wait sees what
// it would have seen of the process.
func dieAs(x *exitStatus) int {
	if x.Signal <= 0 || x.Signal > 64 {
		return x.Code
	}
	dieOf(syscall.Signal(x.Signal))
	return 128 + x.Signal // a signal no process dies of (SIGCHLD, say)
}

// dieOf kills this process with sig. The disposition is set to SIG_DFL
// with rt_sigaction(2) itself: os/signal's Reset gives back the Go
// runtime's own handling, which for SIGQUIT, SIGABRT and the like is a
// stack dump and exit status 2, not the signal. The signal goes to this
// thread (tgkill), which the Go runtime never blocks it on.
func dieOf(sig syscall.Signal) {
	unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{})
	goruntime.LockOSThread()
	var dfl struct {
		handler, flags, restorer uintptr
		mask                     uint64
	}
	unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&dfl)), 0, 8, 0, 0)
	set := uint64(1) << (sig - 1)
	unix.RawSyscall6(unix.SYS_RT_SIGPROCMASK, unix.SIG_UNBLOCK, uintptr(unsafe.Pointer(&set)), 0, 8, 0, 0)
	unix.Tgkill(os.Getpid(), unix.Gettid(), sig)
	time.Sleep(time.Second)
}

// waiterSignals is every signal a waiter catches and forwards: those a
// process can catch, but SIGCHLD (its own), SIGPIPE (its own writes to a
// gone monitor) and SIGURG (the Go runtime's preemption).
func waiterSignals() []os.Signal {
	var sigs []os.Signal
	for s := syscall.Signal(1); s <= 64; s++ {
		if slices.Contains([]syscall.Signal{unix.SIGKILL, unix.SIGSTOP, unix.SIGCHLD, unix.SIGPIPE, unix.SIGURG, 32, 33}, s) {
			continue
		}
		sigs = append(sigs, s)
	}
	return sigs
}

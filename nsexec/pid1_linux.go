package nsexec

import (
	"encoding/binary"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// The init stays pid 1 of the sandbox and the tool is its only child, as
// bubblewrap's, tini's and catatonit's inits do (DESIGN.md, the revised
// decision): a pid-namespace init gets only the signals it has a handler
// for (pid_namespaces(7)), so a tool exec'd as pid 1 ignored SIGTERM, could
// not die of its own `kill -9 $$`, never reaped orphans and outlived a
// killed launcher once it cleared its own parent-death signal.
//
// The init forwards every signal a process can catch to the tool, forks
// the processes its launcher asks for beside it (pid1exec_linux.go), reaps
// every child, and when the tool has been reaped sends its wait status to
// the launcher over the sync socket and exits; the kernel then kills
// whatever else is left in the namespace (zap_pid_ns_processes). It dies
// with its launcher: its own parent-death signal (SIGKILL, set at clone,
// re-armed after the identity switch) fires when the launcher's spawning
// thread goes, and the sync socket's EOF covers the window before the
// prctl in the clone child and a launcher that closed its end (and is all
// there is for an init prepared WithHandover, whose launcher hands it over
// and exits). Whatever the tool does to its own parent-death signal,
// session or children, the namespace ends with the init.

// msgStarted is what the init says once the tool was exec'd; msgExit and a
// 4-byte big-endian wait status once the tool was reaped.
const (
	msgStarted byte = 'S'
	msgExit    byte = 'X'
)

// exitLauncherGone is the init's status when its launcher went away.
const exitLauncherGone = 137

// startTool forks and execs the tool from the exec thread, which holds the
// tool's identity, no capability and the filter (installed with TSYNC on
// every thread of the init, so the init runs under it too), then supervises
// it and never returns. It returns only the SetupError of a tool that could
// not be exec'd.
func (c *child) startTool(path string) error {
	// Dumpability is reset by a credential change to fs.suid_dumpable
	// (kernel/cred.c commit_creds), which a host may set to 1; the init
	// must stay non-dumpable for the tool's whole life, so that /proc/1/*
	// is owned by root and ptrace of pid 1 fails the dumpable check
	// (kernel/ptrace.c __ptrace_may_access; CVE-2016-9962).
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return stepErr(StepExec, path, "PR_SET_DUMPABLE", err)
	}
	// The subscription began with the setup (subscribe); it must be complete
	// before the fork so nothing the tool does or gets is lost.
	<-c.subscribed
	// syscall.ForkExec clones from the calling thread (CLONE_VFORK|CLONE_VM),
	// the locked exec thread, so the child inherits that thread's
	// credentials, empty capability sets, locked securebits, no_new_privs and
	// filter; its own CLOEXEC pipe reports a failed execve as the errno.
	// With a terminal, the new session's controlling terminal is stdin
	// (Ctty 0): TIOCSCTTY from the session leader, after its setsid and
	// before its exec (tty_ioctl(4); Go's forkAndExecInChild1 does it in
	// that order), makes the session leader's process group the
	// terminal's foreground one (drivers/tty/tty_jobctrl.c tiocsctty).
	sys := &syscall.SysProcAttr{Setsid: true, Setctty: c.cfg.Terminal, Ctty: 0}
	if c.cfg.NoUserNS {
		sys = noUserNSToolAttr()
	}
	pid, err := syscall.ForkExec(path, c.cfg.Args, &syscall.ProcAttr{
		Env:   c.cfg.Env,
		Files: []uintptr{0, 1, 2},
		Sys:   sys,
	})
	if err != nil {
		return stepErr(StepExec, path, "", err)
	}
	// The tool has its stdio; the init keeps no descriptor of a host file:
	// its stdio goes, and so does everything above the sync socket that it
	// inherited from its launcher (already close-on-exec for the tool),
	// but the egress forwarder's listening socket. The Go runtime of the
	// init holds none of its own (initEnv).
	for fd := 0; fd < 3; fd++ {
		unix.Close(fd)
	}
	if err := closeAbove(c.sync, c.egress); err != nil {
		unix.Kill(pid, unix.SIGKILL)
		os.Exit(exitSetup)
	}
	if c.egress >= 0 {
		go forwardEgress(c.egress, c.cfg.Egress.Socket)
	}
	if err := writeAll(c.sync, []byte{msgStarted}); err != nil {
		os.Exit(exitLauncherGone) // the namespace, the tool with it, ends here
	}
	c.supervise(pid, c.fwd)
	return nil
}

// subscribe asks the Go runtime for every signal the init forwards.
// os/signal enables one signal at a time, each a round trip to the
// runtime's signal thread (runtime ensureSigM), about 2 ms for all of them
// on a busy host; so it runs beside the setup (and before a prepared
// sandbox waits for its request), off the critical path. A signal that
// arrives meanwhile is queued and reaches the tool once it runs.
func (c *child) subscribe() {
	c.fwd = make(chan os.Signal, 64)
	c.subscribed = make(chan struct{})
	go func() {
		signal.Notify(c.fwd, forwarded()...)
		close(c.subscribed)
	}()
}

// supervise forwards signals to the tool and reaps until the tool is gone,
// then reports its status and exits. A goroutine waits in wait4(2), which
// reaps the children of every thread of the init: the tool's exit wakes it
// directly, without the round trips of a SIGCHLD through the Go runtime's
// signal goroutine. The forwarding stays on the exec thread, the one that
// forked the tool; every thread has the tool's credentials by now
// (dropEveryThread), so kill(2) passes the permission check from any. The
// processes the launcher asks for (pid1exec_linux.go) are forked on the
// exec thread too, as the tool was.
func (c *child) supervise(tool int, fwd chan os.Signal) {
	c.tool = tool // before any goroutine that may leave (pid1exec_linux.go)
	execs := newExecTable()
	forks := make(chan execFork)
	go c.serveLauncher(execs, forks)
	go func() {
		for {
			var ws unix.WaitStatus
			pid, err := unix.Wait4(-1, &ws, 0, nil)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				os.Exit(exitSetup) // ECHILD: the tool is gone unseen, cannot happen
			}
			if pid == tool {
				c.exit(tool, ws)
			}
			if id, ok := execs.reaped(pid); ok {
				c.send(execMsg(msgExecExit, id, uint32(ws)))
			}
			// An orphan re-parented to the init: reaped, nothing more.
		}
	}()
	for {
		select {
		case s := <-fwd:
			// A signal the tool sent to pid 1 comes back to it; the init
			// itself never acts on one.
			_ = unix.Kill(tool, s.(syscall.Signal))
		case f := <-forks:
			c.forkExec(f, execs)
		}
	}
}

// send writes one message to the launcher, whole, whichever goroutine has
// one; a launcher that is gone ends the sandbox (as serveLauncher's EOF).
func (c *child) send(b []byte) {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	for len(b) > 0 {
		n, err := unix.SendmsgN(c.sync, b, nil, nil, unix.MSG_NOSIGNAL)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			c.leave(exitLauncherGone)
		}
		b = b[n:]
	}
}

// exit sends the tool's wait status to the launcher, which reports it as the
// sandbox's (a signal stays a signal), and exits with the shell's encoding
// of it, 128+N for signal N, for a launcher that reads only the exit code.
func (c *child) exit(tool int, ws unix.WaitStatus) {
	c.endDescendants(tool)
	msg := binary.BigEndian.AppendUint32([]byte{msgExit}, uint32(ws))
	c.sendMu.Lock() // held to the end: nothing is sent after the exit
	_, _ = unix.SendmsgN(c.sync, msg, nil, nil, unix.MSG_NOSIGNAL)
	code := ws.ExitStatus()
	if ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	os.Exit(code)
}

// forwarded lists every signal a process can catch but SIGCHLD, which is
// the init's own (it reaps in wait4): 1 to 31 without SIGKILL and SIGSTOP,
// and the real-time signals from SIGRTMIN (34; glibc keeps 32 and 33). A
// signal the init inherited as ignored stays ignored, so the tool inherits
// that too, as it would outside.
func forwarded() []os.Signal {
	sigs := make([]os.Signal, 0, 60)
	add := func(s syscall.Signal) {
		if !signal.Ignored(s) {
			sigs = append(sigs, s)
		}
	}
	for s := syscall.Signal(1); s <= 31; s++ {
		if s != unix.SIGKILL && s != unix.SIGSTOP && s != unix.SIGCHLD {
			add(s)
		}
	}
	for s := syscall.Signal(34); s <= 64; s++ {
		add(s)
	}
	return sigs
}

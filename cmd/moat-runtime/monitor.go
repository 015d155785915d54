package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/moat-sandbox/moat/cgroups"
	"github.com/moat-sandbox/moat/nsexec"
	"github.com/moat-sandbox/moat/nsexec/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// monitorCommand is the hidden command create starts the monitor with.
const monitorCommand = "__monitor"

// monitor holds one container once create handed it over (handoff.go):
// the prepared sandbox until start, then the running one, until it ends. It
// is not the init's parent (the engine's subreaper is): it learns the end
// from the init's report and its pidfd (nsexec.Adopted).
type monitor struct {
	id    string
	h     *handoff
	dir   *oci.Dir
	state *oci.State
	log   *slog.Logger
	sb    *nsexec.Adopted
	leaf  *cgroups.Leaf
	stdio nsexec.Stdio
	pty   *os.File // the terminal's slave, when process.terminal
	ln    *net.UnixListener

	mu       sync.Mutex
	started  bool
	killed   syscall.Signal // what ended a created container
	sessions int            // requests still to answer
	closing  bool           // no new request once the container ended
	idle     *sync.Cond

	unpaused specs.ContainerState // under mu: what resume returns a paused container to (leafops.go)
}

// monitorMain is the monitor process: argv is the container's ID, and the
// handoff comes on handoffFD. It returns once the container has ended, or
// at once when create failed or was killed before its commit, after
// undoing what create left.
func monitorMain(g global, argv []string) int {
	rl := openLog(g)
	defer rl.close()
	log := rl.logger
	if len(argv) != 1 {
		log.Error("monitor: want the container's ID")
		return exitFail
	}
	id := argv[0]
	conn, err := handoffConn(os.NewFile(handoffFD, "handoff"))
	if err != nil {
		log.Error(err.Error())
		return exitFail
	}
	defer conn.Close()
	lc := &lineConn{c: conn}
	var h handoff
	files, err := lc.readLine(&h)
	if err != nil {
		// create failed, or was killed, before its handoff.
		undoCreate(g, id, nil, nil, log)
		return exitFail
	}
	m, err := adopt(g, log, id, &h, files)
	if err != nil {
		writeLine(conn, handoffReply{Error: err.Error()})
		undoCreate(g, id, &h, nil, log)
		return exitFail
	}
	writeLine(conn, handoffReply{OK: true})
	var commit handoffCommit
	if got, err := lc.readLine(&commit); err != nil || !commit.Commit {
		closeAll(got)
		log.Debug("create ended before its commit", "id", id, "err", err)
		undoCreate(g, id, &h, m, log)
		return exitFail
	}
	conn.Close()
	return m.serve()
}

// undoCreate ends what a create that did not commit left: the sandbox (if
// the monitor has it), the cgroup leaf create made for the monitor, and
// the state directory.
func undoCreate(g global, id string, h *handoff, m *monitor, log *slog.Logger) {
	if m != nil {
		m.sb.Close()
		m.ln.Close()
	}
	if leaf, err := openLeaf(id, h, log); err == nil {
		if err := leaf.Delete(); err != nil {
			log.Warn("remove the cgroup of a failed create", "err", err)
		}
	}
	if root, err := oci.OpenRoot(g.root); err == nil {
		removeDir(root, id)
		root.Close()
	}
}

// adopt takes the handed-over sandbox and writes the created state.
func adopt(g global, log *slog.Logger, id string, h *handoff, files []*os.File) (*monitor, error) {
	ho, lnFile, pty, err := h.split(files)
	if err != nil {
		return nil, err
	}
	sb, err := nsexec.Adopt(ho, nsexec.WithLogger(log))
	if err != nil {
		lnFile.Close()
		if pty != nil {
			pty.Close()
		}
		return nil, err
	}
	m := &monitor{id: id, h: h, log: log, sb: sb, pty: pty,
		stdio: nsexec.Stdio{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}}
	m.idle = sync.NewCond(&m.mu)
	fail := func(err error) (*monitor, error) {
		sb.Close()
		if m.ln != nil {
			m.ln.Close()
		}
		if pty != nil {
			pty.Close()
		}
		return nil, err
	}
	l, err := net.FileListener(lnFile)
	lnFile.Close()
	if err != nil {
		return fail(fmt.Errorf("the control socket: %w", err))
	}
	m.ln = l.(*net.UnixListener)
	m.ln.SetUnlinkOnClose(false)
	if pty != nil {
		m.stdio = nsexec.Stdio{Stdin: pty, Stdout: pty, Stderr: pty}
	}
	if h.Leaf != "" {
		if m.leaf, err = openLeaf(id, h, log); err != nil {
			return fail(fmt.Errorf("the container's cgroup: %w", err))
		}
	}
	root, err := oci.OpenRoot(g.root)
	if err != nil {
		return fail(err)
	}
	defer root.Close()
	if m.dir, err = root.Open(id); err != nil {
		return fail(err)
	}
	start, err := oci.StartTime(h.Pid)
	if err != nil {
		return fail(fmt.Errorf("the container's init %d: %w", h.Pid, err))
	}
	mstart, err := oci.StartTime(os.Getpid())
	if err != nil {
		return fail(err)
	}
	m.state = &oci.State{State: specs.State{Version: specs.Version, ID: id, Status: specs.StateCreated,
		Pid: h.Pid, Bundle: h.Bundle, Annotations: h.Annotations}, PidStart: start,
		Monitor: os.Getpid(), MonitorStart: mstart, Created: time.Now().UTC()}
	if err := m.dir.WriteState(m.state); err != nil {
		return fail(err)
	}
	return m, nil
}

// serve answers the control socket until the container ends, then records
// the end and removes the cgroup leaf.
func (m *monitor) serve() int {
	go func() {
		for {
			c, err := m.ln.AcceptUnix()
			if err != nil {
				return
			}
			go m.handle(c)
		}
	}()
	<-m.sb.Done()
	m.finish()
	return 0
}

// handle answers one connection.
func (m *monitor) handle(c *net.UnixConn) {
	defer c.Close()
	if !peerAllowed(c) {
		return
	}
	// Every request is answered before the monitor exits: a process that
	// ends at once must not take the answer to its start with it.
	live := m.beginSession()
	if live {
		defer m.endSession()
	}
	c.SetReadDeadline(time.Now().Add(controlTimeout))
	lc := &lineConn{c: c}
	var req ctlRequest
	files, err := lc.readLine(&req)
	if err != nil {
		return
	}
	if req.Op != "exec" {
		closeAll(files)
	}
	c.SetReadDeadline(time.Time{})
	if !live {
		closeAll(files)
		if req.Op == "exec" {
			reply(c, execRefusal(specs.StateStopped))
		} else {
			reply(c, errNotRunning)
		}
		return
	}
	switch req.Op {
	case "start":
		reply(c, m.startProcess())
	case "kill":
		if req.Signal <= 0 || req.Signal > 64 {
			reply(c, fmt.Errorf("bad signal %d", req.Signal))
			return
		}
		reply(c, m.signal(syscall.Signal(req.Signal), req.All))
	case "exec":
		m.execSession(c, lc, req.Exec, files)
	case "lease":
		m.shareLease(c)
	case "ps", "pause", "resume", "stats", "update":
		m.leafRequest(c, req) // leafops.go
	default:
		reply(c, fmt.Errorf("unknown request %q", req.Op))
	}
}

// startProcess hands the prepared sandbox its process.
func (m *monitor) startProcess() error {
	m.mu.Lock()
	if m.started || m.killed != 0 || m.state.Status == statePaused {
		st := m.state.Status
		m.mu.Unlock()
		return startRefusal(st)
	}
	m.started = true
	m.mu.Unlock()
	err := m.sb.Start(context.Background(), m.h.Args, m.h.Env, m.stdio)
	if err != nil {
		// The sandbox is gone: finish records it stopped.
		if x := execFailure(err); x != nil {
			return x
		}
		return fmt.Errorf("start the container's process: %w", err)
	}
	m.dropStdio()
	m.mu.Lock()
	m.state.Status = specs.StateRunning
	err = m.dir.WriteState(m.state)
	m.mu.Unlock()
	if err != nil {
		m.log.Warn("record the running state", "err", err)
	}
	return nil
}

// dropStdio lets go of the container's stdio once the process holds it,
// so the engine's pipes end when the container does.
func (m *monitor) dropStdio() {
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return
	}
	defer null.Close()
	for fd := 0; fd < 3; fd++ {
		unix.Dup3(int(null.Fd()), fd, 0)
	}
	if m.pty != nil {
		m.pty.Close()
	}
}

// signal sends sig to the container: a created one ends (killed: a
// prepared init queues catchable signals for a process that never comes),
// a running one's init forwards it to the process. With all and SIGKILL
// the whole cgroup leaf is killed too. A container that has ended is
// errNotRunning, but for --all, which runc answers with success.
func (m *monitor) signal(sig syscall.Signal, all bool) error {
	m.mu.Lock()
	started := m.started
	if !started && m.killed == 0 {
		m.killed = sig
	}
	m.mu.Unlock()
	if !started {
		sig = unix.SIGKILL
	}
	if all && sig == unix.SIGKILL && m.leaf != nil {
		if err := m.leaf.Kill(); err != nil {
			m.log.Warn("kill the container's cgroup", "err", err)
		}
	}
	err := m.sb.Signal(sig)
	if sig == unix.SIGKILL {
		m.thawKilled()
	}
	if errors.Is(err, nsexec.ErrSandboxGone) {
		if all {
			return nil
		}
		return errNotRunning
	}
	return err
}

// finish records the stopped state and the status, waits (a bounded
// while) for the requests in flight to be answered (an exec's end among
// them), and removes the cgroup leaf.
func (m *monitor) finish() {
	m.ln.Close()
	x := m.sb.Wait()
	status := x.Code
	if x.Signal != 0 {
		status = 128 + int(x.Signal)
	}
	m.mu.Lock()
	if !m.started && m.killed != 0 {
		status = 128 + int(m.killed)
	}
	m.closing = true
	m.state.Status = specs.StateStopped
	m.state.Exit = &status
	err := m.dir.WriteState(m.state)
	deadline := time.AfterFunc(5*time.Second, func() {
		m.mu.Lock()
		m.sessions = 0
		m.idle.Broadcast()
		m.mu.Unlock()
	})
	for m.sessions > 0 {
		m.idle.Wait()
	}
	m.mu.Unlock()
	deadline.Stop()
	if err != nil {
		m.log.Warn("record the stopped state", "err", err)
	}
	if m.leaf != nil {
		if err := m.leaf.Delete(); err != nil {
			m.log.Warn("remove the container's cgroup", "err", err)
		}
	}
}

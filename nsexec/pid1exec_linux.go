package nsexec

import (
	"encoding/binary"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// The Go init's side of the exec protocol (execwire_linux.go): a goroutine
// reads what the launcher sends once the tool runs and ends the sandbox at
// its EOF, as the init always did when the launcher went away; the exec
// thread forks each requested process (supervise), exactly as it forked the
// tool: with the tool's credentials, capability sets, bounding set (which
// only the exec thread empties in a build without cgo), securebits,
// no_new_privs and filter, in its own session, with its three stdio
// descriptors and nothing else of the init's (every one of them is
// close-on-exec).

// execFork is a request the exec thread forks, with its stdio.
type execFork struct {
	req *execRequest
	fds [3]int
}

// execTable is what the init knows of the processes it forked on request:
// the reaper reports an exit only for a pid in it, and a signal reaches
// only a process in it, so a recycled pid or an id never started is never
// hit. forkExec holds mu from the fork to its msgExecStarted, so the
// reaper, which looks up under mu, neither misses a process that ends at
// once nor reports its exit before its start.
type execTable struct {
	mu    sync.Mutex
	byPid map[int]uint32
	byID  map[uint32]int
}

func newExecTable() *execTable {
	return &execTable{byPid: map[int]uint32{}, byID: map[uint32]int{}}
}

// reaped forgets the process pid, if it was one of the exec'd, and returns
// its id.
func (t *execTable) reaped(pid int) (uint32, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	id, ok := t.byPid[pid]
	if ok {
		delete(t.byPid, pid)
		delete(t.byID, id)
	}
	return id, ok
}

// signal sends sig to exec id, if it still runs.
func (t *execTable) signal(id uint32, sig syscall.Signal) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if pid, ok := t.byID[id]; ok {
		_ = unix.Kill(pid, sig)
	}
}

// serveLauncher reads the launcher's messages until its EOF, which ends the
// sandbox (the launcher died or gave up on it). Anything that breaks the
// protocol ends it too: nothing after it could be framed.
func (c *child) serveLauncher(execs *execTable, forks chan<- execFork) {
	// A filter written for another runtime may refuse recvmsg(2) (the Go
	// init's own receive came before its filter): the init then reads
	// with read(2), which still sees the launcher's EOF, and refuses each
	// exec with recvmsg's errno (the descriptors, unread, are dropped).
	var plain unix.Errno
	for {
		var t byte
		var fds []int
		var err error
		if plain == 0 {
			t, fds, err = recvType(c.sync)
			if err == unix.EPERM || err == unix.EACCES || err == unix.ENOSYS {
				plain, err = err.(unix.Errno), nil
			}
		}
		if err == nil && plain != 0 {
			var b [1]byte
			err = readFull(c.sync, b[:])
			t, fds = b[0], nil
		}
		if err != nil {
			c.leave(exitLauncherGone)
		}
		switch {
		case t == msgExecReq && plain != 0:
			var hdr [4]byte
			if readFull(c.sync, hdr[:]) != nil {
				c.leave(exitLauncherGone)
			}
			n := binary.BigEndian.Uint32(hdr[:])
			if n > maxFrame || n < 4 {
				c.leave(exitSetup)
			}
			body := make([]byte, n)
			if readFull(c.sync, body) != nil {
				c.leave(exitLauncherGone)
			}
			c.send(execMsg(msgExecFailed, binary.BigEndian.Uint32(body), uint32(plain)))
		case t == msgExecReq && len(fds) == 3:
			var hdr [4]byte
			if readFull(c.sync, hdr[:]) != nil {
				c.leave(exitLauncherGone)
			}
			n := binary.BigEndian.Uint32(hdr[:])
			if n > maxFrame || n < 4 {
				c.leave(exitSetup)
			}
			body := make([]byte, n)
			if readFull(c.sync, body) != nil {
				c.leave(exitLauncherGone)
			}
			req, err := decodeExec(body)
			if err != nil {
				closeFDs(fds)
				// The frame was whole, so the stream is still in step:
				// the request alone is refused.
				c.send(execMsg(msgExecFailed, binary.BigEndian.Uint32(body), uint32(errnoOf(err))))
				continue
			}
			var f execFork
			copy(f.fds[:], fds)
			forks <- f.with(req)
		case t == msgExecSignal && len(fds) == 0:
			var b [8]byte
			if readFull(c.sync, b[:]) != nil {
				c.leave(exitLauncherGone)
			}
			id, sig := binary.BigEndian.Uint32(b[:]), binary.BigEndian.Uint32(b[4:])
			if sig >= 1 && sig <= 64 {
				execs.signal(id, syscall.Signal(sig))
			}
		default:
			closeFDs(fds)
			c.leave(exitSetup)
		}
	}
}

func (f execFork) with(r *execRequest) execFork { f.req = r; return f }

// recvType reads one message type byte and the descriptors that came with
// it (received close-on-exec, and moved above stdio, which the init closed
// once the tool had it: a descriptor received as 0, 1 or 2 could otherwise
// be clobbered, or written to by the Go runtime's crash output). More than
// three descriptors end the conversation: the sender broke the protocol.
func recvType(fd int) (byte, []int, error) {
	var b [1]byte
	oob := make([]byte, unix.CmsgSpace(4*4))
	for {
		n, oobn, flags, _, err := unix.Recvmsg(fd, b[:], oob, unix.MSG_CMSG_CLOEXEC)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, nil, err
		}
		var fds []int
		if oobn > 0 {
			msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
			if err != nil {
				return 0, nil, err
			}
			for _, m := range msgs {
				if rights, err := unix.ParseUnixRights(&m); err == nil {
					fds = append(fds, rights...)
				}
			}
		}
		for i, f := range fds {
			if f < 3 {
				if up, err := unix.FcntlInt(uintptr(f), unix.F_DUPFD_CLOEXEC, 3); err == nil {
					unix.Close(f)
					fds[i] = up
				}
			}
		}
		if flags&unix.MSG_CTRUNC != 0 || len(fds) > 3 {
			closeFDs(fds)
			return 0, nil, unix.EPROTO
		}
		if n == 0 {
			closeFDs(fds)
			return 0, nil, unix.ECONNRESET
		}
		return b[0], fds, nil
	}
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// forkExec starts one requested process from the exec thread and reports
// it; its stdio descriptors are closed here either way.
func (c *child) forkExec(f execFork, execs *execTable) {
	defer closeFDs(f.fds[:])
	r := f.req
	fail := func(errno unix.Errno) { c.send(execMsg(msgExecFailed, r.ID, uint32(errno))) }
	execs.mu.Lock()
	live, dup := len(execs.byID), execs.byID[r.ID] != 0
	execs.mu.Unlock()
	switch {
	case live >= maxExecs:
		fail(unix.EAGAIN)
		return
	case dup:
		fail(unix.EEXIST)
		return
	}
	path, err := lookPath(r.Args[0], r.Env)
	if err != nil {
		fail(errnoOf(err))
		return
	}
	// A terminal becomes the new session's controlling one, as the
	// tool's does (startTool): Ctty is the child's descriptor 0.
	sys := &syscall.SysProcAttr{Setsid: true, Setctty: r.Terminal, Ctty: 0}
	if r.UID != c.cfg.UID || r.GID != c.cfg.GID {
		// Another identity needs CAP_SETUID and CAP_SETGID, which the init
		// does not hold (the launcher refuses such a request first): the
		// child's setresuid fails and nothing runs.
		sys.Credential = &syscall.Credential{Uid: r.UID, Gid: r.GID, NoSetGroups: true}
	}
	execs.mu.Lock()
	pid, err := syscall.ForkExec(path, r.Args, &syscall.ProcAttr{
		Dir:   r.Cwd,
		Env:   r.Env,
		Files: []uintptr{uintptr(f.fds[0]), uintptr(f.fds[1]), uintptr(f.fds[2])},
		Sys:   sys,
	})
	if err != nil {
		execs.mu.Unlock()
		fail(errnoOf(err))
		return
	}
	execs.byPid[pid], execs.byID[r.ID] = r.ID, pid
	// Sent under mu: the reaper reports the exit only after this.
	c.send(execMsg(msgExecStarted, r.ID, uint32(pid)))
	execs.mu.Unlock()
}

// leave ends the sandbox without a status to report: in a joined pid
// namespace it first ends what the init started (endDescendants).
func (c *child) leave(code int) {
	c.endDescendants(c.tool)
	os.Exit(code)
}

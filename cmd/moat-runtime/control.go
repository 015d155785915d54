package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// The monitor listens on a unix socket in the container's state directory
// (0700, so only the runtime's user reaches it; the peer's uid is checked
// too). A request is one JSON line (lines.go), and so is each answer:
//
//	{"op":"start"}                 the created container's process starts
//	{"op":"kill","signal":N,"all"} N goes to the container (a created one ends)
//	{"op":"exec","exec":{...}}     a process starts beside it (exec.go), with
//	                               its three stdio descriptors attached; the
//	                               answer {"pid":P} comes once it runs, then
//	                               {"exit":{...}} when it ends. Meanwhile the
//	                               client may send {"op":"signal","signal":N}
//	                               for it; the connection's EOF before the
//	                               exit kills it (its waiter is gone)
//	{"op":"lease"}                 a copy of the lock of the container's id
//	                               range, attached; the answer says
//	                               {"ok":true,"lease":true} with it, or
//	                               {"ok":true} when it holds none
//	                               (podrange.go)
//	{"op":"ps"}                    the container's pids: {"ok":true,"pids":[...]}
//	{"op":"pause"}, {"op":"resume"} its cgroup leaf frozen, thawed
//	{"op":"stats"}                 {"ok":true,"stats":{...}}, the leaf's use
//	                               and limits
//	{"op":"update","resources":R}  the leaf's limits changed (leafops.go)
const controlSocket = "ctl"

// controlTimeout bounds one request; a start waits for the exec.
const controlTimeout = 15 * time.Second

// ctlRequest is one request on the control socket.
type ctlRequest struct {
	Op     string       `json:"op"`
	Signal int          `json:"signal,omitempty"`
	All    bool         `json:"all,omitempty"`
	Exec   *execRequest `json:"exec,omitempty"`

	Resources *specs.LinuxResources `json:"resources,omitempty"`
}

// ctlReply is one answer.
type ctlReply struct {
	OK    bool        `json:"ok,omitempty"`
	Error string      `json:"error,omitempty"`
	Pid   int         `json:"pid,omitempty"`
	Lease bool        `json:"lease,omitempty"`
	Exit  *exitStatus `json:"exit,omitempty"`
	Pids  []int       `json:"pids,omitempty"`
	Stats *leafStats  `json:"stats,omitempty"`
}

// exitStatus is how an exec'd process ended: its code, or the signal that
// killed it.
type exitStatus struct {
	Code   int `json:"code"`
	Signal int `json:"signal,omitempty"`
}

// dialControl connects to the monitor of the container whose state
// directory is reached through at; a monitor that is gone is
// errNotRunning.
func dialControl(at string) (*net.UnixConn, error) {
	conn, err := net.DialTimeout("unix", at, controlTimeout)
	if err != nil {
		if errors.Is(err, unix.ECONNREFUSED) || errors.Is(err, unix.ENOENT) {
			return nil, errNotRunning
		}
		return nil, fmt.Errorf("reach the container's monitor: %w", err)
	}
	return conn.(*net.UnixConn), nil
}

// request sends one request to the monitor and returns its answer's error.
func request(at string, req ctlRequest) error {
	_, err := ask(at, req)
	return err
}

// ask sends one request to the monitor and returns its answer.
func ask(at string, req ctlRequest) (*ctlReply, error) {
	conn, err := dialControl(at)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(controlTimeout))
	if err := writeLine(conn, req); err != nil {
		return nil, fmt.Errorf("reach the container's monitor: %w", err)
	}
	var rep ctlReply
	lc := &lineConn{c: conn}
	files, err := lc.readLine(&rep)
	closeAll(files)
	if err != nil {
		return nil, fmt.Errorf("the container's monitor did not answer %q: %w", req.Op, err)
	}
	if !rep.OK {
		// The monitor's errNotRunning stays that sentinel for the callers
		// that branch on it (kill --all, the end of an events stream).
		if rep.Error == errNotRunning.Error() {
			return nil, errNotRunning
		}
		return nil, errors.New(rep.Error)
	}
	return &rep, nil
}

// reply sends the answer to a request: ok, or the error.
func reply(c *net.UnixConn, err error) {
	if err != nil {
		writeLine(c, ctlReply{Error: err.Error()})
		return
	}
	writeLine(c, ctlReply{OK: true})
}

// peerAllowed says whether the connecting process runs as the monitor's
// own user (or root).
func peerAllowed(c *net.UnixConn) bool {
	raw, err := c.SyscallConn()
	if err != nil {
		return false
	}
	var cred *unix.Ucred
	var cerr error
	raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) })
	return cerr == nil && (cred.Uid == uint32(os.Geteuid()) || cred.Uid == 0)
}

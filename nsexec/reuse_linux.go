package nsexec

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"syscall"
	"time"
)

// WithReuse prepares a sandbox (Prepare only) that serves one dispatch
// after another (Pending.ExecWork), each on a reset sandbox: every process
// of the last one killed and reaped, fresh mount, ipc and network
// namespaces for each tool with a fresh /tmp, /dev/shm, /dev/mqueue, policy
// tmpfs and workdir, and pid 1's rlimits, oom_score_adj, nice value and
// scheduling policy as they were before the first (reuse_init_linux.go).
// A dispatch that ends by a signal, or had one forwarded to it, and a
// failed reset discard the sandbox (Pending.Reset says which). The Go init
// stays pid 1 to serve (never the C tail) and keeps its capabilities in
// the sandbox's user namespace between dispatches, unfiltered; only each
// tool's thread drops and is filtered, and the init stays non-dumpable.
//
// Refused (a *ConfigError naming WithReuse) with WithHandover, WithJoin,
// egress, a copy-up tmpfs, sysctls (written once, in the first network
// and ipc namespaces) and NoProc (the reset counts on the sandbox's own
// procfs).
func WithReuse() Option { return func(o *options) { o.reuse = true } }

// ErrDiscarded is Pending.Reset's answer for a sandbox that will serve no
// other dispatch.
var ErrDiscarded = errors.New("nsexec: the reused sandbox was discarded")

// checkReuse refuses what a reused sandbox cannot reset.
func checkReuse(c *Config, o *options) error {
	bad := func(reason string) error {
		return &ConfigError{Field: "WithReuse", Value: "", Reason: reason}
	}
	switch {
	case o.handover:
		return bad("a sandbox handed over is served by another process")
	case len(o.joins) > 0:
		return bad("a joined namespace is not the sandbox's to reset")
	}
	return CheckReuse(c)
}

// CheckReuse refuses a Config whose sandbox WithReuse cannot reset (with
// a *ConfigError naming WithReuse): egress, NoProc, sysctls, a copy-up
// tmpfs.
func CheckReuse(c *Config) error {
	bad := func(reason string) error {
		return &ConfigError{Field: "WithReuse", Value: "", Reason: reason}
	}
	switch {
	case c.Egress != nil:
		return bad("the egress forwarder's connections would span dispatches")
	case c.NoProc:
		return bad("the no-proc mode has no procfs of the sandbox's own for the reset")
	case c.NoUserNS:
		return bad("the no-userns mode has no namespace to renew: a dispatch's processes, IPC and files would live on in the host's")
	case len(c.Sysctl) > 0:
		return bad("sysctls are written in the first dispatch's namespaces only")
	}
	for i := range c.Mounts {
		for _, opt := range c.Mounts[i].Options {
			if opt == "tmpcopyup" {
				return bad(fmt.Sprintf("mounts[%d]: a copy-up tmpfs is not made fresh for each dispatch", i))
			}
		}
	}
	return nil
}

// reuser is a reused Pending's launcher state.
type reuser struct {
	mu sync.Mutex
	// verdict is closed when the last dispatch's reset is known; err is
	// then nil (ready again) or ErrDiscarded.
	verdict chan struct{}
	err     error
	served  int
}

func newReuser() *reuser {
	r := &reuser{verdict: make(chan struct{})}
	close(r.verdict) // the first dispatch: the sandbox said msgReady
	return r
}

// Reset waits for the reset after the last dispatch (or ctx) and returns
// nil when the sandbox serves another, else ErrDiscarded (its init is gone
// or going). Only for a Pending prepared WithReuse.
func (s *Pending) Reset(ctx context.Context) error {
	if s.reuse == nil {
		return errors.New("nsexec: Reset of a sandbox not prepared WithReuse")
	}
	s.reuse.mu.Lock()
	v := s.reuse.verdict
	s.reuse.mu.Unlock()
	select {
	case <-v:
	case <-ctx.Done():
		return ctx.Err()
	}
	s.reuse.mu.Lock()
	defer s.reuse.mu.Unlock()
	return s.reuse.err
}

// Served is how many dispatches a reused sandbox has started.
func (s *Pending) Served() int {
	if s.reuse == nil {
		return 0
	}
	s.reuse.mu.Lock()
	defer s.reuse.mu.Unlock()
	return s.reuse.served
}

// ExecWork is Exec for a sandbox prepared WithReuse, which it may serve
// again once its Process was waited for and Reset said so: work names a
// fresh empty directory in the prepared Workdir that is bound at /work for
// this tool alone (empty: a fresh tmpfs there).
func (s *Pending) ExecWork(ctx context.Context, work string, args, env []string, stdio Stdio) (*Process, error) {
	if s.reuse == nil {
		return nil, errors.New("nsexec: ExecWork of a sandbox not prepared WithReuse")
	}
	if err := s.Reset(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	used := s.used
	s.mu.Unlock()
	if used {
		return nil, ErrUsed
	}
	r := s.reuse
	r.mu.Lock()
	r.verdict = make(chan struct{})
	r.served++
	r.mu.Unlock()
	p, err := s.execReused(ctx, work, args, env, stdio)
	if err != nil {
		s.discard()
		return nil, err
	}
	return p, nil
}

// discard ends a reused sandbox whose dispatch failed to start.
func (s *Pending) discard() {
	s.mu.Lock()
	s.used = true
	s.mu.Unlock()
	s.kill()
	s.settle(ErrDiscarded)
}

// settle records the verdict of the last dispatch.
func (s *Pending) settle(err error) {
	r := s.reuse
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case <-r.verdict:
	default:
		r.err = err
		close(r.verdict)
	}
}

func (s *Pending) execReused(ctx context.Context, work string, args, env []string, stdio Stdio) (*Process, error) {
	if len(args) == 0 || args[0] == "" {
		return nil, errors.New("nsexec request: args must name the tool")
	}
	frame, err := encodeRequest(&request{Args: args, Env: env})
	if err != nil {
		return nil, err
	}
	frame = binary.BigEndian.AppendUint32(frame, uint32(len(work)))
	frame = append(frame, work...)
	files, closeStdio, err := stdioFiles(stdio)
	if err != nil {
		return nil, err
	}
	err = s.send(ctx, frame, files)
	closeStdio()
	if err != nil {
		return nil, err
	}
	h := handshake{sync: s.sync, o: &options{timeout: s.timeout}}
	stop := context.AfterFunc(ctx, func() { s.sync.SetDeadline(time.Unix(1, 0)) })
	s.sync.SetDeadline(time.Now().Add(s.timeout))
	err = s.proc.awaitExec(ctx, &h)
	stop()
	s.sync.SetDeadline(time.Time{})
	if err != nil {
		return nil, err
	}
	d := &Process{proc: s.proc.proc, done: make(chan struct{}), hostID: s.proc.hostID, uids: s.proc.uids, gids: s.proc.gids,
		pidfd: -1, disp: &dispatched{}}
	go s.follow(d)
	return d, nil
}

// dispatched is a reused sandbox's one dispatch: its tool's status.
type dispatched struct {
	ws syscall.WaitStatus
}

// follow reads the dispatch's end (msgExit and the status) and then the
// reset's verdict (msgReady, or the EOF of an init that discards itself).
// An init that dies first (killed from outside) gives its own status.
func (s *Pending) follow(d *Process) {
	var b [5]byte
	if _, err := io.ReadFull(s.sync, b[:]); err != nil || b[0] != msgExit {
		<-s.proc.Done()
		if s.proc.err == nil {
			d.disp.ws = s.proc.state.Sys().(syscall.WaitStatus)
		} else {
			d.err = s.proc.err
		}
		close(d.done)
		s.settle(ErrDiscarded)
		return
	}
	d.disp.ws = syscall.WaitStatus(binary.BigEndian.Uint32(b[1:]))
	close(d.done)
	var r [1]byte
	if _, err := io.ReadFull(s.sync, r[:]); err != nil || r[0] != msgReady {
		s.kill()
		s.settle(ErrDiscarded)
		return
	}
	s.settle(nil)
}

// waitDispatch is Process.Wait of one dispatch of a reused sandbox.
func (p *Process) waitDispatch() (Exit, error) {
	<-p.done
	if p.err != nil {
		return Exit{}, fmt.Errorf("wait for sandbox pid %d: %w", p.proc.Pid, p.err)
	}
	ws := p.disp.ws
	e := Exit{Code: ws.ExitStatus()}
	if ws.Signaled() {
		e.Code, e.Signal = -1, ws.Signal()
	}
	return e, nil
}

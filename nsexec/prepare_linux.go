package nsexec

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Pending is a sandbox set up to the point of its exec: namespaces, mount
// tree, identity, hygiene, its cgroup placement, all done; it waits for the
// argv, environment and stdio of exactly one tool (Exec). A warm pool holds
// these so the setup leaves a dispatch's critical path.
type Pending struct {
	proc    *Process
	sync    *os.File
	timeout time.Duration
	// pidfd is the init's pidfd when it was prepared WithHandover (Detach
	// hands it over), else nil.
	pidfd *os.File
	// reuse is the state of a sandbox prepared WithReuse, else nil.
	reuse *reuser

	mu   sync.Mutex
	used bool
}

// Prepare spawns a sandbox for cfg and returns once it waits for its
// request. cfg.Args and cfg.Env are ignored: they come with Exec. The
// sandbox's stdio is /dev/null until then. Options are those of Start
// (WithTrace is ignored).
func Prepare(ctx context.Context, cfg *Config, opts ...Option) (*Pending, error) {
	if _, marked := os.LookupEnv(initFDEnv); marked && !initCalled.Load() {
		return nil, ErrNested
	}
	o := newOptions(opts)
	c, err := normalize(cfg, true)
	if err != nil {
		return nil, err
	}
	c.Args, c.Env = nil, nil
	if o.reuse {
		if err := checkReuse(c, &o); err != nil {
			return nil, err
		}
		o.noTail = true // the Go init serves every dispatch (reuse_linux.go)
	}
	if o.check != nil {
		if o.check.name == "" {
			return nil, &ConfigError{Field: "WithToolCheck", Value: "", Reason: "names no tool"}
		}
		c.Args, c.Env = []string{o.check.name}, o.check.env
	}
	if o.handover && c.Workdir != "" {
		// A lent workdir is given back when its sandbox is reaped, which
		// a launcher that hands the sandbox over does not see.
		return nil, &ConfigError{Field: "workdir", Value: c.Workdir, Reason: "a sandbox prepared WithHandover cannot be lent a workdir; bind it as a mount instead"}
	}
	p, sync, err := spawn(ctx, c, Stdio{}, &o, true)
	if err != nil {
		return nil, err
	}
	o.logger.Debug("sandbox prepared", "pid", p.Pid())
	s := &Pending{proc: p, sync: sync, timeout: o.timeout}
	if o.reuse {
		s.reuse = newReuser()
	}
	if p.pidfd >= 0 {
		s.pidfd = os.NewFile(uintptr(p.pidfd), "sandbox-pidfd")
		p.pidfd = -1
	}
	return s, nil
}

// HostIdentity returns the host ids of the waiting sandbox (Process.HostIdentity).
func (s *Pending) HostIdentity() Identity { return s.proc.HostIdentity() }

// IDMaps returns the waiting sandbox's maps (Process.IDMaps).
func (s *Pending) IDMaps() (uids, gids []IDMap) { return s.proc.IDMaps() }

// ShareLease returns a copy of the waiting sandbox's lease descriptor
// (Process.ShareLease).
func (s *Pending) ShareLease() (*os.File, error) { return s.proc.ShareLease() }

// Pid returns the host pid of the waiting sandbox init.
func (s *Pending) Pid() int { return s.proc.Pid() }

// Done is closed if the waiting sandbox died (killed from outside, or its
// parent thread went away); such a sandbox can no longer be used.
func (s *Pending) Done() <-chan struct{} { return s.proc.Done() }

// ErrUsed is returned by Exec on a Pending that was already used or closed.
var ErrUsed = errors.New("nsexec: this prepared sandbox was already used or closed")

// Exec hands the waiting sandbox its tool: args (args[0] a path inside the
// sandbox, or a bare name looked up in env's PATH there), its complete
// environment and its stdio, and returns once the tool was exec'd, as Start
// does. A Pending serves exactly one Exec; on error the sandbox is gone.
// The prepared init stays pid 1 and starts the tool as its only child.
func (s *Pending) Exec(ctx context.Context, args, env []string, stdio Stdio) (*Process, error) {
	if s.reuse != nil {
		return s.ExecWork(ctx, "", args, env, stdio)
	}
	s.mu.Lock()
	used := s.used
	s.used = true
	s.mu.Unlock()
	if used {
		return nil, ErrUsed
	}
	if len(args) == 0 || args[0] == "" {
		s.kill()
		return nil, errors.New("nsexec request: args must name the tool")
	}
	frame, err := encodeRequest(&request{Args: args, Env: env})
	if err != nil {
		s.kill()
		return nil, err
	}
	files, closeStdio, err := stdioFiles(stdio)
	if err != nil {
		s.kill()
		return nil, err
	}
	err = s.send(ctx, frame, files)
	closeStdio()
	if err == nil {
		h := handshake{sync: s.sync, o: &options{timeout: s.timeout}}
		stop := context.AfterFunc(ctx, func() { s.sync.SetDeadline(time.Unix(1, 0)) })
		s.sync.SetDeadline(time.Now().Add(s.timeout))
		err = s.proc.awaitExec(ctx, &h)
		stop()
		s.sync.SetDeadline(time.Time{})
	}
	s.closePidFD()
	if err != nil {
		s.sync.Close()
		s.proc.abort()
		return nil, err
	}
	s.proc.attach(s.sync)
	return s.proc, nil
}

// closePidFD drops the pidfd of a sandbox that is not handed over.
func (s *Pending) closePidFD() {
	if s.pidfd != nil {
		s.pidfd.Close()
		s.pidfd = nil
	}
}

// send writes the request frame with the three stdio descriptors attached
// to its first bytes (SCM_RIGHTS), then the rest of the frame if the first
// sendmsg took only part of it.
func (s *Pending) send(ctx context.Context, frame []byte, files []*os.File) error {
	if err := sendRights(s.sync, frame, files, s.timeout); err != nil {
		return s.proc.wireErr(ctx, err, errors.New("nsexec: the prepared sandbox went away before its request"))
	}
	return nil
}

// sendRights writes frame on the sync socket with the descriptors of files
// attached to its first bytes (SCM_RIGHTS), then the rest of the frame if
// the first sendmsg took only part of it, within timeout.
func sendRights(sync *os.File, frame []byte, files []*os.File, timeout time.Duration) error {
	fds := make([]int, len(files))
	for i, f := range files {
		fds[i] = int(f.Fd())
	}
	conn, err := sync.SyscallConn()
	if err != nil {
		return fmt.Errorf("nsexec: sandbox sync socket: %w", err)
	}
	sync.SetWriteDeadline(time.Now().Add(timeout))
	defer sync.SetWriteDeadline(time.Time{})
	var n int
	var serr error
	werr := conn.Write(func(fd uintptr) bool {
		n, serr = unix.SendmsgN(int(fd), frame, unix.UnixRights(fds...), nil, unix.MSG_NOSIGNAL)
		return serr != unix.EAGAIN
	})
	runtime.KeepAlive(files) // the descriptors stay open until sendmsg returned
	if werr == nil {
		werr = serr
	}
	if werr == nil && n < len(frame) {
		_, werr = sync.Write(frame[n:])
	}
	return werr
}

// Close ends a sandbox that was not used: it closes the sync socket (the
// waiting init exits) and kills and reaps it. It is a no-op after Exec.
func (s *Pending) Close() error {
	s.mu.Lock()
	used := s.used
	s.used = true
	s.mu.Unlock()
	if !used {
		s.kill()
	}
	return nil
}

func (s *Pending) kill() {
	s.closePidFD()
	s.sync.Close()
	s.proc.abort()
}

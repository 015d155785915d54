package nsexec

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ErrNotHandedOver is Detach's answer for a sandbox not prepared
// WithHandover: its init dies with this process (a parent-death signal).
var ErrNotHandedOver = errors.New("nsexec: only a sandbox prepared WithHandover can be detached")

// Detach hands the waiting sandbox over (Handover) instead of running it
// here: the Pending serves nothing more. proc is the init as this process's
// child, for a caller that stays its parent (moat-runtime run): its Wait
// reaps it and returns the init's own status (the tool's, 128+N when signal
// N killed it; the tool's report travels on the sync socket, which is the
// adopter's now). A caller that exits instead leaves the init to its
// subreaper. The caller closes its copies of the handover's descriptors
// (Handover.Close) once the adopter has its own: the sandbox lives as long
// as any copy of Sync.
func (s *Pending) Detach() (h *Handover, proc *Process, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.used {
		return nil, nil, ErrUsed
	}
	if s.pidfd == nil {
		return nil, nil, ErrNotHandedOver
	}
	h = &Handover{Pid: s.proc.Pid(), HostID: s.proc.HostIdentity(), Sync: s.sync, PidFD: s.pidfd}
	if l := s.proc.lease; l != nil && l.fd >= 0 {
		fd, err := unix.FcntlInt(uintptr(l.fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return nil, nil, fmt.Errorf("nsexec: detach: the host id's lock: %w", err)
		}
		h.Lease = os.NewFile(uintptr(fd), "sandbox-hostid")
	}
	s.used, s.pidfd = true, nil
	return h, s.proc, nil
}

// Adopted is a prepared sandbox this process holds but did not spawn
// (Adopt): it starts the tool (Start) and more processes beside it (Exec),
// signals the init through its pidfd, and learns how the tool ended from
// the init's report on the sync socket, since only the init's parent (an
// engine's subreaper) can reap it. Its methods are safe for concurrent use.
type Adopted struct {
	pid     int
	hostID  Identity
	sync    *os.File
	pidfd   *os.File
	lease   *os.File
	timeout time.Duration
	log     *slog.Logger

	wmu sync.Mutex // one message at a time on the sync socket

	mu          sync.Mutex
	started     bool       // Start was called
	toolStarted bool       // the init said the tool runs
	startCh     chan error // the answer to the tool's request
	execs       map[uint32]*Exec
	nextID      uint32
	tool        *syscall.WaitStatus // reported by the init
	failed      bool                // the init reported that its tool did not start
	done        chan struct{}       // the sandbox is gone
	readErr     error               // why the reading stopped, if not an EOF
}

// Adopt takes a sandbox handed over by another process (Detach there). The
// handover's numbers are checked against its files: Sync must be a unix
// stream socket, PidFD a pidfd of process Pid. The Adopted owns the files
// from here on, also on error. Options: WithHandshakeTimeout bounds Start's
// and Exec's waits for the init's answer, WithLogger.
func Adopt(h *Handover, opts ...Option) (*Adopted, error) {
	o := newOptions(opts)
	if err := checkHandover(h); err != nil {
		h.Close()
		return nil, err
	}
	// A non-blocking copy, which os.NewFile registers with the poller: the
	// reader's pending read then ends at Close, and deadlines work.
	var dup int
	var derr error
	control(h.Sync, func(fd int) {
		if dup, derr = unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0); derr == nil {
			if derr = unix.SetNonblock(dup, true); derr != nil {
				unix.Close(dup)
			}
		}
	})
	h.Sync.Close()
	if derr != nil {
		h.Close()
		return nil, fmt.Errorf("nsexec: adopt: the sync socket: %w", derr)
	}
	a := &Adopted{pid: h.Pid, hostID: h.HostID, sync: os.NewFile(uintptr(dup), "sandbox-sync"), pidfd: h.PidFD, lease: h.Lease,
		timeout: o.timeout, log: o.logger, startCh: make(chan error, 1), execs: map[uint32]*Exec{}, done: make(chan struct{})}
	go a.read()
	return a, nil
}

// checkHandover refuses files that are not what the handover says.
func checkHandover(h *Handover) error {
	if h == nil || h.Sync == nil || h.PidFD == nil || h.Pid <= 0 {
		return errors.New("nsexec: adopt: the handover lacks its pid, sync socket or pidfd")
	}
	var typ, domain int
	var serr error
	if err := control(h.Sync, func(fd int) {
		if typ, serr = unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE); serr == nil {
			domain, serr = unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN)
		}
	}); err != nil || serr != nil || typ != unix.SOCK_STREAM || domain != unix.AF_UNIX {
		return fmt.Errorf("nsexec: adopt: the sync socket is not a unix stream socket (%v %v)", err, serr)
	}
	var pid int
	var perr error
	if err := control(h.PidFD, func(fd int) { pid, perr = pidfdPid(fd) }); err != nil || perr != nil || pid != h.Pid {
		return fmt.Errorf("nsexec: adopt: the pidfd is not one of pid %d (%v %v, pid %d)", h.Pid, err, perr, pid)
	}
	return nil
}

// control runs fn with f's descriptor, without switching f to blocking
// mode as Fd would.
func control(f *os.File, fn func(fd int)) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	return rc.Control(func(fd uintptr) { fn(int(fd)) })
}

// pidfdPid reads the pid a pidfd refers to from its fdinfo (proc(5),
// "Pid:"; -1 once the process was reaped).
func pidfdPid(fd int) (int, error) {
	b, err := os.ReadFile("/proc/self/fdinfo/" + strconv.Itoa(fd))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Pid:"); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, errors.New("no Pid: line: not a pidfd")
}

// Pid is the init's host pid.
func (a *Adopted) Pid() int { return a.pid }

// HostIdentity is the host uid and gid the sandbox's ids map to.
func (a *Adopted) HostIdentity() Identity { return a.hostID }

// Done is closed once the sandbox is gone: the init's end of the sync
// socket closed and the init has exited (its pid namespace is empty then),
// or this side closed it.
func (a *Adopted) Done() <-chan struct{} { return a.done }

// ErrNoLease is ShareLease's answer for a sandbox whose ids moat did not
// allocate (WithIDMaps, WithIdentity, rootless): there is no range to share.
var ErrNoLease = errors.New("nsexec: the sandbox holds no host id lease")

// ShareLease returns a copy of the adopted sandbox's lease descriptor, as
// Process.ShareLease does, for a container that joins it (WithSharedRange):
// ErrNoLease when it holds none, ErrSandboxGone once it has ended (its
// range may be another sandbox's by then). Close it when done.
func (a *Adopted) ShareLease() (*os.File, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	select {
	case <-a.done:
		return nil, ErrSandboxGone
	default:
	}
	if a.tool != nil || a.failed {
		return nil, ErrSandboxGone
	}
	if a.lease == nil {
		return nil, ErrNoLease
	}
	fd, err := unix.FcntlInt(a.lease.Fd(), unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		return nil, fmt.Errorf("nsexec: share the host id lease: %w", err)
	}
	return os.NewFile(uintptr(fd), "moat-host-id-lease"), nil
}

// ErrSandboxGone is the answer of Start, Exec and Signal on a sandbox whose
// init has exited.
var ErrSandboxGone = errors.New("nsexec: the sandbox has ended")

// Start hands the waiting sandbox its tool, as Pending.Exec does, and
// returns once the tool was exec'd (or with the init's *SetupError; the
// sandbox is then gone).
func (a *Adopted) Start(ctx context.Context, args, env []string, stdio Stdio) error {
	a.mu.Lock()
	if a.started {
		a.mu.Unlock()
		return ErrUsed
	}
	a.started = true
	a.mu.Unlock()
	if len(args) == 0 || args[0] == "" {
		return errors.New("nsexec request: args must name the tool")
	}
	frame, err := encodeRequest(&request{Args: args, Env: env})
	if err != nil {
		return err
	}
	if err := a.sendFiles(frame, stdio); err != nil {
		return err
	}
	return a.await(ctx, a.startCh)
}

// await waits for the init's answer on ch, within the handshake timeout.
func (a *Adopted) await(ctx context.Context, ch <-chan error) error {
	t := time.NewTimer(a.timeout)
	defer t.Stop()
	select {
	case err := <-ch:
		return err
	case <-a.done:
		select {
		case err := <-ch:
			return err
		default:
		}
		return ErrSandboxGone
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return fmt.Errorf("nsexec: the sandbox init did not answer within %v", a.timeout)
	}
}

// sendFiles sends frame with the three stdio descriptors (CheckStdio
// passes on each; nil ones are /dev/null).
func (a *Adopted) sendFiles(frame []byte, stdio Stdio) error {
	files, closeStdio, err := stdioFiles(stdio)
	if err != nil {
		return err
	}
	defer closeStdio()
	a.wmu.Lock()
	defer a.wmu.Unlock()
	if err := sendRights(a.sync, frame, files, a.timeout); err != nil {
		return a.gone(err)
	}
	return nil
}

// send writes one message without descriptors.
func (a *Adopted) send(b []byte) error {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	a.sync.SetWriteDeadline(time.Now().Add(a.timeout))
	_, err := a.sync.Write(b)
	a.sync.SetWriteDeadline(time.Time{})
	if err != nil {
		return a.gone(err)
	}
	return nil
}

// gone is ErrSandboxGone for a write that failed because the init went
// away, else the error.
func (a *Adopted) gone(err error) error {
	select {
	case <-a.done:
		return ErrSandboxGone
	default:
	}
	if errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) {
		return ErrSandboxGone
	}
	return fmt.Errorf("nsexec: sandbox sync socket: %w", err)
}

// Signal sends sig to the init through its pidfd: a catchable signal goes
// on to the tool, SIGKILL ends the sandbox (before the start too).
func (a *Adopted) Signal(sig syscall.Signal) error {
	select {
	case <-a.done:
		return ErrSandboxGone
	default:
	}
	var err error
	if cerr := control(a.pidfd, func(fd int) { err = unix.PidfdSendSignal(fd, sig, nil, 0) }); cerr != nil {
		return cerr
	}
	if err == unix.ESRCH {
		return ErrSandboxGone
	}
	return err
}

// Wait waits for the sandbox to end and returns how the tool ended, as the
// init reported it; a tool that could not be started is the init's exit
// status 125, and a sandbox whose init did not report (killed, or ended
// before its start) is reported as killed by SIGKILL, the one signal that
// ends an init without a report.
func (a *Adopted) Wait() Exit {
	<-a.done
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.tool != nil:
		return exitOf(*a.tool)
	case a.failed:
		return Exit{Code: exitSetup}
	}
	return Exit{Code: -1, Signal: unix.SIGKILL}
}

func exitOf(ws syscall.WaitStatus) Exit {
	if ws.Signaled() {
		return Exit{Code: -1, Signal: ws.Signal()}
	}
	return Exit{Code: ws.ExitStatus()}
}

// Close ends the sandbox if it still runs (its init exits at the sync
// socket's EOF) and waits until it is gone, then frees the host id.
func (a *Adopted) Close() error {
	a.sync.Close()
	<-a.done
	return nil
}

// read parses the init's messages until its end of the sync socket closes,
// then waits for the init's exit (its pidfd), frees the host id and marks
// the sandbox gone. A message this build does not know ends the sandbox:
// nothing after it could be framed.
func (a *Adopted) read() {
	br := bufio.NewReader(a.sync)
	full := func(b []byte) error { _, err := io.ReadFull(br, b); return err }
	report := func() ([]byte, error) {
		b, err := io.ReadAll(io.LimitReader(br, 64<<10))
		if errors.Is(err, syscall.ECONNRESET) && len(b) > 0 {
			err = nil
		}
		return b, err
	}
	var err error
	for {
		var m initMsg
		if m, err = readInitMsg(br, full, report); err != nil {
			break
		}
		if !a.dispatch(m) {
			err = &WireError{Field: "(init message)", Reason: fmt.Sprintf("%q out of turn", m.typ), Errno: unix.EPROTO}
			break
		}
	}
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, os.ErrClosed) {
		a.log.Warn("sandbox init", "pid", a.pid, "err", err)
		a.mu.Lock()
		a.readErr = err
		a.mu.Unlock()
	}
	a.sync.Close() // ends a sandbox that broke the protocol
	a.waitExit()
	a.mu.Lock()
	if a.lease != nil {
		a.lease.Close()
		a.lease = nil
	}
	execs := a.execs
	a.execs = nil
	a.mu.Unlock()
	close(a.done)
	for _, e := range execs {
		// The kernel killed it with the pid namespace, unreported.
		e.end(nil, &Exit{Code: -1, Signal: unix.SIGKILL})
	}
}

// waitExit waits (a bounded while) for the init to have exited, which is
// when its pid namespace is empty: its exit waits for every other process
// of the namespace to be reaped (kernel/pid_namespace.c
// zap_pid_ns_processes) before it notifies its pidfd. The sync socket's EOF
// comes earlier, when the init's files close (do_exit, exit_files).
func (a *Adopted) waitExit() {
	deadline := time.Now().Add(10 * time.Second)
	control(a.pidfd, func(fd int) {
		for time.Now().Before(deadline) {
			pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			n, err := unix.Poll(pfd, 100)
			if err == unix.EINTR {
				continue
			}
			if err != nil || (n > 0 && pfd[0].Revents != 0) {
				return
			}
		}
		a.log.Warn("the sandbox init did not exit within 10 s of its sync socket's end", "pid", a.pid)
	})
}

// dispatch hands one message to whoever waits for it; false for a message
// out of turn.
func (a *Adopted) dispatch(m initMsg) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch m.typ {
	case msgStarted, msgError:
		if !a.started || a.tool != nil {
			return false
		}
		if a.toolStarted {
			return false // a second answer
		}
		var err error
		if m.typ == msgError {
			err = decodeReport(m.rest)
			a.failed = true
		} else {
			a.toolStarted = true
		}
		select {
		case a.startCh <- err:
		default:
			return false
		}
	case msgExit:
		if !a.toolStarted || a.tool != nil {
			return false
		}
		ws := syscall.WaitStatus(m.v)
		a.tool = &ws
	case msgExecStarted, msgExecFailed, msgExecExit:
		e := a.execs[m.id]
		if e == nil {
			return false // an exec never asked for, or already ended
		}
		switch m.typ {
		case msgExecStarted:
			if e.pid != 0 || m.v == 0 || m.v > 1<<22 {
				return false // a second start, or no pid a pid namespace gives (PID_MAX_LIMIT)
			}
			e.start(int(m.v), nil)
		case msgExecFailed:
			if e.pid != 0 {
				return false
			}
			delete(a.execs, m.id)
			errno := unix.Errno(m.v)
			if errno == 0 {
				errno = unix.EPROTO
			}
			e.start(0, errno)
			e.end(nil, &Exit{Code: -1})
		case msgExecExit:
			if e.pid == 0 {
				return false // an end before its start
			}
			delete(a.execs, m.id)
			x := exitOf(syscall.WaitStatus(m.v))
			e.end(nil, &x)
		}
	}
	return true
}

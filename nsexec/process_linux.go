package nsexec

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Process is a running sandbox. Its pid is the init's, pid 1 of the
// sandbox's pid namespace, whose only child is the tool: the init forwards
// signals to the tool, reaps, and exits when the tool has, reporting the
// tool's status over the sync socket; when the init exits, the kernel kills
// everything else in the sandbox. In mode no-userns there is no pid
// namespace: the init is a plain child, the subreaper of the tool's
// processes, which it ends itself (nouserns_linux.go says how).
type Process struct {
	proc  *os.Process
	done  chan struct{}
	state *os.ProcessState
	err   error

	after func() // runs once the child was reaped (or never started)
	// joins are the namespaces the child is born in (WithJoin).
	joins *joins
	// idMounts are attached where the child is born (idmount_linux.go).
	idMounts *idMounts
	hostID   Identity
	uids     []IDMap // the sandbox's user namespace maps
	gids     []IDMap
	lease    *idLease // the host id's lock, when it came from the range
	// pidfd is the child's pidfd from its clone (WithHandover), or -1;
	// Prepare moves it to the Pending.
	pidfd int

	// sync is the launcher's end of the sync socket, held while the sandbox
	// runs (the init ends the sandbox at its EOF) and read for the tool's
	// status once the init is gone.
	sync     *os.File
	toolOnce sync.Once
	toolWS   syscall.WaitStatus
	toolOK   bool

	// groupKill: a SIGKILL goes to the init's process group, which holds
	// every process of a no-userns sandbox (nouserns_linux.go).
	groupKill bool
	// disp is one dispatch of a reused sandbox (reuse_linux.go), else nil.
	disp *dispatched

	mu       sync.Mutex
	holds    []int // namespace descriptors kept until the tool was reaped
	released bool
}

// heldNamespaces are the namespaces the parent keeps a descriptor of while
// the sandbox runs. When pid 1 exits while it holds the last reference to
// its mount namespace, the exit itself tears the mount tree down and waits
// for an RCU grace period (fs/namespace.c put_mnt_ns, namespace_unlock)
// before the parent's wait returns. With a reference held here the exit
// only drops one; the teardown runs when release closes it, after the exit
// status was delivered, off the dispatch's critical path (peers.md 2c.14).
var heldNamespaces = []string{"mnt"}

// holdNamespaces opens the sandbox's namespaces by pid while the child
// waits in its handshake (so the pid is its own). Failing is harmless: the
// teardown then stays on the exit path.
func (p *Process) holdNamespaces() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.released {
		return
	}
	prefix := "/proc/" + strconv.Itoa(p.proc.Pid) + "/ns/"
	for _, ns := range heldNamespaces {
		if fd, err := unix.Open(prefix+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
			p.holds = append(p.holds, fd)
		}
	}
}

// release drops the namespace references, which may block for the
// teardown; it runs after Wait's callers were let go.
func (p *Process) release() {
	p.mu.Lock()
	holds := p.holds
	p.holds, p.released = nil, true
	p.mu.Unlock()
	for _, fd := range holds {
		unix.Close(fd)
	}
}

// own spawns the child from a locked OS thread and keeps that thread until
// the child is reaped: the child's parent-death signal is tied to the
// spawning thread, not the process (golang/go#27505; moby PR #44215). The
// goroutine never unlocks, so the runtime discards the thread afterwards.
func (p *Process) own(path string, attr *os.ProcAttr, started chan<- error) {
	runtime.LockOSThread()
	var proc *os.Process
	err := p.joins.enter()
	if err == nil {
		var leave func() error
		if leave, err = p.idMounts.enter(); err == nil {
			proc, err = os.StartProcess(path, []string{InitArgv0}, attr)
			_ = leave() // idMounts.enter says why a failure is harmless
		}
	}
	if err != nil {
		if p.after != nil {
			p.after()
		}
		started <- err
		return
	}
	p.proc = proc
	started <- nil
	p.state, p.err = proc.Wait()
	if p.after != nil {
		p.after()
	}
	// Reaped: the kernel killed and reaped the whole pid namespace before
	// its init could be, so nothing runs as the host id any more (and the
	// lent workdir was given back above, before another sandbox may get
	// this id).
	p.lease.release()
	close(p.done)
	p.release()
}

// attach hands the process the sync socket of a started sandbox.
func (p *Process) attach(sync *os.File) { p.sync = sync }

// toolStatus reads the tool's wait status that the init sent before it
// exited, once, and closes the sync socket. An init that did not send one
// (killed from outside, or its launcher gone) has none: the init's own
// status stands.
func (p *Process) toolStatus() (syscall.WaitStatus, bool) {
	p.toolOnce.Do(func() {
		if p.sync == nil {
			return
		}
		defer p.sync.Close()
		// The init has exited, so its end is closed: the read returns what
		// it sent, then EOF. The deadline only guards against a descriptor
		// that leaked to another process.
		p.sync.SetReadDeadline(time.Now().Add(time.Second))
		b, err := io.ReadAll(io.LimitReader(p.sync, 64))
		if err != nil && len(b) == 0 {
			return
		}
		if len(b) == 5 && b[0] == msgExit {
			p.toolWS, p.toolOK = syscall.WaitStatus(binary.BigEndian.Uint32(b[1:])), true
		}
	})
	return p.toolWS, p.toolOK
}

// abort kills a child that failed its setup and reaps it.
func (p *Process) abort() {
	_ = p.proc.Kill()
	<-p.done
}

// HostIdentity returns the host uid and gid the sandbox's ids map to: the
// caller's own rootless; as root the WithIdentity one, or the sandbox's own
// from the host id range, held until it was reaped.
func (p *Process) HostIdentity() Identity { return p.hostID }

// IDMaps returns the sandbox's uid and gid maps: the one id of
// HostIdentity, or its range (WithHostRange), or the given maps
// (WithIDMaps).
func (p *Process) IDMaps() (uids, gids []IDMap) { return p.uids, p.gids }

// ShareLease returns a copy of the descriptor of the lock that holds the
// sandbox's host id or range (as root, when moat allocated it): the lock
// stays held while that copy is open, after the sandbox ended too, so a
// container that joins this sandbox's user namespace keeps the range from
// being handed to another sandbox while it runs (hostid_linux.go). Close
// it when done.
func (p *Process) ShareLease() (*os.File, error) { return p.lease.share() }

// Pid returns the host pid of the sandbox's pid 1.
func (p *Process) Pid() int { return p.proc.Pid }

// Signal sends sig to the sandbox's pid 1, through a pidfd where the kernel
// has them (os.Process uses one since Go 1.23), so a recycled pid is never
// hit. The init forwards every catchable signal to the tool, which gets it
// as any process would; SIGKILL ends the init and with it the whole
// sandbox.
//
// In mode no-userns, where no pid namespace ends the rest with the init,
// a SIGKILL goes to the init's process group (its pid: the init is a
// session leader), which the tool and all it starts cannot leave (the
// rung's filter refuses setsid and setpgid): all of them end at once.
// The group's id is not reused while the init is unreaped, which Done
// says it still is.
func (p *Process) Signal(sig os.Signal) error {
	if p.groupKill && sig == syscall.SIGKILL {
		select {
		case <-p.done:
			return os.ErrProcessDone
		default:
		}
		if err := unix.Kill(-p.proc.Pid, unix.SIGKILL); err != nil {
			return fmt.Errorf("kill sandbox group %d: %w", p.proc.Pid, err)
		}
		return nil
	}
	return p.proc.Signal(sig)
}

// Done is closed once the tool has exited and was reaped.
func (p *Process) Done() <-chan struct{} { return p.done }

// Wait waits for the sandbox to end and returns how the tool ended: its
// status as the init reported it, else (the init was killed) the init's. It
// may be called more than once and from several goroutines.
func (p *Process) Wait() (Exit, error) {
	if p.disp != nil {
		return p.waitDispatch()
	}
	<-p.done
	if p.err != nil {
		return Exit{}, fmt.Errorf("wait for sandbox pid %d: %w", p.proc.Pid, p.err)
	}
	ws := p.state.Sys().(syscall.WaitStatus)
	if tws, ok := p.toolStatus(); ok {
		ws = tws
	}
	e := Exit{Code: ws.ExitStatus()}
	if ws.Signaled() {
		e.Code, e.Signal = -1, ws.Signal()
	}
	if ru, ok := p.state.SysUsage().(*syscall.Rusage); ok && ru != nil {
		e.UserTime = time.Duration(ru.Utime.Nano())
		e.SystemTime = time.Duration(ru.Stime.Nano())
		e.MaxRSS = int64(ru.Maxrss) << 10 // kilobytes on Linux, getrusage(2)
	}
	return e, nil
}

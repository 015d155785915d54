package nsexec

import (
	"context"
	"errors"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// ErrNotRunning is Exec's answer before the tool runs: the init forks
// processes on request only once it supervises the tool.
var ErrNotRunning = errors.New("nsexec: the sandbox's tool is not running")

// Exec is a process started in a running sandbox beside its tool
// (Adopted.Exec). The init is its parent; it reports its end.
type Exec struct {
	a  *Adopted
	id uint32

	startCh chan error
	pid     int

	once sync.Once
	done chan struct{}
	exit Exit

	abandoned bool // under a.mu: its start was given up; kill it if it comes
}

// Exec starts spec's process in the running sandbox with stdio as its
// descriptors 0, 1 and 2 (CheckStdio passes on each; nil ones become
// /dev/null), and returns once the init forked and exec'd it, or with a
// *SetupError of StepExec carrying the errno of what failed (ENOENT for a
// missing program, EPERM for another uid or gid than the tool's, EAGAIN
// past maxExecs at once). The process has the sandbox's namespaces,
// cgroup, filter and credentials, forked from the same init thread as the
// tool: nothing the tool lacks.
func (a *Adopted) Exec(ctx context.Context, spec ExecSpec, stdio Stdio) (*Exec, error) {
	if len(spec.Args) == 0 || spec.Args[0] == "" {
		return nil, errors.New("nsexec exec: args must name the program")
	}
	a.mu.Lock()
	if a.execs == nil || !a.running() {
		a.mu.Unlock()
		select {
		case <-a.done:
			return nil, ErrSandboxGone
		default:
		}
		return nil, ErrNotRunning
	}
	a.nextID++
	if a.nextID == 0 {
		a.nextID = 1
	}
	e := &Exec{a: a, id: a.nextID, startCh: make(chan error, 1), done: make(chan struct{})}
	a.execs[e.id] = e
	a.mu.Unlock()
	frame, err := encodeExec(&execRequest{ID: e.id, UID: spec.UID, GID: spec.GID, Cwd: spec.Cwd, Args: spec.Args, Env: spec.Env, Terminal: spec.Terminal})
	if err == nil {
		err = a.sendFiles(frame, stdio)
	}
	if err == nil {
		err = a.await(ctx, e.startCh)
	}
	if err == nil {
		return e, nil
	}
	a.mu.Lock()
	if a.execs != nil && a.execs[e.id] == e {
		// Not answered yet: if it starts after all, it is killed.
		e.abandoned = true
	}
	a.mu.Unlock()
	var errno unix.Errno
	if errors.As(err, &errno) {
		return nil, &SetupError{Step: StepExec, Path: spec.Args[0], Errno: errno, Detail: "exec in the sandbox", Hint: hintFor(StepExec, errno)}
	}
	return nil, err
}

// running says whether the tool runs: the init said it started it and has
// not reported its end. Called with a.mu held.
func (a *Adopted) running() bool { return a.toolStarted && a.tool == nil }

// start delivers the init's answer to the request.
func (e *Exec) start(pid int, err error) {
	e.pid = pid
	select {
	case e.startCh <- err:
	default:
	}
	if e.abandoned && err == nil {
		go e.a.send(execMsg(msgExecSignal, e.id, uint32(unix.SIGKILL)))
	}
}

// end records how the process ended, once.
func (e *Exec) end(_ error, x *Exit) {
	e.once.Do(func() {
		e.exit = *x
		close(e.done)
	})
}

// Pid is the process's pid in the sandbox's pid namespace.
func (e *Exec) Pid() int { return e.pid }

// Done is closed once the process has ended (or the sandbox has).
func (e *Exec) Done() <-chan struct{} { return e.done }

// Wait waits for the process to end and returns its status as the init
// reaped it; a process the sandbox's end took is reported as killed by
// SIGKILL (the kernel's kill of the pid namespace).
func (e *Exec) Wait() Exit {
	<-e.done
	return e.exit
}

// Signal sends sig to the process through the init, which signals it only
// while it is its unreaped child (never a recycled pid).
func (e *Exec) Signal(sig syscall.Signal) error {
	select {
	case <-e.done:
		return ErrSandboxGone
	default:
	}
	if sig < 1 || sig > 64 {
		return errors.New("nsexec: signal out of range")
	}
	return e.a.send(execMsg(msgExecSignal, e.id, uint32(sig)))
}

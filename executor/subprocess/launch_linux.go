package subprocess

import (
	"context"
	"errors"
	"os/exec"
	"sync"
	"syscall"

	"github.com/moat-sandbox/moat/executor"
	"golang.org/x/sys/unix"
)

// launcher starts the tool as the leader of a new process group, so that a
// stop reaches everything it forked.
type launcher struct{}

func (launcher) Launch(_ context.Context, l *executor.Launch) (executor.Process, error) {
	cmd := &exec.Cmd{
		Path:        l.Path,
		Args:        append([]string{l.Path}, l.Args...),
		Env:         l.Env,
		Dir:         l.Workdir,
		Stdin:       l.Stdin,
		Stdout:      l.Stdout,
		Stderr:      l.Stderr,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &process{cmd: cmd, pid: cmd.Process.Pid}, nil
}

// process is a started process group whose leader is the tool.
type process struct {
	cmd *exec.Cmd
	pid int

	mu     sync.Mutex
	reaped bool
}

// Signal signals the whole group. Once the leader is reaped the group id
// may be reused, so it then does nothing.
func (p *process) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reaped {
		return nil
	}
	return unix.Kill(-p.pid, sig)
}

// Wait waits for the leader to exit WITHOUT reaping it (waitid WNOWAIT), so
// its pid, and with it the process group id, cannot be reused; kills what is
// left of the group; and only then reaps the leader. This is how a
// grandchild that stayed in the group is ended without any risk of
// signalling an unrelated group (waitid(2), credentials(7) on process
// group lifetime).
func (p *process) Wait() (executor.ExitStatus, error) {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, p.pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	p.mu.Lock()
	_ = unix.Kill(-p.pid, unix.SIGKILL)
	p.reaped = true
	p.mu.Unlock()
	err := p.cmd.Wait()
	ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok {
		return executor.ExitStatus{Code: -1}, err
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		err = nil // a non-zero exit is an outcome, not a failure to wait
	}
	if ws.Signaled() {
		return executor.ExitStatus{Code: -1, Signal: ws.Signal()}, err
	}
	return executor.ExitStatus{Code: ws.ExitStatus()}, err
}

package executor

import (
	"errors"
	"os/exec"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// GroupProcess is a child started as the leader of a new process group, so
// that a stop reaches everything it forked. The subprocess and container
// providers launch through it.
type GroupProcess struct {
	cmd *exec.Cmd
	pid int

	mu        sync.Mutex
	reaped    bool
	signalled bool
}

// StartGroup starts cmd as the leader of a new process group.
func StartGroup(cmd *exec.Cmd) (*GroupProcess, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &GroupProcess{cmd: cmd, pid: cmd.Process.Pid}, nil
}

// Signal signals the whole group. Once the leader is reaped the group id
// may be reused, so it then does nothing.
func (p *GroupProcess) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reaped {
		return nil
	}
	p.signalled = true
	return unix.Kill(-p.pid, sig)
}

// Signalled reports whether Signal was ever called before the reap.
func (p *GroupProcess) Signalled() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.signalled
}

// Wait waits for the leader to exit WITHOUT reaping it (waitid WNOWAIT), so
// its pid, and with it the process group id, cannot be reused; kills what is
// left of the group; and only then reaps the leader. This is how a
// grandchild that stayed in the group is ended without any risk of
// signalling an unrelated group (waitid(2); credentials(7) on process group
// lifetime).
func (p *GroupProcess) Wait() (ExitStatus, error) {
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
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		err = nil // a non-zero exit is an outcome, not a failure to wait
	}
	st := ExitStatus{Code: -1}
	if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); ok {
		if ws.Signaled() {
			st.Signal = ws.Signal()
		} else {
			st.Code = ws.ExitStatus()
		}
	}
	return st, err
}

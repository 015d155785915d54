package container

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"sync"
	"syscall"

	"github.com/moat-sandbox/moat/executor"
	"golang.org/x/sys/unix"
)

// launcher starts the CLI, in its own process group, for one dispatch.
type launcher struct{ s *settings }

func (l *launcher) Launch(_ context.Context, in *executor.Launch) (executor.Process, error) {
	s := l.s
	env := s.cliEnv(in.Env)
	cli, err := lookCLI(s.cli, env)
	if err != nil {
		return nil, launchError(in, s.cli, err)
	}
	name := "moat-" + in.AttemptID
	args := append(s.runArgs(in.Workdir, name, envNames(in.Env)), in.Path)
	args = append(args, in.Args...)
	cmd := &exec.Cmd{
		Path:        cli,
		Args:        append([]string{s.cli}, args...),
		Env:         env,
		Dir:         in.Workdir,
		Stdin:       in.Stdin,
		Stdout:      in.Stdout,
		Stderr:      in.Stderr,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	if err := cmd.Start(); err != nil {
		return nil, launchError(in, s.cli, err)
	}
	return &process{s: s, cmd: cmd, pid: cmd.Process.Pid, cli: cli, name: name, env: env}, nil
}

func launchError(in *executor.Launch, cli string, err error) *executor.Error {
	return &executor.Error{
		Code:    executor.CodeSpawn,
		Message: fmt.Sprintf("container tool '%s' could not launch '%s': %v", in.Request.Tool, cli, err),
		Err:     err,
	}
}

// process is a running CLI and the container it started.
type process struct {
	s    *settings
	cmd  *exec.Cmd
	pid  int
	cli  string
	name string
	env  []string

	mu        sync.Mutex
	reaped    bool
	signalled bool
}

// Signal signals the CLI's process group. The CLI proxies SIGTERM to the
// container; SIGKILL ends the CLI only, and Wait then removes the container.
func (p *process) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reaped {
		return nil
	}
	p.signalled = true
	return unix.Kill(-p.pid, sig)
}

// Wait waits for the CLI without reaping it (so its process group id cannot
// be reused), kills what is left of the group, reaps the CLI, and, when the
// pipeline stopped it or a signal ended it, removes the container by name,
// which the CLI's own --rm no longer guarantees.
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
	signalled := p.signalled
	p.mu.Unlock()
	err := p.cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		err = nil // a non-zero exit is an outcome, not a failure to wait
	}
	st := executor.ExitStatus{Code: -1}
	if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); ok {
		if ws.Signaled() {
			st.Signal = ws.Signal()
		} else {
			st.Code = ws.ExitStatus()
		}
	}
	if signalled || !st.Exited() {
		p.remove()
	}
	return st, err
}

// remove kills the container (`<cli> kill <name>`, SIGKILL for docker and
// podman alike) and force-removes it (`<cli> rm -f <name>`). The kill comes
// first because `podman rm -f` alone stops a container with SIGTERM and
// waits 10 s before SIGKILL, and docker's rm has no flag to shorten that. A
// container that is already gone is fine; any other failure is logged: the
// dispatch's outcome stands.
func (p *process) remove() {
	ctx, cancel := context.WithTimeout(context.Background(), p.s.removeTimeout)
	defer cancel()
	_, _ = p.run(ctx, "kill", p.name)
	if out, err := p.run(ctx, "rm", "-f", p.name); err != nil && !noSuchContainer.MatchString(out) {
		p.s.cfg.Logger.Warn("remove stopped container", "provider", "container", "cli", p.s.cli, "container", p.name, "err", err, "output", out)
	}
}

// run runs the CLI with args in the dispatch's CLI environment.
func (p *process) run(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, p.cli, args...)
	cmd.Env = p.env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// noSuchContainer is how docker and podman say the container is gone.
var noSuchContainer = regexp.MustCompile(`(?i)no such container|no container with name or id`)

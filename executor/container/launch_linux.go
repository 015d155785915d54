package container

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"regexp"

	"github.com/moat-sandbox/moat/executor"
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
	g, err := executor.StartGroup(&exec.Cmd{
		Path:   cli,
		Args:   append([]string{s.cli}, args...),
		Env:    env,
		Dir:    in.Workdir,
		Stdin:  in.Stdin,
		Stdout: in.Stdout,
		Stderr: in.Stderr,
	})
	if err != nil {
		return nil, launchError(in, s.cli, err)
	}
	return &process{GroupProcess: g, s: s, cli: cli, name: name, env: env}, nil
}

func launchError(in *executor.Launch, cli string, err error) *executor.Error {
	return &executor.Error{
		Code:    executor.CodeSpawn,
		Message: fmt.Sprintf("container tool '%s' could not launch '%s': %s", in.Request.Tool, cli, executor.SpawnText(cli, err)),
		Err:     err,
	}
}

// process is a running CLI (the leader of its own process group) and the
// container it started. Signal (the group's) reaches the CLI, which proxies
// SIGTERM to the container; SIGKILL ends the CLI only, and Wait then removes
// the container.
type process struct {
	*executor.GroupProcess
	s    *settings
	cli  string
	name string
	env  []string
}

// Wait waits for the CLI and its group, then, when the pipeline stopped it
// or a signal ended it, removes the container by name, which the CLI's own
// --rm no longer guarantees.
func (p *process) Wait() (executor.ExitStatus, error) {
	st, err := p.GroupProcess.Wait()
	if p.Signalled() || !st.Exited() {
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

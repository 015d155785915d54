package subprocess

import (
	"context"
	"os/exec"

	"github.com/moat-sandbox/moat/executor"
)

// launcher starts the tool as the leader of a new process group, so that a
// stop reaches everything it forked.
type launcher struct{}

func (launcher) Launch(_ context.Context, l *executor.Launch) (executor.Process, error) {
	return executor.StartGroup(&exec.Cmd{
		Path:   l.Path,
		Args:   append([]string{l.Path}, l.Args...),
		Env:    l.Env,
		Dir:    l.Workdir,
		Stdin:  l.Stdin,
		Stdout: l.Stdout,
		Stderr: l.Stderr,
	})
}

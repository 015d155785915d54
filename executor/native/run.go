package native

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/moat-sandbox/moat/executor"
	moatwd "github.com/moat-sandbox/moat/executor/internal/workdir"
	"github.com/moat-sandbox/moat/nsexec"
)

// Command is one command run in a sandbox with its stdio passed through (as
// `moat run` does), outside the tool-program protocol and the ledger.
type Command struct {
	// Args is the argv; Args[0] is a path inside the sandbox or a bare name
	// looked up in Env's PATH there.
	Args []string
	// Env is the complete environment of the command.
	Env []string
	// Workdir is the host directory mounted at /work; empty means a fresh
	// 0700 directory under the provider's workdir base, removed afterwards.
	Workdir string
	// Stdin, Stdout and Stderr are passed to the command as they are.
	Stdin, Stdout, Stderr *os.File
	// Signals, when set, are forwarded to the sandbox's pid 1.
	Signals <-chan os.Signal
}

// Run runs one command in a fresh sandbox under the provider's policy and
// waits for it. The wall-clock limit kills the whole sandbox; the returned
// status says how the command ended, and the error is a typed
// *executor.Error for a timeout, a setup or spawn failure, or an OOM kill;
// stdio that would open a door to the host (nsexec.CheckStdio) is a config
// error wrapping the *nsexec.StdioError.
func (p *Provider) Run(ctx context.Context, c *Command) (executor.ExitStatus, error) {
	cfg := p.pipeline.Config()
	if len(c.Args) == 0 {
		return executor.ExitStatus{}, &executor.Error{Code: executor.CodeConfig, Message: "run: no command given"}
	}
	// A directory or an O_PATH descriptor as stdio is a door to the host:
	// refused before anything is created for the run.
	if err := nsexec.CheckStdio(nsexec.Stdio{Stdin: c.Stdin, Stdout: c.Stdout, Stderr: c.Stderr}); err != nil {
		return executor.ExitStatus{}, &executor.Error{Code: executor.CodeConfig, Err: err, Message: "run: " + err.Error()}
	}
	workdir := c.Workdir
	if workdir == "" {
		// The pipeline's own workdir: removed with what a tool made
		// unwritable, never through a link it planted, any failure
		// logged; swept by a later provider should this process be killed.
		dir, err := moatwd.Create(cfg.WorkdirBase, runWorkdirPrefix, cfg.Logger)
		if err != nil {
			return executor.ExitStatus{}, &executor.Error{Code: executor.CodeConfig, Err: err,
				Message: fmt.Sprintf("run: create a workdir under %q: %v", cfg.WorkdirBase, err)}
		}
		defer dir.Remove(cfg.Logger)
		workdir = dir.Path
	}
	tool := filepath.Base(c.Args[0]) // errors name the command, as a dispatch names its tool
	proc, err := p.launcher.Launch(ctx, &executor.Launch{
		Request: &executor.Request{Tool: tool},
		Path:    c.Args[0], Args: c.Args[1:], Env: c.Env, Workdir: workdir,
		Stdin: c.Stdin, Stdout: c.Stdout, Stderr: c.Stderr,
	})
	if err != nil {
		return executor.ExitStatus{}, err
	}
	timer := time.NewTimer(cfg.Timeout)
	defer timer.Stop()
	done := make(chan struct{})
	var timedOut atomic.Bool
	go func() {
		for {
			select {
			case <-done:
				return
			case <-timer.C:
				timedOut.Store(true)
				_ = proc.Signal(syscall.SIGKILL)
			case <-ctx.Done():
				_ = proc.Signal(syscall.SIGKILL)
			case s := <-c.Signals:
				if sig, ok := s.(syscall.Signal); ok {
					_ = proc.Signal(sig)
				}
			}
		}
	}()
	st, err := proc.Wait()
	close(done)
	if err != nil {
		return st, err
	}
	if timedOut.Load() {
		return st, &executor.Error{Code: executor.CodeTimeout, Message: fmt.Sprintf("command exceeded %v and was killed", cfg.Timeout)}
	}
	if st.Err != nil {
		return st, st.Err
	}
	return st, nil
}

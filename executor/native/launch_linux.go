package native

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"syscall"

	"github.com/google/uuid"
	"github.com/moat-sandbox/moat/cgroups"
	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/nsexec"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// launcher starts one sandbox per dispatch.
type launcher struct {
	tmpl       nsexec.Config
	resources  *specs.LinuxResources
	nsexec     []nsexec.Option
	cgroups    *cgroups.Manager
	ownCgroups bool
	cgPosture  cgroups.Posture
	onUsage    func(*executor.Request, cgroups.Usage)
	logger     *slog.Logger
}

func (l *launcher) Launch(ctx context.Context, in *executor.Launch) (executor.Process, error) {
	cfg := l.tmpl
	cfg.Args = append([]string{in.Path}, in.Args...)
	cfg.Env = in.Env
	cfg.Workdir = in.Workdir
	opts := append([]nsexec.Option(nil), l.nsexec...)

	var leaf *cgroups.Leaf
	if l.cgroups != nil && l.resources != nil && !l.cgPosture.Degraded() {
		var err error
		leaf, err = l.cgroups.Create(uuid.NewString(), l.resources)
		if err != nil {
			return nil, setupError(in.Request.Tool, fmt.Errorf("create the dispatch's cgroup: %w", err))
		}
		// On cgroup v2 the child is born in its leaf (CLONE_INTO_CGROUP),
		// so it never runs outside it; on v1 it waits for the parent to
		// place it before it goes on. Either way the cgroup namespace is
		// unshared only afterwards, so its root is the leaf.
		if fd, ok := leaf.FD(); ok {
			opts = append(opts, nsexec.WithCgroupFD(fd))
		} else {
			opts = append(opts, nsexec.WithPlacement(leaf.Add))
		}
		cfg.CgroupNS = true
	}
	proc, err := nsexec.Start(ctx, &cfg, nsexec.Stdio{Stdin: in.Stdin, Stdout: in.Stdout, Stderr: in.Stderr}, opts...)
	if err != nil {
		if leaf != nil {
			if derr := leaf.Delete(); derr != nil {
				l.logger.Warn("remove cgroup after a failed start", "err", derr)
			}
		}
		return nil, startError(in.Request.Tool, err)
	}
	return &process{proc: proc, leaf: leaf, tool: in.Request.Tool, req: in.Request, onUsage: l.onUsage,
		memory: memoryLimit(l.resources), logger: l.logger}, nil
}

// startError types a failed sandbox start: a tool that could not be
// exec'd inside is a spawn error, anything else a setup error; both carry
// the nsexec.SetupError with its step, path, errno and hint.
func startError(tool string, err error) error {
	var se *nsexec.SetupError
	if errors.As(err, &se) && se.Step == nsexec.StepExec {
		return &executor.Error{Code: executor.CodeSpawn, Err: err, Message: fmt.Sprintf("tool '%s' could not be spawned: %v", tool, err)}
	}
	return setupError(tool, err)
}

func setupError(tool string, err error) error {
	return &executor.Error{Code: executor.CodeSetup, Err: err, Message: fmt.Sprintf("tool '%s' sandbox could not be set up: %v", tool, err)}
}

func memoryLimit(res *specs.LinuxResources) int64 {
	if res == nil || res.Memory == nil || res.Memory.Limit == nil {
		return 0
	}
	return *res.Memory.Limit
}

// process is one running sandbox. The tool is its pid 1: when it ends, the
// kernel kills everything else in the pid namespace.
type process struct {
	proc    *nsexec.Process
	leaf    *cgroups.Leaf
	tool    string
	req     *executor.Request
	onUsage func(*executor.Request, cgroups.Usage)
	memory  int64
	logger  *slog.Logger

	mu     sync.Mutex
	waited bool
}

// Signal signals the sandbox's pid 1. SIGKILL from the parent namespace is
// always delivered to a pid-namespace init and takes the whole namespace
// with it; a catchable signal reaches it only if the tool handles it
// (pid_namespaces(7)), which is what a grace period is for.
func (p *process) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.waited {
		return nil
	}
	if sig == unix.SIGKILL && p.leaf != nil {
		_ = p.leaf.Kill()
	}
	return p.proc.Signal(sig)
}

// Wait waits for pid 1, makes sure the cgroup is empty, reads whether the
// kernel OOM-killed something, and removes the leaf.
func (p *process) Wait() (executor.ExitStatus, error) {
	st, err := p.proc.Wait()
	p.mu.Lock()
	p.waited = true
	p.mu.Unlock()
	status := exitStatus(st)
	if p.leaf != nil {
		u, serr := p.leaf.Stats()
		if serr == nil {
			if u.OOMKilled {
				status.Err = &executor.Error{Code: executor.CodeOOM,
					Message: fmt.Sprintf("tool '%s' was killed by the kernel at its memory limit of %d bytes", p.tool, p.memory)}
			}
			if u.PidsLimitHits > 0 {
				status.Note = fmt.Sprintf("the sandbox hit its pids limit %d times: forks were refused", u.PidsLimitHits)
			}
			if p.onUsage != nil {
				p.onUsage(p.req, u)
			}
		}
		if derr := p.leaf.Delete(); derr != nil {
			p.logger.Warn("remove the dispatch's cgroup", "err", derr)
		}
	}
	return status, err
}

func exitStatus(e nsexec.Exit) executor.ExitStatus {
	return executor.ExitStatus{Code: e.Code, Signal: e.Signal}
}

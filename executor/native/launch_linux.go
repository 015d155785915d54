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
	"github.com/moat-sandbox/moat/executor/egress"
	"github.com/moat-sandbox/moat/nsexec"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// launcher starts one sandbox per dispatch: a pooled one when the warm
// pool has one ready, else a cold one.
type launcher struct {
	tmpl       nsexec.Config
	tmplDigest string
	resources  *specs.LinuxResources
	nsexec     []nsexec.Option
	cgroups    *cgroups.Manager
	ownCgroups bool
	cgPosture  cgroups.Posture
	limits     []LimitState // how each of the policy's limits holds (standin.go)
	onUsage    func(*executor.Request, cgroups.Usage)
	logger     *slog.Logger
	pool       *pool
	egress     *egressRoute
	mode       modeChoice    // the rung and what it drops (mode.go)
	reuse      int           // dispatches per pooled sandbox when above 1 (reuse_linux.go)
	fall       *modeFallback // a provisional mode's way down (fallback.go)
}

// startSandbox is nsexec.Start, a variable for the tests of a clone that
// fails.
var startSandbox = nsexec.Start

func (l *launcher) Launch(ctx context.Context, in *executor.Launch) (executor.Process, error) {
	if f := l.fall.current(); f != nil {
		return f.l.Launch(ctx, in)
	}
	args := append([]string{in.Path}, in.Args...)
	if l.pool != nil {
		if e := l.pool.take(); e != nil && l.reuse > 1 {
			if p, err := l.launchReused(ctx, e, in, args); p != nil || err != nil {
				return p, err
			}
		} else if e != nil {
			if err := l.pool.swapWorkdir(e, in.Workdir); err != nil {
				l.logger.Debug("warm pool: start cold", "reason", err)
				l.pool.miss()
				l.pool.discard(e)
			} else {
				proc, err := e.pending.Exec(ctx, args, in.Env, nsexec.Stdio{Stdin: in.Stdin, Stdout: in.Stdout, Stderr: in.Stderr})
				if err != nil {
					l.deleteLeaf(e.leaf)
					return nil, startError(in.Request.Tool, err)
				}
				return l.process(proc, e.leaf, in.Request), nil
			}
		}
	}
	cfg := l.tmpl
	cfg.Args = args
	cfg.Env = in.Env
	cfg.Workdir = in.Workdir
	leaf, opts, placed, err := l.leaf()
	if err != nil {
		return nil, setupError(in.Request.Tool, err)
	}
	defer placed()
	cfg.CgroupNS = leaf != nil && !cfg.NoUserNS // no-userns: no namespace, the leaf is placement only
	var sb *egress.Sandbox
	if l.egress != nil {
		var admit nsexec.Option
		if sb, admit, err = l.egress.open(&cfg, in.Request.Tool); err != nil {
			l.deleteLeaf(leaf)
			return nil, setupError(in.Request.Tool, err)
		}
		opts = append(opts, admit)
	}
	proc, err := startSandbox(ctx, &cfg, nsexec.Stdio{Stdin: in.Stdin, Stdout: in.Stdout, Stderr: in.Stderr}, opts...)
	if err != nil {
		if sb != nil {
			sb.Close()
		}
		l.deleteLeaf(leaf)
		// A provisional full mode learns here that no user namespace can
		// be made, and retries once in no-userns (fallback.go).
		if nl, ferr := l.fallBack(err); ferr != nil {
			return nil, setupError(in.Request.Tool, ferr)
		} else if nl != nil {
			return nl.Launch(ctx, in)
		}
		return nil, startError(in.Request.Tool, err)
	}
	p := l.process(proc, leaf, in.Request)
	p.egress = sb
	return p, nil
}

// leaf creates the dispatch's cgroup leaf when the policy sets limits this
// host enforces, and returns the nsexec options that put the child in it,
// and what to call once the child was started (it closes descriptors that
// only the start needs). A leaf holds what its manager enforces even when
// another limit is missing (memory and pids without the cpu controller):
// the posture says that limit alone degrades, and a required one was
// refused in New.
func (l *launcher) leaf() (*cgroups.Leaf, []nsexec.Option, func(), error) {
	opts := append([]nsexec.Option(nil), l.nsexec...)
	noop := func() {}
	p := l.cgPosture
	if l.cgroups == nil || l.resources == nil || !(p.Memory.Enforced || p.Pids.Enforced || p.CPU.Enforced) {
		return nil, opts, noop, nil
	}
	leaf, err := l.cgroups.Create(uuid.NewString(), l.resources)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("create the dispatch's cgroup: %w", err)
	}
	in, placed, err := LeafOptions(leaf)
	if err != nil {
		l.deleteLeaf(leaf)
		return nil, nil, nil, fmt.Errorf("create the dispatch's cgroup: %w", err)
	}
	return leaf, append(opts, in...), placed, nil
}

// LeafOptions returns the nsexec options that start a sandbox inside leaf,
// and what to call once it was started (it closes descriptors only the
// start needs). On cgroup v2 the child is born in its leaf
// (CLONE_INTO_CGROUP), so it never runs outside it; on v1 it joins the
// leaf itself, first thing, from the thread that execs the tool
// (nsexec.WithCgroupTasks says why not the parent). Either way the cgroup
// namespace is unshared only afterwards, so its root is the leaf.
func LeafOptions(leaf *cgroups.Leaf) ([]nsexec.Option, func(), error) {
	noop := func() {}
	if fd, ok := leaf.FD(); ok {
		return []nsexec.Option{nsexec.WithCgroupFD(fd)}, noop, nil
	}
	tasks, err := leaf.Tasks()
	if err != nil {
		return nil, nil, err
	}
	if tasks == nil { // v2 without an fd for clone3
		return []nsexec.Option{nsexec.WithPlacement(leaf.Add)}, noop, nil
	}
	closeAll := func() {
		for _, f := range tasks {
			f.Close()
		}
	}
	return []nsexec.Option{nsexec.WithCgroupTasks(tasks...)}, closeAll, nil
}

// deleteLeaf removes a leaf whose sandbox never ran a tool.
func (l *launcher) deleteLeaf(leaf *cgroups.Leaf) {
	if leaf == nil {
		return
	}
	if err := leaf.Delete(); err != nil {
		l.logger.Warn("remove cgroup after a failed start", "err", err)
	}
}

func (l *launcher) process(proc *nsexec.Process, leaf *cgroups.Leaf, req *executor.Request) *process {
	p := &process{proc: proc, leaf: leaf, tool: req.Tool, req: req, onUsage: l.onUsage, onEgress: l.egressUsage(),
		memory: memoryLimit(l.resources), logger: l.logger}
	if l.pool != nil {
		p.after, p.pool = l.pool.refillAfter, l.pool
	}
	return p
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

// process is one running sandbox: its pid 1 is moat's init, whose only
// child is the tool; when the tool ends, the init ends with its status and
// the kernel kills everything else in the pid namespace.
type process struct {
	proc     *nsexec.Process
	leaf     *cgroups.Leaf
	tool     string
	req      *executor.Request
	onUsage  func(*executor.Request, cgroups.Usage)
	onEgress func(*executor.Request, egress.Usage)
	memory   int64
	logger   *slog.Logger
	after    func() // once the sandbox is gone (the warm pool's refill)
	pool     *pool
	egress   *egress.Sandbox
	reused   *pooled // the reusable sandbox it runs in (reuse_linux.go)

	mu       sync.Mutex
	waited   bool
	signaled bool // the pipeline signaled it: a reused sandbox is discarded
}

// Signal signals the sandbox's pid 1, the init, which forwards every
// catchable signal to the tool, so a tool without a handler ends at once and
// one with a handler gets its grace. SIGKILL from the parent namespace ends
// the init and takes the whole namespace with it.
func (p *process) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.waited {
		return nil
	}
	p.signaled = true
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
	oom := false // or pids-limit hits: a reused sandbox is discarded after either
	if p.leaf != nil {
		read := p.leaf.Events // what the outcome needs
		if p.onUsage != nil {
			read = p.leaf.Stats
		}
		u, serr := read()
		if serr == nil {
			if u.OOMKilled {
				oom = true
				status.Err = &executor.Error{Code: executor.CodeOOM,
					Message: fmt.Sprintf("tool '%s' was killed by the kernel at its memory limit of %d bytes", p.tool, p.memory)}
			}
			if u.PidsLimitHits > 0 {
				oom = true // a reused leaf's count would carry over: discard it too
				status.Note = fmt.Sprintf("the sandbox hit its pids limit %d times: forks were refused", u.PidsLimitHits)
			}
			if p.onUsage != nil {
				p.onUsage(p.req, u)
			}
		}
		if p.reused == nil { // a reused sandbox's leaf goes with it
			if derr := p.leaf.Delete(); derr != nil {
				p.logger.Warn("remove the dispatch's cgroup", "err", derr)
			}
		}
	}
	if p.egress != nil {
		// The sandbox is gone: its socket and tunnels go too, and the
		// counters are final.
		p.egress.Close()
		if p.onEgress != nil {
			p.onEgress(p.req, p.egress.Usage())
		}
	}
	if p.reused != nil {
		p.mu.Lock()
		signaled := p.signaled
		p.mu.Unlock()
		p.pool.giveBack(p.reused, signaled || status.Signal != 0, oom)
	} else if p.after != nil {
		p.after()
	}
	return status, err
}

func exitStatus(e nsexec.Exit) executor.ExitStatus {
	return executor.ExitStatus{Code: e.Code, Signal: e.Signal}
}

package native

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"

	"github.com/moat-sandbox/moat/cgroups"
	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/nsexec"
)

// Reuse (issue 33): with WithReuse(n) a pooled sandbox serves up to n
// dispatches of the provider's policy, each after nsexec's proven reset
// (nsexec.WithReuse says what it renews and compares), and is destroyed
// after the n-th, or at once after a dispatch that ended by a signal, a
// timeout, a cancel, an output cap or an OOM (any signal the pipeline sent
// it), or a failed reset. Each dispatch's workdir is a fresh directory in
// the sandbox's own, bound at /work for that tool alone and renamed onto
// the pipeline's workdir once the tool runs, as the one-shot pool swaps its
// workdir in.

// WithReuse lets each sandbox of the warm pool (WithPool) serve up to n
// dispatches; 0 or 1 (the default) is one. Refused (a *ReuseError) without
// a pool, with egress, copy-up tmpfs mounts, sysctls, the no-proc mode,
// WithUsage with a cgroup leaf (its peak and CPU time would span
// dispatches) and cgroup v1 leaves (whose tasks files the init joins once):
// on a v1 or hybrid host, reuse runs WithoutCgroups.
func WithReuse(n int) Option { return func(o *options) { o.reuse = n } }

// ReuseError is New's refusal of WithReuse.
type ReuseError struct {
	Reason string
}

func (e *ReuseError) Error() string { return "native: WithReuse: " + e.Reason }

// checkReuse refuses what a reused sandbox cannot reset (see WithReuse).
func checkReuse(o *options, l *launcher) error {
	bad := func(reason string) error { return &ReuseError{Reason: reason} }
	p := l.cgPosture
	leaf := l.cgroups != nil && l.resources != nil && (p.Memory.Enforced || p.Pids.Enforced || p.CPU.Enforced)
	switch {
	case o.reuse < 0:
		return bad(fmt.Sprintf("%d dispatches is negative", o.reuse))
	case o.poolSize <= 0:
		return bad("needs a warm pool (WithPool): only a prepared sandbox is reused")
	case l.egress != nil:
		return bad("the policy has an egress section, whose socket and tunnels count for one dispatch")
	case leaf && o.onUsage != nil:
		return bad("WithUsage with a cgroup leaf: its memory peak and CPU time would span dispatches")
	case leaf && (p.Layout == cgroups.V1 || p.Layout == cgroups.Hybrid):
		return bad("a cgroup v1 leaf is joined once, by the init's first thread: run WithoutCgroups on this host")
	}
	if err := nsexec.CheckReuse(&l.tmpl); err != nil {
		return bad(err.Error())
	}
	return nil
}

// reuseStats are the pool's reuse counters (PoolStats.Reused, Reset).
type reuseStats struct {
	reused, reset atomic.Int64
}

// launchReused runs a dispatch in a pooled reusable sandbox: its workdir
// is a fresh directory in the sandbox's, renamed onto the pipeline's once
// the tool runs. The process gives the sandbox back to the pool (or
// destroys it) when it was waited for. A workdir that is not a fresh one
// of ours returns the sandbox unused and nil, nil: the dispatch starts
// cold.
func (l *launcher) launchReused(ctx context.Context, e *pooled, in *executor.Launch, args []string) (executor.Process, error) {
	if err := l.pool.swappable(e, in.Workdir); err != nil {
		l.logger.Debug("warm pool: start cold", "reason", err)
		l.pool.miss()
		l.pool.putBack(e)
		return nil, nil
	}
	l.pool.checkout(1)
	p, err := l.startReused(ctx, e, in, args)
	if err != nil {
		l.pool.drop(e)
		return nil, err
	}
	return p, nil
}

func (l *launcher) startReused(ctx context.Context, e *pooled, in *executor.Launch, args []string) (*process, error) {
	name := "d" + strconv.Itoa(e.pending.Served()+1)
	dir := filepath.Join(e.workdir.Path, name)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create the dispatch's workdir: %w", err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(e.workdir.Path, &st); err != nil {
		return nil, fmt.Errorf("create the dispatch's workdir: %w", err)
	}
	if err := os.Lchown(dir, int(st.Uid), int(st.Gid)); err != nil {
		return nil, fmt.Errorf("create the dispatch's workdir: %w", err)
	}
	proc, err := e.pending.ExecWork(ctx, name, args, in.Env, nsexec.Stdio{Stdin: in.Stdin, Stdout: in.Stdout, Stderr: in.Stderr})
	if err != nil {
		return nil, startError(in.Request.Tool, err)
	}
	// The tool's /work follows the inode: after the rename it is the
	// pipeline's workdir, which it records and removes.
	if err := syscall.Rename(dir, in.Workdir); err != nil {
		_ = proc.Signal(syscall.SIGKILL)
		proc.Wait()
		return nil, setupError(in.Request.Tool, fmt.Errorf("swap the dispatch's workdir in: %w", err))
	}
	p := l.process(proc, e.leaf, in.Request)
	p.reused = e
	if e.pending.Served() > 1 {
		l.pool.reuse.reused.Add(1)
	}
	return p, nil
}

// giveBack returns a reused sandbox to the pool after its dispatch, once
// its reset said it may serve again, or destroys it: after its n-th
// dispatch, a signal the pipeline sent, an OOM, or a failed reset.
func (p *pool) giveBack(e *pooled, signaled, oom bool) {
	if signaled || oom || e.pending.Served() >= p.l.reuse {
		p.drop(e)
		return
	}
	p.cleanup.Add(1)
	go func() {
		defer p.cleanup.Done()
		if err := e.pending.Reset(p.ctx); err != nil {
			p.drop(e)
			return
		}
		p.reuse.reset.Add(1)
		p.checkout(-1)
		p.putBack(e)
	}()
}

// putBack returns a reusable sandbox to the front of the ready list (it
// is warm, its born time stays: the idle timeout still ends it).
func (p *pool) putBack(e *pooled) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		p.discardLocked(e)
		return
	}
	p.ready = append([]*pooled{e}, p.ready...)
}

// checkout counts reusable sandboxes serving a dispatch, which the refill
// does not replace.
func (p *pool) checkout(n int) {
	p.mu.Lock()
	p.out += n
	p.mu.Unlock()
}

// drop destroys a checked-out reusable sandbox that serves no more, and
// lets the refill replace it.
func (p *pool) drop(e *pooled) {
	p.mu.Lock()
	p.stats.Discarded++
	p.out--
	p.mu.Unlock()
	p.discard(e)
	p.kick()
}

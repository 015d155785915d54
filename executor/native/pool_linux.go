package native

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/moat-sandbox/moat/cgroups"
	moatwd "github.com/moat-sandbox/moat/executor/internal/workdir"
	"github.com/moat-sandbox/moat/nsexec"
)

// The warm pool (issue 9; DESIGN.md, Speed): sandboxes spawned ahead of
// time up to the point where they wait for their request (nsexec.Prepare:
// namespaces, mount tree, identity, cgroup leaf and a fresh empty workdir
// all ready), so the setup leaves the dispatch's critical path. Each pooled
// sandbox serves exactly one dispatch and is destroyed with it, exactly as
// a cold one is: nothing is shared between calls, only the moment the setup
// happens moves.

// DefaultPoolIdleTimeout is how long a pool stays filled without dispatches
// (WithPoolIdleTimeout).
const DefaultPoolIdleTimeout = time.Minute

// PoolStats counts what a warm pool did.
type PoolStats struct {
	// Ready is the number of sandboxes waiting now.
	Ready int
	// Hits are dispatches served by a pooled sandbox, Misses those that
	// started cold because none was ready (or the workdir could not be
	// swapped in).
	Hits, Misses int
	// Discarded counts pooled sandboxes thrown away unused: idle too long,
	// dead, or prepared under host state that has changed since.
	Discarded int
	// Failed counts failed prepares; LastError is the latest.
	Failed    int
	LastError error
	// Reused counts dispatches served by a sandbox that had served one
	// before (WithReuse), Reset the resets that let a sandbox serve again.
	Reused, Reset int
}

// pooled is one waiting sandbox.
type pooled struct {
	pending *nsexec.Pending
	leaf    *cgroups.Leaf
	workdir *moatwd.Dir // empty, fresh, bound at /work; swapped in at dispatch
	key     string      // the host state it was prepared under
	born    time.Time
}

// pool keeps up to size prepared sandboxes of one launcher.
type pool struct {
	l    *launcher
	size int
	idle time.Duration
	base string // the workdir base, where the pooled workdirs live
	// prefixes are the workdir names (from the pipeline and Run) that are
	// fresh and ours, so a pooled workdir may replace them.
	prefixes []string

	ctx    context.Context
	cancel context.CancelFunc
	wake   chan struct{}
	done   chan struct{}

	mu       sync.Mutex
	ready    []*pooled
	lastUse  time.Time
	closed   bool
	stats    PoolStats
	failures int // consecutive failed prepares, for the backoff
	out      int // reusable sandboxes serving a dispatch now (reuse_linux.go)
	reuse    reuseStats
	cleanup  sync.WaitGroup
}

func newPool(l *launcher, size int, idle time.Duration, base string, prefixes []string) *pool {
	if idle <= 0 {
		idle = DefaultPoolIdleTimeout
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &pool{l: l, size: size, idle: idle, base: filepath.Clean(base), prefixes: prefixes,
		ctx: ctx, cancel: cancel, wake: make(chan struct{}, 1), done: make(chan struct{}), lastUse: time.Now()}
	go p.refill()
	return p
}

// take hands out a live pooled sandbox prepared under the current host
// state, or nil. Stale ones are discarded on the way.
func (p *pool) take() *pooled {
	key := p.l.hostKey()
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lastUse = now
	for len(p.ready) > 0 {
		e := p.ready[0]
		p.ready = p.ready[1:]
		if e.key == key && now.Sub(e.born) < p.idle && alive(e) {
			p.stats.Hits++
			return e
		}
		p.stats.Discarded++
		p.discardLocked(e)
	}
	p.stats.Misses++
	return nil
}

// refillAfter is called when a dispatch's sandbox has ended: the refill
// starts then, not when the sandbox was taken, so preparing the next one
// does not compete for the CPU with the dispatch it would slow down.
func (p *pool) refillAfter() { p.kick() }

// miss counts a taken sandbox that could not be used after all.
func (p *pool) miss() {
	p.mu.Lock()
	p.stats.Hits--
	p.stats.Misses++
	p.stats.Discarded++
	p.mu.Unlock()
}

func alive(e *pooled) bool {
	select {
	case <-e.pending.Done():
		return false
	default:
		return true
	}
}

func (p *pool) kick() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// refill keeps the pool full while it is in use, one prepare at a time (a
// prepare is mostly CPU; two at once would only compete with the dispatches
// they are for), and empties it once no dispatch came for the idle timeout.
func (p *pool) refill() {
	defer close(p.done)
	tick := time.NewTicker(min(p.idle/2, 10*time.Second))
	defer tick.Stop()
	for {
		p.expire()
		for p.wanted() {
			e, err := p.prepare()
			p.mu.Lock()
			if err != nil {
				p.stats.Failed++
				p.stats.LastError = err
				p.failures++
			} else {
				p.failures = 0
				if p.closed {
					p.discardLocked(e)
				} else {
					p.ready = append(p.ready, e)
				}
			}
			backoff := p.failures > 0 && !p.closed
			p.mu.Unlock()
			if backoff {
				p.l.logger.Warn("warm pool: prepare a sandbox", "err", err)
				break // wait for the next dispatch or tick
			}
		}
		select {
		case <-p.ctx.Done():
			return
		case <-p.wake:
		case <-tick.C:
		}
	}
}

// wanted reports whether one more sandbox should be prepared now.
func (p *pool) wanted() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.closed && len(p.ready)+p.out < p.size && time.Since(p.lastUse) < p.idle
}

// expire discards the sandboxes that waited longer than the idle timeout.
func (p *pool) expire() {
	p.mu.Lock()
	defer p.mu.Unlock()
	keep := p.ready[:0]
	for _, e := range p.ready {
		if time.Since(e.born) < p.idle && alive(e) {
			keep = append(keep, e)
		} else {
			p.stats.Discarded++
			p.discardLocked(e)
		}
	}
	clear(p.ready[len(keep):])
	p.ready = keep
}

// prepare spawns one sandbox up to its request, in a fresh workdir and,
// with cgroup limits, its own leaf.
func (p *pool) prepare() (*pooled, error) {
	key := p.l.hostKey()
	wd, err := moatwd.Create(p.base, "moat-pool-", p.l.logger)
	if err != nil {
		return nil, fmt.Errorf("create a workdir under %q: %w", p.base, err)
	}
	cfg := p.l.tmpl
	cfg.Workdir = wd.Path
	leaf, opts, placed, err := p.l.leaf()
	if err != nil {
		wd.Remove(p.l.logger)
		return nil, err
	}
	defer placed()
	cfg.CgroupNS = leaf != nil && !cfg.NoUserNS // no-userns: no namespace, the leaf is placement only
	if p.l.reuse > 1 {
		opts = append(opts, nsexec.WithReuse())
	}
	pending, err := nsexec.Prepare(p.ctx, &cfg, opts...)
	if err != nil {
		p.l.deleteLeaf(leaf)
		wd.Remove(p.l.logger)
		return nil, err
	}
	return &pooled{pending: pending, leaf: leaf, workdir: wd, key: key, born: time.Now()}, nil
}

// discardLocked destroys an unused sandbox in the background.
func (p *pool) discardLocked(e *pooled) {
	p.cleanup.Add(1)
	go func() {
		defer p.cleanup.Done()
		p.destroy(e)
	}()
}

// discard destroys an unused sandbox taken from the pool (one that could
// not be used for its dispatch) in the background.
func (p *pool) discard(e *pooled) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.discardLocked(e)
}

func (p *pool) destroy(e *pooled) {
	e.pending.Close()
	p.l.deleteLeaf(e.leaf)
	e.workdir.Remove(p.l.logger.With("warm pool", true))
}

// close drains the pool: no more refills, every waiting sandbox destroyed.
func (p *pool) close() {
	p.mu.Lock()
	p.closed = true
	ready := p.ready
	p.ready = nil
	p.stats.Discarded += len(ready)
	p.mu.Unlock()
	p.cancel()
	<-p.done
	for _, e := range ready {
		p.destroy(e)
	}
	p.cleanup.Wait()
}

func (p *pool) snapshot() PoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.Ready = len(p.ready)
	s.Reused, s.Reset = int(p.reuse.reused.Load()), int(p.reuse.reset.Load())
	return s
}

// swapWorkdir makes the pooled sandbox's workdir the dispatch's: the
// pipeline (or Run) has just created dir, fresh and empty, and will record
// and remove it; rename(2) replaces an empty directory atomically, and the
// sandbox's /work bind follows the inode, so after it dir is /work. Only a
// directory of ours in the pool's base qualifies; rename refuses a non-empty
// one (ENOTEMPTY), so a caller's files are never replaced.
func (p *pool) swapWorkdir(e *pooled, dir string) error {
	if err := p.swappable(e, dir); err != nil {
		return err
	}
	// syscall.Rename, not os.Rename, which refuses any existing directory
	// as the new name before asking the kernel.
	if err := syscall.Rename(e.workdir.Path, dir); err != nil {
		return fmt.Errorf("swap the pooled workdir in: %w", err)
	}
	// The directory is the dispatch's now, under its name and marker.
	e.workdir.Release()
	return nil
}

// swappable says whether dir, the dispatch's workdir, may be replaced by
// one of e's: a fresh per-call one of ours, beside e's (both were made by
// workdir.Create in the base, under its resolved path, which a link in the
// base makes another string than p.base).
func (p *pool) swappable(e *pooled, dir string) error {
	if dir == "" || filepath.Dir(filepath.Clean(dir)) != filepath.Dir(e.workdir.Path) {
		return errors.New("the workdir is not in the pool's base")
	}
	name := filepath.Base(dir)
	ours := false
	for _, prefix := range p.prefixes {
		ours = ours || strings.HasPrefix(name, prefix)
	}
	if !ours {
		return errors.New("the workdir is not a fresh per-call one")
	}
	return nil
}

// hostKey is the host state a sandbox is prepared under: the template it
// runs (policy, binds, seccomp program) and the identity of every host
// directory it binds. A pooled sandbox whose key differs from the current
// one was built on a view of the host that has changed (a bind source
// replaced, a rootfs swapped) and is discarded.
func (l *launcher) hostKey() string {
	h := sha256.New()
	h.Write([]byte(l.tmplDigest))
	stat := func(path string) {
		var st syscall.Stat_t
		if err := syscall.Stat(path, &st); err != nil {
			h.Write([]byte("missing:" + path + "\x00"))
			return
		}
		h.Write([]byte(path + "\x00" + strconv.FormatUint(st.Dev, 10) + ":" + strconv.FormatUint(st.Ino, 10) + "\x00"))
	}
	if l.tmpl.Rootfs != "" {
		stat(l.tmpl.Rootfs)
	}
	for _, m := range l.tmpl.Mounts {
		if m.Type != "tmpfs" { // a tmpfs has no host source
			stat(m.Source)
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// digestTemplate fixes the template part of the host key once.
func digestTemplate(cfg *nsexec.Config) (string, error) {
	b, err := json.Marshal(cfg)
	if err != nil {
		return "", fmt.Errorf("native: digest the sandbox template: %w", err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// runWorkdirPrefix starts the names of the fresh workdirs Run creates
// (run.go).
const runWorkdirPrefix = "moat-run-"

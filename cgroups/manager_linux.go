package cgroups

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// killTimeout bounds how long Kill waits for a leaf to become empty.
const killTimeout = 5 * time.Second

// tree is one way to lay out leaves: v1 (a directory per controller
// hierarchy) or v2 (one directory).
type tree interface {
	create(name string, l limits) (leafOps, error)
	open(name string) leafOps
	leaves() ([]string, error)
	close() error
}

// leafOps is one leaf of a tree.
type leafOps interface {
	fd() (int, bool)
	add(pid int) error
	tasks() ([]*os.File, error)
	kill() error
	populated() (bool, error)
	stats(full bool) (Usage, error)
	remove() error
	forget()            // close what the leaf holds open, removing nothing
	leafDirs() []string // the leaf's directories
}

// Manager creates per-dispatch leaves below one parent cgroup.
type Manager struct {
	log     *slog.Logger
	owner   owner
	leaves  owner // whose leaves Create makes and Open finds (WithLeafOwner; else owner)
	tree    tree  // nil when no cgroup is usable
	posture Posture
	loan    *lent // the delegated group this process moved out of, given back on Close

	closeOnce sync.Once
	closeErr  error
}

// New detects the host, creates the parent group where it may and reports
// the result in Posture. Not being able to create cgroups is not an error:
// the Manager then reports every limit degraded and Create fails with a
// *DelegationError.
func New(opts ...Option) (*Manager, error) {
	c := config{parent: DefaultParent}
	for _, o := range opts {
		o(&c)
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if err := checkParent(c.parent); err != nil {
		return nil, err
	}
	h := c.host
	if h == nil {
		var err error
		if h, err = Detect(); err != nil {
			return nil, err
		}
	}
	m := &Manager{log: c.log}
	if c.owner != nil {
		m.owner = *c.owner
	} else {
		o, err := selfOwner()
		if err != nil {
			return nil, fmt.Errorf("new cgroups manager: %w", err)
		}
		m.owner = o
	}
	m.leaves = m.owner
	if c.leafOwner > 0 {
		start, err := startTime(c.leafOwner)
		if err != nil {
			return nil, fmt.Errorf("new cgroups manager: the leaves' owner %d: %w", c.leafOwner, err)
		}
		m.leaves = owner{pid: c.leafOwner, start: start}
	}
	m.posture = Posture{Layout: h.Layout}
	var reason string
	switch {
	case (h.Layout == Unified || (c.unified && h.Unified != "")) && os.Geteuid() != 0 && !c.parentSet:
		if t, why := m.rootlessV2(h, &c); t != nil {
			m.tree = t
		} else {
			reason = why
		}
	case h.Layout == Unified || (c.unified && h.Unified != ""):
		var t *v2Tree
		if t, reason = newV2Tree(h, c.parent, &m.posture); t != nil {
			m.tree = t
		}
	case h.Layout == V1 || h.Layout == Hybrid:
		t := newV1Tree(h, c.parent, &m.posture)
		if t.usable() {
			m.tree = t
		} else {
			_ = t.close() // the per-limit reasons are already in the posture
		}
	default:
		reason = "no cgroup filesystem is mounted"
	}
	if m.tree == nil && reason != "" {
		m.posture.Memory = LimitPosture{Reason: reason}
		m.posture.Pids = LimitPosture{Reason: reason}
		m.posture.CPU = LimitPosture{Reason: reason}
	}
	m.setSource(&c)
	if m.posture.Degraded() {
		m.posture.Fix = fixHint
		if h.Layout == Unified {
			m.posture.Fix = fixHintV2
		}
	}
	m.log.Debug("cgroups ready", "layout", h.Layout.String(), "parents", m.posture.Parents,
		"memory", m.posture.Memory.Enforced, "pids", m.posture.Pids.Enforced, "cpu", m.posture.CPU.Enforced)
	return m, nil
}

// setSource says which path gave the cgroup, when rootlessV2 did not.
func (m *Manager) setSource(c *config) {
	p := &m.posture
	switch {
	case m.tree == nil || (!p.Memory.Enforced && !p.Pids.Enforced && !p.CPU.Enforced):
		p.Source = SourceNone
		switch {
		case p.SourceDetail != "":
		case p.Layout == V1 || p.Layout == Hybrid:
			// systemd delegates v1 controllers to no user, and a user
			// bus cannot change that.
			p.SourceDetail = "the limits live in cgroup v1 hierarchies (layout " + p.Layout.String() +
				"), which systemd does not delegate to users, and none is delegated to uid " + strconv.Itoa(os.Geteuid()) + ": " + p.Memory.Reason
		default:
			p.SourceDetail = p.Memory.Reason
		}
	case p.Source != "":
	case os.Geteuid() == 0:
		p.Source, p.SourceDetail = SourceRoot, strings.Join(p.Parents, ", ")
	case c.parentSet:
		p.Source, p.SourceDetail = SourceParent, strings.Join(p.Parents, ", ")
	default:
		p.Source, p.SourceDetail = SourceDelegated, strings.Join(p.Parents, ", ")
	}
}

// checkParent refuses a parent that would escape the hierarchy.
func checkParent(p string) error {
	if p == "" || filepath.Clean(p) != strings.TrimSuffix(p, "/") || strings.Contains(p, "..") {
		return fmt.Errorf("cgroups: invalid parent %q", p)
	}
	return nil
}

// Posture reports which limits this Manager enforces.
func (m *Manager) Posture() Posture {
	p := m.posture
	p.Parents = append([]string(nil), p.Parents...)
	return p
}

// Create makes a fresh leaf for one dispatch, named after id (1 to 128 of
// [A-Za-z0-9_.-]), with the memory (swap off), pids and CPU limits of res.
// Limits the posture reports as degraded are not applied; the caller decides
// with Posture.Require whether that is acceptable.
func (m *Manager) Create(id string, res *specs.LinuxResources) (*Leaf, error) {
	if err := validID(id); err != nil {
		return nil, err
	}
	lim, err := limitsFrom(res)
	if err != nil {
		return nil, err
	}
	if err := refuseExtras(res); err != nil {
		return nil, err
	}
	if m.tree == nil {
		return nil, &DelegationError{Reason: "no cgroup is writable here (" + m.posture.Memory.Reason + ")", Fix: m.posture.Fix}
	}
	for _, k := range []Limit{Memory, Pids, CPU} {
		if lim.want(k) && !m.posture.Of(k).Enforced {
			m.log.Debug("cgroup limit not applied", "id", id, "limit", k.String(), "reason", m.posture.Of(k).Reason)
		}
	}
	name := m.leaves.leafName(id)
	ops, err := m.tree.create(name, lim)
	if err == nil {
		err = writeShares(ops, res)
	}
	if err != nil {
		if ops != nil {
			ops.remove()
		}
		return nil, fmt.Errorf("create cgroup %s: %w", id, err)
	}
	return &Leaf{id: id, ops: ops, log: m.log}, nil
}

// Open finds the leaf id that Create made for this Manager's leaf owner
// (this process, unless WithLeafOwner), in another process perhaps: a
// monitor holds the leaf its create made for it. It returns an error
// wrapping os.ErrNotExist when there is none.
func (m *Manager) Open(id string) (*Leaf, error) {
	if err := validID(id); err != nil {
		return nil, err
	}
	if m.tree == nil {
		return nil, fmt.Errorf("open cgroup %s: no cgroup is usable here: %w", id, os.ErrNotExist)
	}
	names, err := m.tree.leaves()
	if err != nil {
		return nil, fmt.Errorf("open cgroup %s: %w", id, err)
	}
	name := m.leaves.leafName(id)
	for _, n := range names {
		if n == name {
			return &Leaf{id: id, ops: m.tree.open(name), log: m.log}, nil
		}
	}
	return nil, fmt.Errorf("open cgroup %s: %w", id, os.ErrNotExist)
}

// CleanStale removes the leaves of moat processes that are gone (same pid
// and start time no longer running), killing what still runs in them.
// Leaves of live owners and directories moat did not name are left alone.
// Call it once at start.
func (m *Manager) CleanStale() error {
	if m.tree == nil {
		return nil
	}
	names, err := m.tree.leaves()
	if err != nil {
		return fmt.Errorf("clean stale cgroups: %w", err)
	}
	var errs []error
	for _, n := range names {
		o, id, ok := parseLeafName(n)
		if !ok || o.alive() {
			continue
		}
		m.log.Info("removing stale cgroup", "id", id, "owner", o.pid)
		l := &Leaf{id: id, ops: m.tree.open(n), log: m.log}
		if err := l.Delete(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("clean stale cgroups: %w", err)
	}
	return nil
}

// Close removes the parent groups New created, when they are empty (another
// moat process may share them). Leaves are not touched. When this process
// moved itself into a leaf of a delegated group that held only it, the last
// Manager to close gives the group back as it found it (see lent).
func (m *Manager) Close() error {
	m.closeOnce.Do(func() {
		var errs []error
		if m.tree != nil {
			errs = append(errs, m.tree.close())
		}
		if m.loan != nil {
			errs = append(errs, m.loan.release())
		}
		m.closeErr = errors.Join(errs...)
	})
	return m.closeErr
}

package cgroups

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// selfLeafPrefix names the leaf moat moves itself into inside a delegated
// group that holds only itself; the owner in the name lets a later moat
// remove the one a dead process left.
const selfLeafPrefix = "moat-self-"

// rootlessV2 finds a delegated cgroup2 group for an unprivileged process
// with no parent given: its own group when that is already delegated (a
// user@.service subtree, a Delegate=yes unit or scope), otherwise a
// transient Delegate=yes scope from the user's systemd manager (c.bus). It
// returns the tree (nil and the reason when there is none) and fills the
// posture, Source included.
func (m *Manager) rootlessV2(h *Host, c *config) (*v2Tree, string) {
	if h.Unified == "" || h.SelfUnified == "" {
		return nil, "this process's cgroup2 group is not visible (no cgroup2 mount, or outside it)"
	}
	// 1. Already delegated: used as it is, or after moving ourselves into a
	// leaf of our own when the group holds only us.
	if t, _ := m.inDelegated(h, c.parent); t != nil {
		m.posture.Source, m.posture.SourceDetail = SourceDelegated, "this process's cgroup "+strings.TrimPrefix(h.SelfUnified, h.Unified)
		if dir := filepath.Dir(h.SelfUnified); m.ownScope(dir) {
			m.posture.Source, m.posture.SourceDetail = SourceSystemdScope, filepath.Base(dir)+" (transient, Delegate=yes, from the user's systemd manager)"
		}
		return t, ""
	}
	notDelegated := "this process's cgroup " + strings.TrimPrefix(h.SelfUnified, h.Unified) + " is not delegated to uid " + strconv.Itoa(os.Geteuid())
	// 2. Ask systemd.
	if c.bus == "" {
		m.posture.Source = SourceNone
		m.posture.SourceDetail = notDelegated + ", and no systemd user bus was given to ask for a delegated scope " +
			"(WithSystemdBus; the CLI uses $DBUS_SESSION_BUS_ADDRESS or $XDG_RUNTIME_DIR/bus, and found neither)"
		return m.fallbackV2(h, c, m.posture.SourceDetail)
	}
	scope, err := startScope(c.bus, m.owner, m.log)
	if err != nil {
		m.posture.Source = SourceNone
		m.posture.SourceDetail = notDelegated + ", and the user's systemd manager gave no delegated scope: " + err.Error()
		return m.fallbackV2(h, c, m.posture.SourceDetail)
	}
	nh, err := Detect()
	if err != nil || !strings.HasSuffix(nh.SelfUnified, "/"+scope) {
		got := ""
		if nh != nil {
			got = nh.SelfUnified
		}
		m.posture.Source = SourceNone
		m.posture.SourceDetail = fmt.Sprintf("systemd started %s but this process is in %q (%v)", scope, got, err)
		return m.fallbackV2(h, c, m.posture.SourceDetail)
	}
	t, why := m.inDelegated(nh, c.parent)
	if t == nil {
		m.posture.Source = SourceNone
		m.posture.SourceDetail = "the systemd scope " + scope + " is not usable: " + why
		return nil, m.posture.SourceDetail
	}
	m.posture.Source, m.posture.SourceDetail = SourceSystemdScope, scope+" (transient, Delegate=yes, from the user's systemd manager)"
	return t, ""
}

// fallbackV2 is what moat did before it knew of scopes: try below its own
// group, which reports precisely why each limit is degraded.
func (m *Manager) fallbackV2(h *Host, c *config, why string) (*v2Tree, string) {
	t, reason := newV2Tree(h, c.parent, &m.posture)
	if t != nil && (m.posture.Memory.Enforced || m.posture.Pids.Enforced || m.posture.CPU.Enforced) {
		m.posture.Source, m.posture.SourceDetail = SourceDelegated, "this process's cgroup "+strings.TrimPrefix(h.SelfUnified, h.Unified)
		return t, ""
	}
	if t != nil {
		_ = t.close()
	}
	if reason != "" {
		why += " (" + reason + ")"
	}
	return nil, why
}

// inDelegated makes the leaves' parent below this process's own group when
// that group is delegated: writable, and offering (or already enabling for
// its children) memory, pids and cpu. A group that holds this process alone
// cannot enable controllers for children (the no-internal-process rule,
// cgroup-v2.rst), so moat first moves itself into a leaf of its own below
// it, as crun does with its systemd driver, and gives the group back when
// its last Manager closes (lent); a group that holds other processes too is
// not touched.
func (m *Manager) inDelegated(h *Host, parent string) (*v2Tree, string) {
	selfMu.Lock()
	defer selfMu.Unlock()
	group := h.SelfUnified
	moved := filepath.Base(group) == m.selfLeaf()
	if moved {
		// An earlier Manager of this process moved it already: its base
		// is the delegated group above.
		group = filepath.Dir(group)
	}
	if self != nil && group == self.group {
		// h was read before another Manager moved this process (a New
		// made meanwhile, WithHost): the loan, not h, says where it is.
		moved = true
	}
	for _, f := range []string{"", "cgroup.procs", "cgroup.subtree_control"} {
		if unix.Faccessat(unix.AT_FDCWD, filepath.Join(group, f), unix.W_OK, unix.AT_EACCESS) != nil {
			return nil, filepath.Join(group, f) + " is not writable by this user"
		}
	}
	avail, err := fields(group, "cgroup.controllers")
	if err != nil {
		return nil, err.Error()
	}
	for _, c := range v2Wanted {
		if !slices.Contains(avail, c) {
			return nil, fmt.Sprintf("%s offers controllers %v, not %s", group, avail, c)
		}
	}
	on, _ := fields(group, "cgroup.subtree_control")
	procs, _ := fields(group, "cgroup.procs")
	var loan *lent
	switch {
	case moved && self != nil && self.group == group:
		loan = self
	case !moved && len(procs) > 0 && !containsAll(on, v2Wanted):
		if len(procs) != 1 || procs[0] != strconv.Itoa(m.owner.pid) {
			return nil, fmt.Sprintf("%s holds other processes (%v) than this one", group, procs)
		}
		if loan, err = moveSelf(group, m.selfLeaf(), m.owner.pid); err != nil {
			return nil, err.Error()
		}
		m.log.Debug("moved this process into a leaf of its delegated cgroup", "dir", loan.leaf)
	case !moved && len(procs) == 0:
		removeDeadSelfLeaves(group)
	}
	var p Posture
	p.Layout = m.posture.Layout
	t, reason := newV2TreeAt(h, group, parent, &p)
	if loan != nil {
		loan.use(t)
	}
	if t == nil || p.Degraded() {
		if t != nil {
			_ = t.close()
		}
		if loan != nil {
			if err := loan.releaseLocked(); err != nil {
				m.log.Warn("give back the delegated cgroup", "err", err)
			}
		}
		if reason == "" {
			reason = p.Memory.Reason + "; " + p.Pids.Reason + "; " + p.CPU.Reason
		}
		return nil, reason
	}
	m.posture = p
	m.loan = loan
	return t, ""
}

// selfLeaf is the name of the leaf this process moves itself into.
func (m *Manager) selfLeaf() string {
	return selfLeafPrefix + strconv.Itoa(m.owner.pid) + "-" + strconv.FormatUint(m.owner.start, 10)
}

// ownScope reports whether dir is the systemd scope an earlier Manager of
// this process started.
func (m *Manager) ownScope(dir string) bool {
	return filepath.Base(dir) == scopePrefix+strconv.Itoa(m.owner.pid)+"-"+strconv.FormatUint(m.owner.start, 10)+".scope"
}

func containsAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// removeDeadSelfLeaves removes the empty self leaves of moat processes that
// are gone (a non-empty one is busy and stays).
func removeDeadSelfLeaves(dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), selfLeafPrefix)
		if !ok || !e.IsDir() {
			continue
		}
		o, _, ok := parseLeafName(rest + "-x")
		if ok && !o.alive() {
			_ = unix.Rmdir(filepath.Join(dir, e.Name()))
		}
	}
}

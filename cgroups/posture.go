package cgroups

import "errors"

// Layout is the cgroup layout of the host.
type Layout int

const (
	// NoCgroups: no cgroup filesystem is mounted.
	NoCgroups Layout = iota
	// V1: only legacy hierarchies, one per controller (or co-mounted group).
	V1
	// Hybrid: v1 controller hierarchies plus a cgroup2 mount (usually
	// /sys/fs/cgroup/unified) that holds no controllers moat can use.
	Hybrid
	// Unified: cgroup v2 only.
	Unified
)

func (l Layout) String() string {
	switch l {
	case V1:
		return "v1"
	case Hybrid:
		return "hybrid"
	case Unified:
		return "unified"
	}
	return "none"
}

// Limit names one of the limits moat sets.
type Limit int

const (
	Memory Limit = iota
	Pids
	CPU
)

func (l Limit) String() string {
	switch l {
	case Memory:
		return "memory"
	case Pids:
		return "pids"
	case CPU:
		return "cpu"
	}
	return "unknown"
}

// LimitPosture says whether one limit is enforced and, if not, why.
type LimitPosture struct {
	Enforced bool
	// Reason says why the limit is not enforced; on an enforced limit it
	// is empty or names a caveat (v1 without swap accounting).
	Reason string
}

// Posture is what a Manager can enforce on this host, for the provider's
// posture descriptor and for refusing a policy that requires a limit.
type Posture struct {
	Layout Layout
	Memory LimitPosture
	Pids   LimitPosture
	CPU    LimitPosture
	// Parents are the directories leaves are created in, one per hierarchy
	// in use (v1: per controller); empty when none is usable.
	Parents []string
	// Fix says how to obtain a delegated cgroup; set when a limit is degraded.
	Fix string
	// Source says which path gave the cgroup the leaves are created in,
	// and SourceDetail which one (the scope, the group) or, for
	// SourceNone, why there is none.
	Source       Source
	SourceDetail string
}

// Source is how a Manager came by its cgroup.
type Source string

const (
	// SourceSystemdScope: a transient scope with Delegate=yes that the
	// user's systemd manager created for this process (WithSystemdBus).
	SourceSystemdScope Source = "systemd-scope"
	// SourceDelegated: this process's own cgroup was already delegated to
	// it (a user@.service subtree, a Delegate=yes unit or scope).
	SourceDelegated Source = "delegated"
	// SourceParent: the group given with WithParent (moat run --cgroup-parent).
	SourceParent Source = "cgroup-parent"
	// SourceRoot: running as root, which may create cgroups anywhere.
	SourceRoot Source = "root"
	// SourceNone: no usable cgroup; SourceDetail says why.
	SourceNone Source = "none"
)

// Of returns the posture of one limit.
func (p Posture) Of(l Limit) LimitPosture {
	switch l {
	case Memory:
		return p.Memory
	case Pids:
		return p.Pids
	case CPU:
		return p.CPU
	}
	return LimitPosture{Reason: "unknown limit"}
}

// Degraded reports whether any limit is not enforced.
func (p Posture) Degraded() bool {
	return !p.Memory.Enforced || !p.Pids.Enforced || !p.CPU.Enforced
}

// Require returns a *RequiredError for each of the limits that is not
// enforced (joined), or nil.
func (p Posture) Require(limits ...Limit) error {
	var errs []error
	for _, l := range limits {
		if lp := p.Of(l); !lp.Enforced {
			errs = append(errs, &RequiredError{Limit: l, Reason: lp.Reason, Fix: p.Fix})
		}
	}
	return errors.Join(errs...)
}

// fixHint is the delegation advice shown when a limit is degraded; on
// cgroup v2 fixHintV2, which starts with what moat does itself on systemd.
const fixHint = "run moat as root, or in a delegated cgroup: a subtree an administrator created and chowned to this user " +
	"(on cgroup v1: each controller directory and its control files), passed with WithParent (moat run --cgroup-parent)"

const fixHintV2 = "let moat reach the user's systemd manager, which then gives it a delegated scope " +
	"(a login session, or `loginctl enable-linger` for jobs without one; the bus at $XDG_RUNTIME_DIR/bus; library: WithSystemdBus); " +
	"otherwise run moat as root, or in a systemd --user scope, slice or service with Delegate=yes, " +
	"or in a subtree an administrator created and chowned to this user, passed with WithParent (moat run --cgroup-parent)"

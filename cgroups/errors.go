package cgroups

import (
	"errors"
	"fmt"
)

// ErrNoDelegation means this process may not create cgroups here: it is not
// root and no subtree was delegated to it (or the one given is not writable).
var ErrNoDelegation = errors.New("cgroups: no delegated cgroup")

// ErrUnsupported is returned on systems without cgroups; errors.Is also
// matches errors.ErrUnsupported.
var ErrUnsupported = fmt.Errorf("cgroups: %w", errors.ErrUnsupported)

// DelegationError is returned by Create when no limit can be enforced. It
// matches ErrNoDelegation with errors.Is.
type DelegationError struct {
	Reason string // what was tried and why it failed
	Fix    string // how an administrator or user can delegate a subtree
}

func (e *DelegationError) Error() string {
	return fmt.Sprintf("cgroups: no delegated cgroup: %s; fix: %s", e.Reason, e.Fix)
}

// Unwrap returns ErrNoDelegation.
func (e *DelegationError) Unwrap() error { return ErrNoDelegation }

// RequiredError is returned by Posture.Require for a limit a policy marks as
// required that this host cannot enforce; the provider refuses to run.
type RequiredError struct {
	Limit  Limit
	Reason string
	Fix    string
}

func (e *RequiredError) Error() string {
	s := fmt.Sprintf("cgroups: required %s limit cannot be enforced: %s", e.Limit, e.Reason)
	if e.Fix != "" {
		s += "; fix: " + e.Fix
	}
	return s
}

// Unwrap returns ErrNoDelegation: every unenforceable limit comes down to
// lacking a writable cgroup with that controller.
func (e *RequiredError) Unwrap() error { return ErrNoDelegation }

// LimitsError reports resources that cannot be turned into cgroup limits.
type LimitsError struct {
	Field  string // e.g. "memory.limit"
	Reason string
}

func (e *LimitsError) Error() string {
	return fmt.Sprintf("cgroups: invalid resources %s: %s", e.Field, e.Reason)
}

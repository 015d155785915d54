package cgroups

import (
	"errors"
	"fmt"
)

// ErrNoFreezer is Freeze's and Thaw's error for a leaf that has no freezer:
// v1 without a mounted freezer hierarchy, v2 before Linux 5.2 (no
// cgroup.freeze).
var ErrNoFreezer = errors.New("cgroups: the leaf has no freezer (cgroup v1: mount the freezer hierarchy; cgroup v2: Linux 5.2 or later)")

// ControllerError is Update's error for a limit whose controller the leaf
// does not have on this host: the limit cannot be enforced.
type ControllerError struct {
	Field      string // the resource asked, e.g. "memory.limit"
	Controller string // what the leaf lacks, e.g. "memory"
	Why        string // why, when more is known than that it lacks it
}

func (e *ControllerError) Error() string {
	if e.Why != "" {
		return fmt.Sprintf("cgroups: %s cannot be enforced: %s", e.Field, e.Why)
	}
	return fmt.Sprintf("cgroups: %s cannot be enforced: the leaf has no %s controller on this host", e.Field, e.Controller)
}

// Unwrap returns ErrNoDelegation, as for every limit this host cannot
// enforce (RequiredError).
func (e *ControllerError) Unwrap() error { return ErrNoDelegation }

// Settings are a leaf's limits as the kernel holds them now. Zero (or -1
// for MemorySwap) means no limit.
type Settings struct {
	Memory     int64 // bytes
	MemorySwap int64 // memory+swap bytes (v1 memsw; v2 memory.max plus memory.swap.max); -1 unlimited, 0 when not accounted
	Pids       int64 // tasks
	CPUQuota   int64 // µs per period
	CPUPeriod  uint64
	CPUShares  uint64 // v1 cpu.shares; v2 cpu.weight mapped back (shareOfWeight)
}

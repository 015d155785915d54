package cgroups

import (
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// defaultCPUPeriod is the CFS period used when a quota comes without one
// (the kernel default, sched-bwc.rst).
const defaultCPUPeriod = 100000

// limits is the subset of OCI resources moat enforces. Zero means "no limit"
// for every field.
type limits struct {
	memory    int64  // bytes
	memSwap   int64  // memory+swap bytes; -1 unlimited; equal to memory turns swap off
	pids      int64  // tasks
	cpuQuota  int64  // µs per period
	cpuPeriod uint64 // µs
}

// want reports which limits are asked for.
func (l limits) want(k Limit) bool {
	switch k {
	case Memory:
		return l.memory > 0
	case Pids:
		return l.pids > 0
	case CPU:
		return l.cpuQuota > 0
	}
	return false
}

// limitsFrom maps OCI resources to limits. Swap is off unless the resources
// ask for more memory+swap than memory: a limit that can spill into swap is
// not a limit on what the sandbox can hold. -1 means unlimited, as in OCI.
func limitsFrom(res *specs.LinuxResources) (limits, error) {
	var l limits
	if res == nil {
		return l, nil
	}
	if m := res.Memory; m != nil && m.Limit != nil && *m.Limit != -1 {
		if *m.Limit <= 0 {
			return l, &LimitsError{Field: "memory.limit", Reason: "must be positive or -1"}
		}
		l.memory = *m.Limit
		l.memSwap = l.memory
		if m.Swap != nil {
			switch {
			case *m.Swap == -1:
				l.memSwap = -1
			case *m.Swap < l.memory && *m.Swap != 0:
				return l, &LimitsError{Field: "memory.swap", Reason: "memory+swap must not be below memory.limit"}
			case *m.Swap > l.memory:
				l.memSwap = *m.Swap
			}
		}
	}
	if p := res.Pids; p != nil && p.Limit != nil && *p.Limit > 0 {
		l.pids = *p.Limit
	}
	if c := res.CPU; c != nil && c.Quota != nil && *c.Quota > 0 {
		l.cpuQuota = *c.Quota
		l.cpuPeriod = defaultCPUPeriod
		if c.Period != nil && *c.Period != 0 {
			l.cpuPeriod = *c.Period
		}
		// sched-bwc.rst: the period is 1 ms to 1 s, the quota at least 1 ms.
		if l.cpuPeriod < 1000 || l.cpuPeriod > 1000000 {
			return l, &LimitsError{Field: "cpu.period", Reason: "must be between 1000 and 1000000 µs"}
		}
		if l.cpuQuota < 1000 {
			return l, &LimitsError{Field: "cpu.quota", Reason: "must be at least 1000 µs"}
		}
	}
	return l, nil
}

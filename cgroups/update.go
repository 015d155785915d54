package cgroups

import (
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// update is a change of a live leaf's limits (Leaf.Update): nil leaves a
// limit as it is, -1 lifts it.
type update struct {
	memory    *int64 // bytes
	memSwap   *int64 // memory+swap bytes
	pids      *int64
	cpuQuota  *int64 // µs per period
	cpuPeriod *uint64
	cpuShares *uint64
	extras    extras // written as at CreatePath (shares excepted: cpuShares)
}

func (u update) empty() bool {
	return u.memory == nil && u.memSwap == nil && u.pids == nil && u.cpuQuota == nil && u.cpuPeriod == nil && u.cpuShares == nil && u.extras.empty()
}

// updateRefused is the reason given for a resource moat does not enforce.
const updateRefused = "moat enforces only memory (limit, swap, reservation, swappiness), pids (limit), cpu (quota, period, shares, cpus, mems), blockIO and hugepageLimits; leave it unset or 0"

// updateFrom reads res with runc update's meaning: 0 and nil keep a
// limit, -1 lifts it. Swap follows Create: a new memory limit without a
// swap of its own turns swap off (memory+swap equal to memory).
func updateFrom(res *specs.LinuxResources) (update, error) {
	var u update
	if res == nil {
		return u, nil
	}
	if err := refuseUnenforced(res); err != nil {
		return u, err
	}
	var err error
	if u.extras, err = extrasFrom(res); err != nil {
		return u, err
	}
	u.extras.shares = 0
	if m := res.Memory; m != nil {
		if m.Limit != nil && *m.Limit != 0 {
			if *m.Limit < -1 {
				return u, &LimitsError{Field: "memory.limit", Reason: "must be positive, -1 (no limit) or 0 (unchanged)"}
			}
			u.memory = m.Limit
		}
		swap := m.Swap
		if swap != nil && *swap == 0 {
			swap = nil
		}
		switch {
		case swap != nil && *swap < -1:
			return u, &LimitsError{Field: "memory.swap", Reason: "must be positive, -1 (no limit) or 0 (unchanged)"}
		case swap != nil && *swap != -1 && u.memory != nil && (*u.memory == -1 || *swap < *u.memory):
			return u, &LimitsError{Field: "memory.swap", Reason: "memory+swap must not be below memory.limit"}
		case swap != nil:
			u.memSwap = swap
		case u.memory != nil:
			u.memSwap = u.memory
		}
	}
	if p := res.Pids; p != nil && p.Limit != nil && *p.Limit != 0 {
		v := max(*p.Limit, -1)
		u.pids = &v
	}
	if c := res.CPU; c != nil {
		if c.Quota != nil && *c.Quota != 0 {
			if *c.Quota < 1000 && *c.Quota != -1 {
				return u, &LimitsError{Field: "cpu.quota", Reason: "must be at least 1000 µs, -1 (no limit) or 0 (unchanged)"}
			}
			u.cpuQuota = c.Quota
		}
		if c.Period != nil && *c.Period != 0 {
			// sched-bwc.rst: the period is 1 ms to 1 s.
			if *c.Period < 1000 || *c.Period > 1000000 {
				return u, &LimitsError{Field: "cpu.period", Reason: "must be between 1000 and 1000000 µs, or 0 (unchanged)"}
			}
			u.cpuPeriod = c.Period
		}
		if c.Shares != nil && *c.Shares != 0 {
			// The kernel's range for cpu.shares (MIN_SHARES, MAX_SHARES).
			if *c.Shares < 2 || *c.Shares > 262144 {
				return u, &LimitsError{Field: "cpu.shares", Reason: "must be between 2 and 262144, or 0 (unchanged)"}
			}
			u.cpuShares = c.Shares
		}
	}
	return u, nil
}

// refuseUnenforced names the first resource set that moat does not
// enforce. Zero values are unset, as runc update reads them (its own
// command line fills every field it knows with 0). Kernel memory limits
// pass and are not written, as at create (extrasFrom).
func refuseUnenforced(res *specs.LinuxResources) error {
	set := func(p *int64) bool { return p != nil && *p != 0 }
	if m := res.Memory; m != nil {
		switch {
		case m.DisableOOMKiller != nil && *m.DisableOOMKiller:
			return &LimitsError{Field: "memory.disableOOMKiller", Reason: "a sandbox over its memory limit is OOM-killed and reported as such"}
		case m.CheckBeforeUpdate != nil && *m.CheckBeforeUpdate:
			return &LimitsError{Field: "memory.checkBeforeUpdate", Reason: updateRefused}
		}
	}
	if c := res.CPU; c != nil {
		switch {
		case set(c.RealtimeRuntime):
			return &LimitsError{Field: "cpu.realtimeRuntime", Reason: updateRefused}
		case c.RealtimePeriod != nil && *c.RealtimePeriod != 0:
			return &LimitsError{Field: "cpu.realtimePeriod", Reason: updateRefused}
		case c.Burst != nil && *c.Burst != 0:
			return &LimitsError{Field: "cpu.burst", Reason: updateRefused}
		case set(c.Idle):
			return &LimitsError{Field: "cpu.idle", Reason: updateRefused}
		}
	}
	switch {
	case res.Network != nil && (res.Network.ClassID != nil || len(res.Network.Priorities) > 0):
		return &LimitsError{Field: "network", Reason: updateRefused}
	case len(res.Rdma) > 0:
		return &LimitsError{Field: "rdma", Reason: updateRefused}
	case len(res.Unified) > 0:
		return &LimitsError{Field: "unified", Reason: updateRefused}
	}
	return nil
}

// weightOfShares maps cpu.shares (2..262144) to cgroup v2's cpu.weight
// (1..10000) as runc and crun do (the linear map of runc's
// cgroups.ConvertCPUSharesToCgroupV2Value before 1.3), so a value read
// back agrees with theirs.
func weightOfShares(shares uint64) uint64 {
	return 1 + ((shares-2)*9999)/262142
}

// shareOfWeight is weightOfShares's inverse: the least shares that map to
// weight.
func shareOfWeight(weight uint64) uint64 {
	if weight == 0 {
		return 0
	}
	return 2 + ((weight-1)*262142+9998)/9999
}

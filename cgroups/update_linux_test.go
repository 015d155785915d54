package cgroups

import (
	"errors"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// TestUpdateFromReadsRuncMeaning: 0 keeps a limit, -1 lifts it, a new
// memory limit without swap turns swap off, and out-of-range values are
// a *LimitsError naming the field.
func TestUpdateFromReadsRuncMeaning(t *testing.T) {
	u, err := updateFrom(&specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: i64(0), Swap: i64(0)},
		Pids: &specs.LinuxPids{Limit: i64(0)}, CPU: &specs.LinuxCPU{Quota: i64(0), Period: u64(0), Shares: u64(0)}})
	if err != nil || !u.empty() {
		t.Errorf("zeros: %+v, %v; want nothing to change", u, err)
	}
	u, err = updateFrom(&specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: i64(1 << 20)}, Pids: &specs.LinuxPids{Limit: i64(-1)}})
	if err != nil || *u.memory != 1<<20 || *u.memSwap != 1<<20 || *u.pids != -1 {
		t.Errorf("memory alone and pids -1: %+v, %v", u, err)
	}
	u, err = updateFrom(&specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: i64(1 << 20), Swap: i64(-1)}})
	if err != nil || *u.memSwap != -1 {
		t.Errorf("swap -1: %+v, %v", u, err)
	}
	for field, res := range map[string]*specs.LinuxResources{
		"memory.limit": {Memory: &specs.LinuxMemory{Limit: i64(-2)}},
		"memory.swap":  {Memory: &specs.LinuxMemory{Limit: i64(-1), Swap: i64(1 << 20)}},
		"cpu.quota":    {CPU: &specs.LinuxCPU{Quota: i64(999)}},
		"cpu.period":   {CPU: &specs.LinuxCPU{Period: u64(2000000)}},
		"cpu.shares":   {CPU: &specs.LinuxCPU{Shares: u64(300000)}},
		"network":      {Network: &specs.LinuxNetwork{ClassID: new(uint32)}},
		"rdma":         {Rdma: map[string]specs.LinuxRdma{"mlx": {}}},
	} {
		var le *LimitsError
		if _, err := updateFrom(res); !errors.As(err, &le) || le.Field != field {
			t.Errorf("%s: %v, want a LimitsError naming it", field, err)
		}
	}
}

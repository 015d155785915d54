package cgroups

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/moat-sandbox/moat/conformance/testenv"
)

func TestFreezeStopsAndThawResumes(t *testing.T)   { checkFreeze(t, rootManager(t)) }
func TestV2FreezeStopsAndThawResumes(t *testing.T) { checkFreeze(t, v2RootManager(t)) }

// TestV2FreezeOnHybrid runs the v2 freezer on a hybrid host's cgroup2
// mount, which has cgroup.freeze though it has no controllers.
func TestV2FreezeOnHybrid(t *testing.T)           { checkFreeze(t, hybridUnified(t)) }
func TestV2KillFrozenOnHybrid(t *testing.T)       { checkKillFrozen(t, hybridUnified(t)) }
func TestKillEndsAFrozenLeaf(t *testing.T)        { checkKillFrozen(t, rootManager(t)) }
func TestV2KillEndsAFrozenLeaf(t *testing.T)      { checkKillFrozen(t, v2RootManager(t)) }
func TestUpdateChangesLimits(t *testing.T)        { checkUpdate(t, rootManager(t)) }
func TestV2UpdateChangesLimits(t *testing.T)      { checkUpdate(t, v2RootManager(t)) }
func TestUpdateRefusesWritesNothing(t *testing.T) { checkUpdateRefused(t, rootManager(t)) }
func TestV2UpdateRefusesWritesNothing(t *testing.T) {
	checkUpdateRefused(t, v2RootManager(t))
}

// cpuTicks is a process's user+system CPU time in clock ticks
// (proc_pid_stat(5) fields 14 and 15).
func cpuTicks(t *testing.T, pid int) uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	u, _ := strconv.ParseUint(f[11], 10, 64)
	s, _ := strconv.ParseUint(f[12], 10, 64)
	return u + s
}

// advances waits (a generous while) for pid's CPU time to pass from.
func advances(t *testing.T, pid int, from uint64) bool {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cpuTicks(t, pid) > from {
			return true
		}
	}
	return false
}

// checkFreeze: a spinning process frozen by Freeze gets no CPU at all
// however long it is left (so the check waits without a tight bound),
// is listed by Pids, and spins again after Thaw.
func checkFreeze(t *testing.T, m *Manager) {
	leaf, err := m.Create("freeze", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { leaf.Delete() })
	c := startIn(t, leaf, helper(t, "spin", "60s"))
	pid := c.cmd.Process.Pid
	pids, err := leaf.Pids()
	if err != nil || !slices.Equal(pids, []int{pid}) {
		t.Fatalf("Pids = %v, %v; want [%d]", pids, err, pid)
	}
	if !advances(t, pid, cpuTicks(t, pid)) {
		t.Fatal("the spinner does not spin before the freeze")
	}
	if err := leaf.Freeze(); err != nil {
		t.Fatal(err)
	}
	if f, err := leaf.Frozen(); err != nil || !f {
		t.Fatalf("Frozen after Freeze = %v, %v", f, err)
	}
	before := cpuTicks(t, pid)
	time.Sleep(500 * time.Millisecond)
	if after := cpuTicks(t, pid); after != before {
		t.Fatalf("a frozen spinner ran: %d ticks, then %d", before, after)
	}
	if err := leaf.Thaw(); err != nil {
		t.Fatal(err)
	}
	if f, err := leaf.Frozen(); err != nil || f {
		t.Fatalf("Frozen after Thaw = %v, %v", f, err)
	}
	if !advances(t, pid, before) {
		t.Fatal("the thawed spinner does not run")
	}
}

// checkKillFrozen: Kill empties a frozen leaf (SIGKILL to a frozen v1 task
// takes effect only once thawed; v2's cgroup.kill reaches frozen tasks).
func checkKillFrozen(t *testing.T, m *Manager) {
	leaf, err := m.Create("killfrozen", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { leaf.Delete() })
	c := startIn(t, leaf, helper(t, "sleep", "60s"))
	if err := leaf.Freeze(); err != nil {
		t.Fatal(err)
	}
	if err := leaf.Kill(); err != nil {
		t.Fatal(err)
	}
	if sig := killedBy(c.cmd.Wait()); sig != syscall.SIGKILL {
		t.Errorf("the frozen child ended with %v, want SIGKILL", sig)
	}
}

func i64(v int64) *int64   { return &v }
func u64(v uint64) *uint64 { return &v }
func u16(v uint16) *uint16 { return &v }
func bptr(v bool) *bool    { return &v }

// checkUpdate: Update changes each of moat's limits on a live leaf, in
// both directions (memory grows past its memory+swap and shrinks under
// it, which the kernel orders on v1), keeps what is 0, and -1 lifts.
func checkUpdate(t *testing.T, m *Manager) {
	leaf, err := m.Create("update", limitsOf(64<<20, 20, 0.5))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { leaf.Delete() })
	startIn(t, leaf, helper(t, "sleep", "60s"))
	swapped := func(s Settings) bool { return s.MemorySwap != 0 } // swap accounted
	before, err := leaf.Settings()
	if err != nil {
		t.Fatal(err)
	}
	if before.Memory != 64<<20 || before.Pids != 20 || before.CPUQuota != 50000 || before.CPUPeriod != 100000 {
		t.Fatalf("Settings after Create = %+v", before)
	}
	if err := leaf.Update(&specs.LinuxResources{
		Memory: &specs.LinuxMemory{Limit: i64(256 << 20)},
		Pids:   &specs.LinuxPids{Limit: i64(30)},
		CPU:    &specs.LinuxCPU{Quota: i64(25000), Period: u64(50000), Shares: u64(512)},
	}); err != nil {
		t.Fatal(err)
	}
	s, err := leaf.Settings()
	if err != nil {
		t.Fatal(err)
	}
	want := Settings{Memory: 256 << 20, Pids: 30, CPUQuota: 25000, CPUPeriod: 50000, CPUShares: 512}
	if swapped(before) {
		want.MemorySwap = 256 << 20 // swap stays off
	}
	if _, v2 := leaf.ops.(*v2Leaf); v2 {
		want.CPUShares = shareOfWeight(weightOfShares(512))
	}
	if s != want {
		t.Fatalf("after the update Settings = %+v, want %+v", s, want)
	}
	// Memory down under memory+swap; zeros keep the rest.
	if err := leaf.Update(&specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: i64(32 << 20), Swap: i64(0)},
		Pids: &specs.LinuxPids{Limit: i64(0)}, CPU: &specs.LinuxCPU{Quota: i64(0), Period: u64(0), Shares: u64(0)}}); err != nil {
		t.Fatal(err)
	}
	if s, _ = leaf.Settings(); s.Memory != 32<<20 || s.Pids != 30 || s.CPUQuota != 25000 || s.CPUPeriod != 50000 {
		t.Fatalf("after a memory-only update Settings = %+v", s)
	}
	if swapped(before) && s.MemorySwap != 32<<20 {
		t.Errorf("memory+swap after the shrink = %d, want %d", s.MemorySwap, 32<<20)
	}
	// -1 lifts every limit.
	if err := leaf.Update(&specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: i64(-1)},
		Pids: &specs.LinuxPids{Limit: i64(-1)}, CPU: &specs.LinuxCPU{Quota: i64(-1)}}); err != nil {
		t.Fatal(err)
	}
	if s, _ = leaf.Settings(); s.Memory != 0 || s.Pids != 0 || s.CPUQuota != 0 {
		t.Fatalf("after -1 Settings = %+v, want no limits", s)
	}
}

// checkUpdateRefused: resources moat does not enforce, or out of range,
// are a *LimitsError naming the field, and nothing is written (not even
// the valid limits given beside them).
func checkUpdateRefused(t *testing.T, m *Manager) {
	leaf, err := m.Create("refused", limitsOf(64<<20, 20, 0.5))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { leaf.Delete() })
	before, err := leaf.Settings()
	if err != nil {
		t.Fatal(err)
	}
	pids := &specs.LinuxPids{Limit: i64(99)}
	for field, res := range map[string]*specs.LinuxResources{
		"memory.reservation":      {Pids: pids, Memory: &specs.LinuxMemory{Reservation: i64(1 << 20)}},
		"memory.swappiness":       {Pids: pids, Memory: &specs.LinuxMemory{Swappiness: u64(60)}},
		"memory.disableOOMKiller": {Pids: pids, Memory: &specs.LinuxMemory{DisableOOMKiller: bptr(true)}},
		"memory.swap":             {Pids: pids, Memory: &specs.LinuxMemory{Limit: i64(64 << 20), Swap: i64(1 << 20)}},
		"memory.limit":            {Pids: pids, Memory: &specs.LinuxMemory{Limit: i64(-5)}},
		"cpu.cpus and mems":       {Pids: pids, CPU: &specs.LinuxCPU{Cpus: "0"}},
		"cpu.quota":               {Pids: pids, CPU: &specs.LinuxCPU{Quota: i64(10)}},
		"cpu.period":              {Pids: pids, CPU: &specs.LinuxCPU{Period: u64(10)}},
		"cpu.shares":              {Pids: pids, CPU: &specs.LinuxCPU{Shares: u64(1)}},
		"blockIO":                 {Pids: pids, BlockIO: &specs.LinuxBlockIO{Weight: u16(100)}},
		"hugepageLimits":          {Pids: pids, HugepageLimits: []specs.LinuxHugepageLimit{{Pagesize: "2MB", Limit: 1}}},
		"unified":                 {Pids: pids, Unified: map[string]string{"memory.high": "1"}},
	} {
		err := leaf.Update(res)
		var le *LimitsError
		if !errors.As(err, &le) || le.Field != field {
			t.Errorf("Update with %s: %v, want a LimitsError naming it", field, err)
		}
	}
	if after, _ := leaf.Settings(); after != before {
		t.Errorf("a refused update changed the limits: %+v, then %+v", before, after)
	}
	// The zeros runc update fills in for fields it was not given are not
	// refusals.
	if err := leaf.Update(&specs.LinuxResources{Memory: &specs.LinuxMemory{Reservation: i64(0), Kernel: i64(0), KernelTCP: i64(0)},
		CPU: &specs.LinuxCPU{RealtimeRuntime: i64(0), RealtimePeriod: u64(0)}, BlockIO: &specs.LinuxBlockIO{Weight: u16(0)}}); err != nil {
		t.Errorf("an update of zeros: %v", err)
	}
}

// TestSharesWeightAgree: the shares to weight map is runc's at its ends
// and round-trips within a share.
func TestSharesWeightAgree(t *testing.T) {
	if weightOfShares(2) != 1 || weightOfShares(262144) != 10000 || weightOfShares(1024) != 39 {
		t.Fatalf("weights %d %d %d, want 1 10000 39", weightOfShares(2), weightOfShares(262144), weightOfShares(1024))
	}
	for _, s := range []uint64{2, 512, 1024, 262144} {
		if back := shareOfWeight(weightOfShares(s)); back > s || weightOfShares(back) != weightOfShares(s) {
			t.Errorf("shares %d -> weight %d -> shares %d", s, weightOfShares(s), back)
		}
	}
}

// hybridUnified is a Manager as root on a hybrid host's cgroup2 mount.
func hybridUnified(t *testing.T) *Manager {
	t.Helper()
	testenv.RequireRoot(t)
	if h := mustDetect(t); h.Layout != Hybrid || h.Unified == "" {
		t.Skipf("cgroup layout is %v: TestV2FreezeStopsAndThawResumes covers a v2 host", h.Layout)
	}
	m := newManager(t, "/"+testParent("v2hy"), withUnified())
	if _, ok := m.tree.(*v2Tree); !ok {
		t.Fatalf("no v2 tree on the hybrid host's cgroup2 mount: %+v", m.Posture())
	}
	return m
}

// TestV2UpdateWithoutControllerOnHybrid: a limit whose controller the leaf
// lacks (the hybrid host's cgroup2 mount has none) is a *ControllerError
// naming both, which is ErrNoDelegation, and not a silent success.
func TestV2UpdateWithoutControllerOnHybrid(t *testing.T) {
	m := hybridUnified(t)
	leaf, err := m.Create("noctl", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { leaf.Delete() })
	for field, res := range map[string]*specs.LinuxResources{
		"memory.limit": {Memory: &specs.LinuxMemory{Limit: i64(64 << 20)}},
		"pids.limit":   {Pids: &specs.LinuxPids{Limit: i64(10)}},
		"cpu.quota":    {CPU: &specs.LinuxCPU{Quota: i64(50000)}},
	} {
		err := leaf.Update(res)
		var ce *ControllerError
		if !errors.As(err, &ce) || ce.Field != field || !errors.Is(err, ErrNoDelegation) {
			t.Errorf("Update %s without its controller: %v", field, err)
		}
	}
}

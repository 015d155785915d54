package oci

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// TestTranslateKeepsResources: the resources runc's cgroupfs driver
// writes beyond memory, pids and cpu quota (cpuset cpus and mems, the
// memory reservation and swappiness, blockIO, hugepageLimits) reach the
// plan for moat's cgroup unchanged; kernel memory limits are dropped
// with a note, as runc ignores them; network stays refused (translate's
// refusal table).
func TestTranslateKeepsResources(t *testing.T) {
	s := podmanSpec()
	w := uint16(500)
	n := func(v int64) *int64 { return &v }
	u := func(v uint64) *uint64 { return &v }
	s.Linux.Resources = &specs.LinuxResources{
		Memory: &specs.LinuxMemory{Limit: n(64 << 20), Reservation: n(32 << 20), Swappiness: u(10), Kernel: n(1 << 20), KernelTCP: n(1 << 20)},
		CPU:    &specs.LinuxCPU{Shares: u(512), Cpus: "0-1", Mems: "0"},
		BlockIO: &specs.LinuxBlockIO{Weight: &w, ThrottleReadBpsDevice: []specs.LinuxThrottleDevice{
			{LinuxBlockIODevice: specs.LinuxBlockIODevice{Major: 8, Minor: 0}, Rate: 1 << 20}}},
		HugepageLimits: []specs.LinuxHugepageLimit{{Pagesize: "2MB", Limit: 1 << 22}},
	}
	p, err := Translate(s, "/b", true)
	if err != nil {
		t.Fatal(err)
	}
	r := p.Resources
	if r == nil || r.Memory == nil || r.CPU == nil {
		t.Fatalf("resources = %+v", r)
	}
	if *r.Memory.Reservation != 32<<20 || *r.Memory.Swappiness != 10 || r.Memory.Kernel != nil || r.Memory.KernelTCP != nil {
		t.Errorf("memory = %+v, want the reservation and swappiness, no kernel limits", r.Memory)
	}
	if r.CPU.Cpus != "0-1" || r.CPU.Mems != "0" || *r.CPU.Shares != 512 {
		t.Errorf("cpu = %+v", r.CPU)
	}
	if !reflect.DeepEqual(r.BlockIO, s.Linux.Resources.BlockIO) || !reflect.DeepEqual(r.HugepageLimits, s.Linux.Resources.HugepageLimits) {
		t.Errorf("blockIO %+v, hugepageLimits %+v: want the config's", r.BlockIO, r.HugepageLimits)
	}
	if !slices.ContainsFunc(p.Notes, func(n string) bool { return strings.Contains(n, "kernelTCP") }) {
		t.Errorf("no note on the kernel memory limits: %q", p.Notes)
	}
}

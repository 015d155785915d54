package cgroups

import (
	"errors"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func itoa(i int) string { return strconv.Itoa(i) }

const hybridMountinfo = `25 31 0:23 / /sys rw,nosuid shared:7 - sysfs sysfs rw
33 25 0:28 / /sys/fs/cgroup rw shared:9 - tmpfs tmpfs rw,mode=755
34 33 0:29 / /sys/fs/cgroup/unified rw,relatime shared:10 - cgroup2 cgroup2 rw
35 33 0:30 / /sys/fs/cgroup/systemd rw shared:11 - cgroup cgroup rw,xattr,name=systemd
36 33 0:31 / /sys/fs/cgroup/cpu,cpuacct rw shared:12 - cgroup cgroup rw,cpu,cpuacct
37 33 0:32 / /sys/fs/cgroup/memory rw shared:13 - cgroup cgroup rw,memory
38 33 0:33 / /sys/fs/cgroup/pids rw shared:14 - cgroup cgroup rw,pids
`

const hybridCgroup = `12:pids:/user.slice
4:memory:/process_api/abc
3:cpu,cpuacct:/
1:name=systemd:/user.slice/session-1.scope
0::/user.slice/session-1.scope
`

func TestDetectHybrid(t *testing.T) {
	h, err := detectFrom(strings.NewReader(hybridMountinfo), strings.NewReader(hybridCgroup))
	if err != nil {
		t.Fatal(err)
	}
	want := &Host{
		Layout:      Hybrid,
		Unified:     "/sys/fs/cgroup/unified",
		SelfUnified: "/sys/fs/cgroup/unified/user.slice/session-1.scope",
		V1: map[string]string{"cpu": "/sys/fs/cgroup/cpu,cpuacct", "cpuacct": "/sys/fs/cgroup/cpu,cpuacct",
			"memory": "/sys/fs/cgroup/memory", "pids": "/sys/fs/cgroup/pids"},
		Self: map[string]string{"cpu": "/sys/fs/cgroup/cpu,cpuacct", "cpuacct": "/sys/fs/cgroup/cpu,cpuacct",
			"memory": "/sys/fs/cgroup/memory/process_api/abc", "pids": "/sys/fs/cgroup/pids/user.slice"},
	}
	if !reflect.DeepEqual(h, want) {
		t.Errorf("detectFrom =\n%+v\nwant\n%+v", h, want)
	}
}

func TestDetectUnifiedNamespaced(t *testing.T) {
	// Inside a cgroup namespace whose root is /ctr, shown mounted from /ctr.
	mi := `40 33 0:29 /ctr /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate
41 33 0:29 /ctr/a\040b /mnt/x\040y rw - cgroup2 cgroup2 rw
`
	h, err := detectFrom(strings.NewReader(mi), strings.NewReader("0::/ctr/app\n"))
	if err != nil {
		t.Fatal(err)
	}
	if h.Layout != Unified || h.Unified != "/sys/fs/cgroup" || h.SelfUnified != "/sys/fs/cgroup/app" {
		t.Errorf("detectFrom = %+v", h)
	}
	if got := unescape(`/mnt/x\040y`); got != "/mnt/x y" {
		t.Errorf("unescape = %q", got)
	}
	h, err = detectFrom(strings.NewReader(mi), strings.NewReader("0::/other\n"))
	if err != nil || h.SelfUnified != "" {
		t.Errorf("a cgroup outside the mount gave %q, %v; want none", h.SelfUnified, err)
	}
}

func TestDetectThisHost(t *testing.T) {
	h, err := Detect()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/sys/fs/cgroup"); err == nil && h.Layout == NoCgroups {
		t.Errorf("Detect found no cgroups on a host with /sys/fs/cgroup: %+v", h)
	}
	for c, d := range h.Self {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("own %s cgroup %s: %v", c, d, err)
		}
	}
}

func TestLimitsFrom(t *testing.T) {
	i64 := func(v int64) *int64 { return &v }
	u64 := func(v uint64) *uint64 { return &v }
	cases := []struct {
		name string
		res  *specs.LinuxResources
		want limits
		bad  string
	}{
		{name: "nil"},
		{name: "memory swap off", res: &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: i64(1 << 26)}},
			want: limits{memory: 1 << 26, memSwap: 1 << 26}},
		{name: "memory with swap", res: &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: i64(100), Swap: i64(300)}},
			want: limits{memory: 100, memSwap: 300}},
		{name: "unlimited swap", res: &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: i64(100), Swap: i64(-1)}},
			want: limits{memory: 100, memSwap: -1}},
		{name: "unlimited memory", res: &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: i64(-1)}}},
		{name: "zero memory", res: &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: i64(0)}}, bad: "memory.limit"},
		{name: "swap below", res: &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: i64(100), Swap: i64(50)}}, bad: "memory.swap"},
		{name: "pids", res: &specs.LinuxResources{Pids: &specs.LinuxPids{Limit: i64(20)}}, want: limits{pids: 20}},
		{name: "cpu default period", res: &specs.LinuxResources{CPU: &specs.LinuxCPU{Quota: i64(20000)}},
			want: limits{cpuQuota: 20000, cpuPeriod: 100000}},
		{name: "cpu period", res: &specs.LinuxResources{CPU: &specs.LinuxCPU{Quota: i64(5000), Period: u64(10000)}},
			want: limits{cpuQuota: 5000, cpuPeriod: 10000}},
		{name: "cpu tiny quota", res: &specs.LinuxResources{CPU: &specs.LinuxCPU{Quota: i64(10)}}, bad: "cpu.quota"},
		{name: "cpu long period", res: &specs.LinuxResources{CPU: &specs.LinuxCPU{Quota: i64(5000), Period: u64(5e6)}}, bad: "cpu.period"},
	}
	for _, c := range cases {
		got, err := limitsFrom(c.res)
		var le *LimitsError
		switch {
		case c.bad != "" && (!errors.As(err, &le) || le.Field != c.bad):
			t.Errorf("%s: err = %v, want a LimitsError on %s", c.name, err, c.bad)
		case c.bad == "" && (err != nil || got != c.want):
			t.Errorf("%s: = %+v, %v; want %+v", c.name, got, err, c.want)
		}
	}
}

func TestLeafNames(t *testing.T) {
	o := owner{pid: 42, start: 777}
	name := o.leafName("0190a3c4-7b1e-7cc0-8d4e-1f2a3b4c5d6e")
	got, id, ok := parseLeafName(name)
	if !ok || got != o || id != "0190a3c4-7b1e-7cc0-8d4e-1f2a3b4c5d6e" {
		t.Errorf("parseLeafName(%q) = %v %q %v", name, got, id, ok)
	}
	for _, n := range []string{"moat", "x-1-a", "1-x-a", "1-2-", "1-2-a/b", "-1-2-a", "0-2-a", "1-2-.hidden"} {
		if _, _, ok := parseLeafName(n); ok {
			t.Errorf("parseLeafName(%q) accepted a name moat did not make", n)
		}
	}
	for _, id := range []string{"", ".", "..", "a/b", "a b", strings.Repeat("x", 129)} {
		if validID(id) == nil {
			t.Errorf("validID(%q) accepted", id)
		}
	}
}

func TestOwnerAlive(t *testing.T) {
	self, err := selfOwner()
	if err != nil {
		t.Fatal(err)
	}
	if !self.alive() {
		t.Error("this process is not alive")
	}
	if (owner{pid: self.pid, start: self.start + 1}).alive() {
		t.Error("a reused pid (other start time) counts as alive")
	}
	if (owner{pid: 1 << 30, start: 1}).alive() {
		t.Error("a pid that cannot exist counts as alive")
	}
}

func TestPostureRequire(t *testing.T) {
	p := Posture{Memory: LimitPosture{Enforced: true}, Pids: LimitPosture{Reason: "no pids"}, Fix: "delegate"}
	if err := p.Require(Memory); err != nil {
		t.Errorf("Require(Memory) = %v", err)
	}
	err := p.Require(Memory, Pids, CPU)
	var re *RequiredError
	if !errors.As(err, &re) || re.Limit != Pids || re.Reason != "no pids" || re.Fix != "delegate" {
		t.Fatalf("Require = %v, want a RequiredError for pids", err)
	}
	if !errors.Is(err, ErrNoDelegation) || !strings.Contains(err.Error(), "cpu") {
		t.Errorf("Require = %v, want both pids and cpu, matching ErrNoDelegation", err)
	}
}

func TestBadParent(t *testing.T) {
	for _, p := range []string{"", "../x", "a/../../b", "a//b"} {
		if _, err := New(WithParent(p)); err == nil {
			t.Errorf("New(WithParent(%q)) accepted", p)
		}
	}
}

package cgroups

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// cleanupAll removes what a test left at path in every hierarchy a path
// leaf may join, the optional ones included.
func cleanupAll(t *testing.T, h *Host, path string) []string {
	_, dirs, err := pathDirsOf(h, path, append(pathV1Controllers, pathV1Optional...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, d := range dirs {
			removeTree(t, d)
			rmdir(d)
		}
	})
	return dirs
}

// aDisk is the major and minor number of a whole, fixed block device of
// this host (the throttle files take no partition), if there is one.
func aDisk() (int64, int64, bool) {
	ents, _ := os.ReadDir("/sys/dev/block")
	for _, e := range ents {
		d := filepath.Join("/sys/dev/block", e.Name())
		size, _ := os.ReadFile(filepath.Join(d, "size"))
		removable, _ := os.ReadFile(filepath.Join(d, "removable"))
		if exists(filepath.Join(d, "partition")) || strings.TrimSpace(string(size)) == "0" || strings.TrimSpace(string(removable)) == "1" {
			continue
		}
		maj, min, _ := strings.Cut(e.Name(), ":")
		a, err1 := strconv.ParseInt(maj, 10, 64)
		b, err2 := strconv.ParseInt(min, 10, 64)
		if err1 == nil && err2 == nil {
			return a, b, true
		}
	}
	return 0, 0, false
}

func readTrim(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Errorf("read %s: %v", name, err)
	}
	return strings.TrimSpace(string(b))
}

// TestCreatePathExtras: the resources beyond the three limits that runc's
// cgroupfs driver writes (cpuset cpus and mems, cpu shares, the memory
// reservation and swappiness, the I/O throttles) are written at the
// cgroupsPath in v1's files or v2's, read back as runc leaves them; a
// process joins the group (a v1 cpuset group with no cpus would refuse
// it with ENOSPC: cpusetInherit); an update through OpenPath, the
// monitor's view, changes them, and Delete removes the cpuset level too.
func TestCreatePathExtras(t *testing.T) {
	h := pathHost(t)
	path := "/" + testParent("extras")
	dirs := cleanupAll(t, h, path)
	res := &specs.LinuxResources{
		Memory: &specs.LinuxMemory{Limit: i64(64 << 20), Reservation: i64(32 << 20), Swappiness: u64(10)},
		CPU:    &specs.LinuxCPU{Cpus: "0", Mems: "0", Shares: u64(512)},
	}
	maj, min, disk := aDisk()
	if disk {
		res.BlockIO = &specs.LinuxBlockIO{
			ThrottleReadBpsDevice:   []specs.LinuxThrottleDevice{{LinuxBlockIODevice: specs.LinuxBlockIODevice{Major: maj, Minor: min}, Rate: 1 << 20}},
			ThrottleWriteIOPSDevice: []specs.LinuxThrottleDevice{{LinuxBlockIODevice: specs.LinuxBlockIODevice{Major: maj, Minor: min}, Rate: 300}},
		}
	}
	dev := strconv.FormatInt(maj, 10) + ":" + strconv.FormatInt(min, 10)
	leaf, err := CreatePath(path, res)
	if err != nil {
		t.Fatalf("CreatePath: %v", err)
	}
	v1 := h.Layout != Unified
	at := func(c string) string {
		if !v1 {
			return dirs[0]
		}
		return filepath.Join(h.V1[c], path)
	}
	check := func(when string, want map[[2]string]string) {
		t.Helper()
		for f, w := range want {
			if got := readTrim(t, at(f[0]), f[1]); !strings.Contains(got, w) {
				t.Errorf("%s: %s = %q, want %q", when, f[1], got, w)
			}
		}
	}
	if v1 {
		want := map[[2]string]string{
			{"cpuset", "cpuset.cpus"}: "0", {"cpuset", "cpuset.mems"}: "0", {"cpu", "cpu.shares"}: "512",
			{"memory", "memory.soft_limit_in_bytes"}: strconv.Itoa(32 << 20), {"memory", "memory.swappiness"}: "10",
		}
		if disk {
			want[[2]string{"blkio", "blkio.throttle.read_bps_device"}] = dev + " 1048576"
			want[[2]string{"blkio", "blkio.throttle.write_iops_device"}] = dev + " 300"
		}
		check("create", want)
	} else {
		want := map[[2]string]string{
			{"", "cpuset.cpus"}: "0", {"", "cpuset.mems"}: "0", {"", "cpu.weight"}: strconv.FormatUint(weightOfShares(512), 10),
			{"", "memory.low"}: strconv.Itoa(32 << 20),
		}
		if disk {
			want[[2]string{"", "io.max"}] = dev + " rbps=1048576 wbps=max riops=max wiops=300"
		}
		check("create", want)
	}
	s := startIn(t, leaf, helper(t, "sleep", "30s"))
	if v1 {
		if got := groupOf(t, s.cmd.Process.Pid, "cpuset"); got != path {
			t.Errorf("the process's cpuset group is %q, want %s", got, path)
		}
	}
	other, err := OpenPath(path, leaf.Made())
	if err != nil {
		t.Fatalf("OpenPath: %v", err)
	}
	if err := other.Update(&specs.LinuxResources{Memory: &specs.LinuxMemory{Reservation: i64(16 << 20)}, CPU: &specs.LinuxCPU{Cpus: "0"}}); err != nil {
		t.Fatalf("Update: %v", err)
	}
	file, c := "memory.low", ""
	if v1 {
		file, c = "memory.soft_limit_in_bytes", "memory"
	}
	check("update", map[[2]string]string{{c, file}: strconv.Itoa(16 << 20)})
	if err := other.Delete(); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	for _, d := range dirs {
		if exists(d) {
			t.Errorf("%s left after Delete", d)
		}
	}
}

// TestCreatePathRefusesMissingController: a block I/O weight where the
// kernel has no weight file (no CFQ or BFQ scheduler), and on cgroup v2 a
// leaf weight, which it has no file for, are refused naming the field,
// and nothing is left behind. (hugepageLimits without a v1 hugetlb
// hierarchy: TestCreatePathHugetlb.)
func TestCreatePathRefusesMissingController(t *testing.T) {
	h := pathHost(t)
	cases := 0
	if b := h.V1["blkio"]; h.Layout != Unified && b != "" && !exists(filepath.Join(b, "blkio.weight")) && !exists(filepath.Join(b, "blkio.bfq.weight")) {
		cases++
		path := "/" + testParent("weight")
		cleanupAll(t, h, path)
		_, err := CreatePath(path, &specs.LinuxResources{BlockIO: &specs.LinuxBlockIO{Weight: u16(500)}})
		var le *LimitsError
		if !errors.As(err, &le) || le.Field != "blockIO" {
			t.Errorf("a blkio weight with no weight file: %v, want a LimitsError naming blockIO", err)
		}
	}
	if h.Layout == Unified {
		// cgroup v2 has no leaf weight: runc drops it, moat refuses it.
		// Only on a v2 host (the VM): a hybrid host's cgroup2 root is not
		// the test's to enable controllers in.
		cases++
		path := "/" + testParent("leafweight")
		dirs := cleanupAll(t, h, path)
		_, err := CreatePath(path, &specs.LinuxResources{BlockIO: &specs.LinuxBlockIO{LeafWeight: u16(300)}})
		var le *LimitsError
		if !errors.As(err, &le) || le.Field != "blockIO.leafWeight" {
			t.Errorf("a v2 leaf weight: %v, want a LimitsError naming blockIO.leafWeight", err)
		}
		if exists(dirs[0]) {
			t.Errorf("%s left after a refused create", dirs[0])
		}
	}
	if cases == 0 {
		t.Skip("not this layout: neither cgroup v2 only nor a v1 blkio hierarchy without a weight file")
	}
}

// TestCreatePathHugetlb: a hugepage limit is written where the hugetlb
// controller is there for the group (v1 hugetlb.2MB.limit_in_bytes, v2
// hugetlb.2MB.max). Where no v1 hugetlb hierarchy is mounted on a v1 or
// hybrid host (this one: its hugetlb is on the cgroup2 mount only) the
// create is refused before any level is made, naming hugepageLimits and
// the v1 hugetlb controller, as runc fails it ("cannot set hugetlb
// limit"), and so is an update; the cgroup2 hierarchy is left as it
// was: no controller enabled in its root, no group made in it.
func TestCreatePathHugetlb(t *testing.T) {
	h := pathHost(t)
	path := "/" + testParent("huge")
	dirs := cleanupAll(t, h, path)
	res := &specs.LinuxResources{HugepageLimits: []specs.LinuxHugepageLimit{{Pagesize: "2MB", Limit: 4 << 21}}}
	if h.Layout != Unified && h.V1["hugetlb"] == "" {
		var before string
		if h.Unified != "" {
			before = readTrim(t, h.Unified, "cgroup.subtree_control")
		}
		_, err := CreatePath(path, res)
		var ce *ControllerError
		if !errors.As(err, &ce) || ce.Controller != "hugetlb" || ce.Field != "hugepageLimits" || !strings.Contains(err.Error(), "no cgroup v1 hugetlb hierarchy") {
			t.Errorf("hugepageLimits without a v1 hugetlb hierarchy: %v, want a ControllerError naming both", err)
		}
		if slices.Contains(h.UnifiedControllers, "hugetlb") && !strings.Contains(err.Error(), "cgroup2 mount only") {
			t.Errorf("the refusal %q does not say the host's hugetlb is on its cgroup2 mount only", err)
		}
		for _, d := range dirs {
			if exists(d) {
				t.Errorf("%s left after a refused create", d)
			}
		}
		// An update of a group made without them is refused the same.
		leaf, err := CreatePath(path, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = leaf.Update(res)
		if !errors.As(err, &ce) || ce.Controller != "hugetlb" || !strings.Contains(err.Error(), "no cgroup v1 hugetlb hierarchy") {
			t.Errorf("an update of hugepageLimits without a v1 hugetlb hierarchy: %v, want a ControllerError saying so", err)
		}
		if err := leaf.Delete(); err != nil {
			t.Fatal(err)
		}
		if h.Unified != "" {
			if exists(filepath.Join(h.Unified, path)) {
				t.Errorf("a group was made at %s in the cgroup2 hierarchy", path)
			}
			if got := readTrim(t, h.Unified, "cgroup.subtree_control"); got != before {
				t.Errorf("the cgroup2 root's subtree_control changed: %q, was %q", got, before)
			}
		}
		return
	}
	if !exists("/sys/kernel/mm/hugepages/hugepages-2048kB") {
		t.Skip("not this layout: no 2MB huge pages")
	}
	file, dir := "hugetlb.2MB.limit_in_bytes", filepath.Join(h.V1["hugetlb"], path)
	if h.Layout == Unified {
		file, dir = "hugetlb.2MB.max", dirs[0]
		if !hasField(h.Unified, "cgroup.controllers", "hugetlb") {
			t.Skipf("not this layout: no hugetlb controller in %s", h.Unified)
		}
	}
	leaf, err := CreatePath(path, res)
	if err != nil {
		t.Fatalf("CreatePath: %v", err)
	}
	defer leaf.Delete()
	if got := readTrim(t, dir, file); got != strconv.Itoa(4<<21) {
		t.Errorf("%s = %q, want %d", file, got, 4<<21)
	}
}

// TestCreatePathCpusetParentNotFilled: a v1 cpuset level that existed
// before (an engine's, with no cpus) is not moat's to fill: a create that
// asks for cpus below it fails, and the level is left as it was.
func TestCreatePathCpusetParentNotFilled(t *testing.T) {
	h := pathHost(t)
	if h.Layout == Unified || h.V1["cpuset"] == "" {
		t.Skip("not this layout: no cgroup v1 cpuset hierarchy (a v2 cpuset group is usable empty)")
	}
	engine := "/" + testParent("cpusetparent")
	cleanupAll(t, h, engine)
	parent := filepath.Join(h.V1["cpuset"], engine)
	if err := os.Mkdir(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := CreatePath(engine+"/ctr", &specs.LinuxResources{CPU: &specs.LinuxCPU{Cpus: "0", Mems: "0"}})
	if err == nil {
		t.Fatal("CreatePath below a cpuset level with no cpus succeeded")
	}
	if got := readTrim(t, parent, "cpuset.cpus"); got != "" {
		t.Errorf("the engine's cpuset.cpus became %q: moat wrote a group it did not create", got)
	}
	if exists(filepath.Join(parent, "ctr")) {
		t.Errorf("the refused leaf was left")
	}
}

// TestExtrasFromRefusesOutOfRange: values the kernel would refuse, or
// could not name a file by, are a *LimitsError naming the field before
// any group is made; runc update's unset values are not extras.
func TestExtrasFromRefusesOutOfRange(t *testing.T) {
	for field, res := range map[string]*specs.LinuxResources{
		"cpu.cpus":                   {CPU: &specs.LinuxCPU{Cpus: "0-1;2"}},
		"cpu.mems":                   {CPU: &specs.LinuxCPU{Mems: "x"}},
		"memory.swappiness":          {Memory: &specs.LinuxMemory{Swappiness: u64(101)}},
		"memory.reservation":         {Memory: &specs.LinuxMemory{Reservation: i64(-2)}},
		"hugepageLimits[0].pageSize": {HugepageLimits: []specs.LinuxHugepageLimit{{Pagesize: "../2MB"}}},
	} {
		_, err := extrasFrom(res)
		var le *LimitsError
		if !errors.As(err, &le) || le.Field != field {
			t.Errorf("%s: %v, want a LimitsError naming it", field, err)
		}
	}
	e, err := extrasFrom(&specs.LinuxResources{Memory: &specs.LinuxMemory{Swappiness: u64(^uint64(0)), Reservation: i64(0)},
		BlockIO: &specs.LinuxBlockIO{Weight: u16(0)}, CPU: &specs.LinuxCPU{}})
	if err != nil || !e.empty() {
		t.Errorf("runc update's unset values: %+v, %v, want no extras", e, err)
	}
}

// TestUpdateCpusetNotJoined: a v1 group made without cpus or mems joined
// no cpuset hierarchy, so an update asking them is refused naming the
// field and why, and writes nothing (its pids limit stays).
func TestUpdateCpusetNotJoined(t *testing.T) {
	h := pathHost(t)
	if h.Layout == Unified || h.V1["cpuset"] == "" || h.V1["pids"] == "" {
		t.Skip("not this layout: no cgroup v1 cpuset and pids hierarchies (v2 groups get the cpuset controller where it is available)")
	}
	path := "/" + testParent("nocpuset")
	cleanupAll(t, h, path)
	leaf, err := CreatePath(path, &specs.LinuxResources{Pids: &specs.LinuxPids{Limit: i64(40)}})
	if err != nil {
		t.Fatal(err)
	}
	defer leaf.Delete()
	err = leaf.Update(&specs.LinuxResources{Pids: &specs.LinuxPids{Limit: i64(41)}, CPU: &specs.LinuxCPU{Cpus: "0"}})
	var ce *ControllerError
	if !errors.As(err, &ce) || ce.Controller != "cpuset" || !strings.Contains(err.Error(), "joined at create") {
		t.Errorf("update of cpus: %v, want a ControllerError saying the group joined no cpuset hierarchy", err)
	}
	if got := readTrim(t, filepath.Join(h.V1["pids"], path), "pids.max"); got != "40" {
		t.Errorf("pids.max = %s after a refused update, want 40", got)
	}
}

// TestCreateWritesShares, TestV2CreateWritesShares: a Manager's leaf gets
// the cpu shares of res at create, as runc writes them (v1 cpu.shares,
// v2 cpu.weight); before, only an update wrote them.
func TestCreateWritesShares(t *testing.T)   { checkCreateShares(t, rootManager(t)) }
func TestV2CreateWritesShares(t *testing.T) { checkCreateShares(t, v2RootManager(t)) }

func checkCreateShares(t *testing.T, m *Manager) {
	leaf, err := m.Create("shares", &specs.LinuxResources{CPU: &specs.LinuxCPU{Shares: u64(256)}, Pids: &specs.LinuxPids{Limit: i64(20)}})
	if err != nil {
		t.Fatal(err)
	}
	defer leaf.Delete()
	s, err := leaf.Settings()
	if err != nil {
		t.Fatal(err)
	}
	want := uint64(256)
	if _, v2 := m.tree.(*v2Tree); v2 {
		want = shareOfWeight(weightOfShares(256))
	}
	if s.CPUShares != want {
		t.Errorf("CPUShares = %d after create, want %d", s.CPUShares, want)
	}
}

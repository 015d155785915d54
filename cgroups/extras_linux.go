package cgroups

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// setV1Extras writes e in a v1 group's hierarchies (ctl: controller ->
// directory), as runc's v1 cgroupfs driver writes them (libcontainer's
// fs cpuset, cpu, memory, blkio and hugetlb files). A field whose
// controller has no hierarchy here is a *ControllerError naming both.
func setV1Extras(ctl map[string]string, e extras) error {
	need := func(field, c string) (string, error) {
		d, ok := ctl[c]
		if !ok {
			return "", &ControllerError{Field: field, Controller: c, Why: "no cgroup v1 " + c + " hierarchy is mounted here"}
		}
		return d, nil
	}
	if e.cpus != "" || e.mems != "" {
		d, err := need("cpu.cpus and mems", "cpuset")
		if err != nil {
			return err
		}
		if err := writeSome(d, [][2]string{{"cpuset.cpus", e.cpus}, {"cpuset.mems", e.mems}}); err != nil {
			return fmt.Errorf("linux.resources.cpu cpus %q mems %q: %w", e.cpus, e.mems, err)
		}
	}
	if e.shares != 0 {
		d, err := need("cpu.shares", "cpu")
		if err != nil {
			return err
		}
		if err := writeFile(d, "cpu.shares", strconv.FormatUint(e.shares, 10)); err != nil {
			return fmt.Errorf("linux.resources.cpu.shares: %w", err)
		}
	}
	if e.reservation != 0 || e.swappiness != nil {
		d, err := need("memory.reservation and swappiness", "memory")
		if err != nil {
			return err
		}
		var w [][2]string
		if e.reservation != 0 {
			w = append(w, [2]string{"memory.soft_limit_in_bytes", strconv.FormatInt(e.reservation, 10)})
		}
		if e.swappiness != nil {
			w = append(w, [2]string{"memory.swappiness", strconv.FormatUint(*e.swappiness, 10)})
		}
		if err := writeSome(d, w); err != nil {
			return fmt.Errorf("linux.resources.memory: %w", err)
		}
	}
	if e.blkio != nil {
		d, err := need("blockIO", "blkio")
		if err != nil {
			return err
		}
		if err := setV1Blkio(d, e.blkio); err != nil {
			return fmt.Errorf("linux.resources.blockIO: %w", err)
		}
	}
	if len(e.hugetlb) > 0 {
		d, err := need("hugepageLimits", "hugetlb")
		if err != nil {
			return err
		}
		for _, h := range e.hugetlb {
			if err := writeHugetlb(d, h, "limit_in_bytes"); err != nil {
				return err
			}
		}
	}
	return nil
}

// writeSome writes each (file, value) pair whose value is not empty, in
// order.
func writeSome(dir string, pairs [][2]string) error {
	for _, p := range pairs {
		if p[1] == "" {
			continue
		}
		if err := writeFile(dir, p[0], p[1]); err != nil {
			return fmt.Errorf("%s %q: %w", p[0], p[1], err)
		}
	}
	return nil
}

// writeHugetlb writes one hugepage limit to hugetlb.<size>.<suffix>; a
// size with no such file is one this kernel has no huge pages of.
func writeHugetlb(dir string, h specs.LinuxHugepageLimit, suffix string) error {
	name := "hugetlb." + h.Pagesize + "." + suffix
	err := writeFile(dir, name, strconv.FormatUint(h.Limit, 10))
	if errors.Is(err, os.ErrNotExist) {
		return &LimitsError{Field: "hugepageLimits " + h.Pagesize, Reason: "this host has no huge pages of that size (no " + name + ")"}
	}
	if err != nil {
		return fmt.Errorf("linux.resources.hugepageLimits %s: %w", h.Pagesize, err)
	}
	return nil
}

// setV1Blkio writes the block I/O resources (cgroup-v1/blkio-controller.rst).
// The proportional weights are CFQ's blkio.weight files or, since CFQ's
// removal (5.0), BFQ's blkio.bfq.weight ones, whichever this kernel has,
// as runc picks them; with neither (no proportional-weight scheduler) a
// weight is refused, as runc fails writing it. Per-device lines are
// "MAJOR:MINOR VALUE".
func setV1Blkio(dir string, b *specs.LinuxBlockIO) error {
	weight, weightDev := "blkio.bfq.weight", "blkio.bfq.weight_device"
	if exists(filepath.Join(dir, "blkio.weight")) {
		weight, weightDev = "blkio.weight", "blkio.weight_device"
	}
	var w [][2]string
	if b.Weight != nil && *b.Weight != 0 {
		w = append(w, [2]string{weight, strconv.FormatUint(uint64(*b.Weight), 10)})
	}
	if b.LeafWeight != nil && *b.LeafWeight != 0 {
		w = append(w, [2]string{"blkio.leaf_weight", strconv.FormatUint(uint64(*b.LeafWeight), 10)})
	}
	for _, d := range b.WeightDevice {
		if d.Weight != nil && *d.Weight != 0 {
			w = append(w, [2]string{weightDev, fmt.Sprintf("%d:%d %d", d.Major, d.Minor, *d.Weight)})
		}
		if d.LeafWeight != nil && *d.LeafWeight != 0 {
			w = append(w, [2]string{"blkio.leaf_weight_device", fmt.Sprintf("%d:%d %d", d.Major, d.Minor, *d.LeafWeight)})
		}
	}
	for _, t := range throttles(b) {
		for _, d := range t.devs {
			w = append(w, [2]string{"blkio.throttle." + t.v1, fmt.Sprintf("%d:%d %d", d.Major, d.Minor, d.Rate)})
		}
	}
	for _, p := range w {
		if err := writeFile(dir, p[0], p[1]); errors.Is(err, os.ErrNotExist) {
			return &LimitsError{Field: "blockIO", Reason: "this kernel has no " + p[0] + " (no CFQ or BFQ I/O scheduler for a weight)"}
		} else if err != nil {
			return fmt.Errorf("%s %q: %w", p[0], p[1], err)
		}
	}
	return nil
}

// throttle is one kind of I/O throttle: its v1 file and its io.max key.
type throttle struct {
	v1, v2 string
	devs   []specs.LinuxThrottleDevice
}

func throttles(b *specs.LinuxBlockIO) []throttle {
	return []throttle{
		{"read_bps_device", "rbps", b.ThrottleReadBpsDevice},
		{"write_bps_device", "wbps", b.ThrottleWriteBpsDevice},
		{"read_iops_device", "riops", b.ThrottleReadIOPSDevice},
		{"write_iops_device", "wiops", b.ThrottleWriteIOPSDevice},
	}
}

// setV2Extras writes e in a v2 group (cgroup-v2.rst), as runc's v2
// driver maps them: cpuset.cpus and mems; shares as cpu.weight
// (weightOfShares); the reservation as memory.low; blockIO's weight as
// io.bfq.weight where BFQ is the scheduler, else as io.weight mapped from
// blkio's 10..1000 to 1..10000, and the throttles as io.max lines; the
// hugepage limits as hugetlb.<size>.max. Swappiness has no v2 file and
// is not written (as runc): moat's v2 leaves have swap off. A file that
// is missing is a controller the group does not have (*ControllerError).
func setV2Extras(dir string, e extras) error {
	ctl := func(field, controller string, err error) error {
		if errors.Is(err, os.ErrNotExist) {
			return &ControllerError{Field: field, Controller: controller}
		}
		return fmt.Errorf("linux.resources.%s: %w", field, err)
	}
	if err := writeSome(dir, [][2]string{{"cpuset.cpus", e.cpus}, {"cpuset.mems", e.mems}}); err != nil {
		return ctl("cpu.cpus and mems", "cpuset", err)
	}
	if e.shares != 0 {
		if err := writeFile(dir, "cpu.weight", strconv.FormatUint(weightOfShares(e.shares), 10)); err != nil {
			return ctl("cpu.shares", "cpu", err)
		}
	}
	if e.reservation != 0 {
		v := "max"
		if e.reservation > 0 {
			v = strconv.FormatInt(e.reservation, 10)
		}
		if err := writeFile(dir, "memory.low", v); err != nil {
			return ctl("memory.reservation", "memory", err)
		}
	}
	if e.blkio != nil {
		if err := setV2IO(dir, e.blkio); err != nil {
			return ctl("blockIO", "io", err)
		}
	}
	for _, h := range e.hugetlb {
		// cgroup.controllers lists what the group's parent enabled for it.
		if !hasField(dir, "cgroup.controllers", "hugetlb") {
			return &ControllerError{Field: "hugepageLimits", Controller: "hugetlb"}
		}
		if err := writeHugetlb(dir, h, "max"); err != nil {
			return err
		}
	}
	return nil
}

// hasField says whether a space-separated control file lists f.
func hasField(dir, name, f string) bool {
	b, err := os.ReadFile(filepath.Join(dir, name))
	return err == nil && strings.Contains(" "+strings.TrimSpace(string(b))+" ", " "+f+" ")
}

// setV2IO writes blockIO in io.* files. A leaf weight has no v2
// counterpart, nor has a per-device weight without BFQ: runc drops both
// silently; moat refuses them, as it refuses any limit it cannot
// enforce.
func setV2IO(dir string, b *specs.LinuxBlockIO) error {
	bfq := exists(filepath.Join(dir, "io.bfq.weight"))
	if b.LeafWeight != nil && *b.LeafWeight != 0 {
		return &LimitsError{Field: "blockIO.leafWeight", Reason: "cgroup v2 has no leaf weight"}
	}
	if b.Weight != nil && *b.Weight != 0 {
		name, v := "io.weight", blkioToIOWeight(*b.Weight)
		if bfq {
			name, v = "io.bfq.weight", uint64(*b.Weight)
		}
		if err := writeFile(dir, name, strconv.FormatUint(v, 10)); err != nil {
			return err
		}
	}
	for _, d := range b.WeightDevice {
		if d.LeafWeight != nil && *d.LeafWeight != 0 {
			return &LimitsError{Field: "blockIO.weightDevice leafWeight", Reason: "cgroup v2 has no leaf weight"}
		}
		if d.Weight == nil || *d.Weight == 0 {
			continue
		}
		if !bfq {
			return &LimitsError{Field: "blockIO.weightDevice", Reason: "a per-device weight needs the BFQ I/O scheduler (io.bfq.weight), which this group has not"}
		}
		if err := writeFile(dir, "io.bfq.weight", fmt.Sprintf("%d:%d %d", d.Major, d.Minor, *d.Weight)); err != nil {
			return err
		}
	}
	for _, t := range throttles(b) {
		for _, d := range t.devs {
			if err := writeFile(dir, "io.max", fmt.Sprintf("%d:%d %s=%d", d.Major, d.Minor, t.v2, d.Rate)); err != nil {
				return err
			}
		}
	}
	return nil
}

// blkioToIOWeight maps a v1 blkio weight (10..1000) onto io.weight
// (1..10000) linearly, the map runc and crun use, so a value read back
// agrees with theirs.
func blkioToIOWeight(w uint16) uint64 {
	return 1 + (uint64(max(w, 10))-10)*9999/990
}

// cpusetInherit gives a v1 cpuset group moat created its parent's cpus
// and mems where it has none. A new v1 cpuset group starts with both
// empty (unless its parent has cgroup.clone_children set, which is not
// moat's to set), and the kernel refuses a task into a group whose
// cpuset.cpus or cpuset.mems is empty with ENOSPC (cgroup-v1/cpusets.rst,
// 2.1, and kernel/cgroup/cpuset.c cpuset_can_attach), so every level moat
// makes, shallowest first, copies both from the level above, as runc's
// cpuset group does (cpusetCopyIfNeeded). The container's own cpus and
// mems are written after, and must be a subset of the parent's.
func cpusetInherit(dir string) error {
	parent := filepath.Dir(dir)
	for _, name := range []string{"cpuset.cpus", "cpuset.mems"} {
		cur, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		if strings.TrimSpace(string(cur)) != "" {
			continue
		}
		v, err := os.ReadFile(filepath.Join(parent, name))
		if err != nil {
			return err
		}
		if err := writeFile(dir, name, strings.TrimSpace(string(v))); err != nil {
			return fmt.Errorf("copy %s from %s: %w", name, parent, err)
		}
	}
	return nil
}

// need is one extra asked for: its field and the controller that takes
// it, by its v1 and its v2 name.
type need struct{ field, v1, v2 string }

// needs lists the controllers the extras e ask for, in the order they
// are written.
func (e extras) needs() []need {
	var n []need
	for _, c := range []struct {
		asked bool
		need
	}{
		{e.cpus != "" || e.mems != "", need{"cpu.cpus and mems", "cpuset", "cpuset"}},
		{e.shares != 0, need{"cpu.shares", "cpu", "cpu"}},
		{e.reservation != 0 || e.swappiness != nil, need{"memory.reservation and swappiness", "memory", "memory"}},
		{e.blkio != nil, need{"blockIO", "blkio", "io"}},
		{len(e.hugetlb) > 0, need{"hugepageLimits", "hugetlb", "hugetlb"}},
	} {
		if c.asked {
			n = append(n, c.need)
		}
	}
	return n
}

// lacking returns a *ControllerError for the first extra whose controller
// the group has not (have says whether it has one, by its v2 name on
// cgroup v2, its v1 name otherwise), before anything is written: a create
// or an update is applied whole or not at all where it can be. why says
// why the group lacks it.
func (e extras) lacking(v2 bool, have func(controller string) bool, why func(need) string) error {
	for _, n := range e.needs() {
		c := n.v1
		if v2 {
			c = n.v2
		}
		if !have(c) {
			return &ControllerError{Field: n.field, Controller: c, Why: why(n)}
		}
	}
	return nil
}

// v1Absent says why a v1 group cannot have n's controller when h mounts
// no v1 hierarchy of it, or is "" when h does. On a hybrid layout the
// controller may be on the cgroup2 mount only (hugetlb, on a host whose
// v1 hierarchies were set up before it had one): moat writes a
// cgroupsPath's resources in the v1 hierarchies alone there, as runc's v1
// driver does (it fails "cannot set hugetlb limit" on such a host), and
// enables nothing in the cgroup2 hierarchy, whose root and groups are not
// moat's to change.
func v1Absent(h *Host, n need) string {
	if h == nil || h.V1[n.v1] != "" {
		return ""
	}
	why := "no cgroup v1 " + n.v1 + " hierarchy is mounted here"
	if h.Layout == Hybrid && slices.Contains(h.UnifiedControllers, n.v2) {
		why += " (this hybrid host has " + n.v2 + " on its cgroup2 mount only, which moat does not use for a " +
			"cgroupsPath's resources on a hybrid layout, as runc's v1 driver does not: give the host a v1 " + n.v1 + " hierarchy, or boot it cgroup v2 only)"
	}
	return why
}

// v1NotJoined is why a v1 path leaf lacks n's controller at an update:
// the host has no v1 hierarchy of it (v1Absent), or the group did not
// join the one there is at create.
func v1NotJoined(n need) string {
	h, _ := Detect()
	if why := v1Absent(h, n); why != "" {
		return why
	}
	return "the group is in no cgroup v1 " + n.v1 + " hierarchy (a cpuset or hugetlb one is joined at create only when the config asks for it)"
}

// v2NotEnabled is why a v2 group lacks n's controller.
func v2NotEnabled(n need) string {
	return "the " + n.v2 + " controller is not enabled for the group (not available in its parent)"
}

// writeShares writes the cpu shares of res in a Manager's new leaf, as
// CreatePath writes them (v1 cpu.shares, v2 cpu.weight), where the leaf
// has the cpu controller; without it they are not applied, as a degraded
// limit is not (Manager.Create).
func writeShares(ops leafOps, res *specs.LinuxResources) error {
	if res == nil || res.CPU == nil || res.CPU.Shares == nil || *res.CPU.Shares == 0 {
		return nil
	}
	e, err := extrasFrom(&specs.LinuxResources{CPU: &specs.LinuxCPU{Shares: res.CPU.Shares}})
	if err != nil {
		return err
	}
	switch l := ops.(type) {
	case *v1Leaf:
		if _, ok := l.ctl["cpu"]; ok {
			return setV1Extras(l.ctl, e)
		}
	case *v2Leaf:
		if hasField(l.dir, "cgroup.controllers", "cpu") {
			return setV2Extras(l.dir, e)
		}
	}
	return nil
}

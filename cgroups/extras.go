package cgroups

import (
	"fmt"
	"regexp"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// extras are the resources, beyond the three limits, that runc's cgroupfs
// driver writes and moat writes too, in a group at linux.cgroupsPath
// only (CreatePath, and Leaf.Update of such a group): the cpuset (cpus,
// mems), cpu shares, block I/O weights and throttles, hugetlb limits, and
// the memory reservation and swappiness. A zero field is unset. A
// Manager's leaf or a systemd scope refuses them (refuseExtras): their
// groups live in fewer hierarchies.
type extras struct {
	cpus, mems  string
	shares      uint64
	reservation int64   // bytes; -1 lifts it
	swappiness  *uint64 // 0..100
	blkio       *specs.LinuxBlockIO
	hugetlb     []specs.LinuxHugepageLimit
}

func (e extras) empty() bool {
	return e.cpus == "" && e.mems == "" && e.shares == 0 && e.reservation == 0 && e.swappiness == nil && e.blkio == nil && len(e.hugetlb) == 0
}

// cpuList is the kernel's list format for cpuset.cpus and cpuset.mems
// (cgroup-v1/cpusets.rst, "List format"): numbers and ranges, commas
// between.
var cpuList = regexp.MustCompile(`^[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*$`)

// pageSize is an OCI hugepageLimits pagesize as the kernel names its
// hugetlb files: hugetlb.2MB.limit_in_bytes, hugetlb.1GB.max
// (mm/hugetlb_cgroup.c, mem_fmt).
var pageSize = regexp.MustCompile(`^[0-9]+[KMG]B$`)

// extrasFrom reads the extras of res. Kernel memory limits are accepted
// and not written, as runc (1.1 and later) ignores them: the kernel
// deprecated them (5.4) and removed memory.kmem.limit_in_bytes (6.1).
// A swappiness of 2^64-1 is the runtime-spec's unset (runc update's).
func extrasFrom(res *specs.LinuxResources) (extras, error) {
	var e extras
	if res == nil {
		return e, nil
	}
	if c := res.CPU; c != nil {
		for _, f := range []struct{ name, v string }{{"cpu.cpus", c.Cpus}, {"cpu.mems", c.Mems}} {
			if f.v != "" && !cpuList.MatchString(f.v) {
				return e, &LimitsError{Field: f.name, Reason: fmt.Sprintf("%q is not a list of numbers and ranges (0-3,8)", f.v)}
			}
		}
		e.cpus, e.mems = c.Cpus, c.Mems
		if c.Shares != nil && *c.Shares != 0 {
			// The kernel's range for cpu.shares (MIN_SHARES, MAX_SHARES).
			if *c.Shares < 2 || *c.Shares > 262144 {
				return e, &LimitsError{Field: "cpu.shares", Reason: "must be between 2 and 262144"}
			}
			e.shares = *c.Shares
		}
	}
	if m := res.Memory; m != nil {
		if m.Reservation != nil && *m.Reservation != 0 {
			if *m.Reservation < -1 {
				return e, &LimitsError{Field: "memory.reservation", Reason: "must be positive or -1 (no reservation)"}
			}
			e.reservation = *m.Reservation
		}
		if m.Swappiness != nil && *m.Swappiness != ^uint64(0) {
			if *m.Swappiness > 100 {
				return e, &LimitsError{Field: "memory.swappiness", Reason: "must be between 0 and 100"}
			}
			e.swappiness = m.Swappiness
		}
	}
	if b := res.BlockIO; b != nil && blkioSet(b) {
		e.blkio = b
	}
	for i, h := range res.HugepageLimits {
		if !pageSize.MatchString(h.Pagesize) {
			return e, &LimitsError{Field: fmt.Sprintf("hugepageLimits[%d].pageSize", i), Reason: fmt.Sprintf("%q is not a size the kernel names its hugetlb files by (2MB, 1GB)", h.Pagesize)}
		}
	}
	e.hugetlb = res.HugepageLimits
	return e, nil
}

// blkioSet says whether b asks for anything (runc update's command line
// fills blockIO with zeroes).
func blkioSet(b *specs.LinuxBlockIO) bool {
	return (b.Weight != nil && *b.Weight != 0) || (b.LeafWeight != nil && *b.LeafWeight != 0) || len(b.WeightDevice) > 0 ||
		len(b.ThrottleReadBpsDevice) > 0 || len(b.ThrottleWriteBpsDevice) > 0 || len(b.ThrottleReadIOPSDevice) > 0 || len(b.ThrottleWriteIOPSDevice) > 0
}

// refuseExtras refuses the extras of res for a group that is not at a
// linux.cgroupsPath (a Manager's leaf, a systemd scope), naming the first.
func refuseExtras(res *specs.LinuxResources) error {
	e, err := extrasFrom(res)
	if err != nil || e.empty() {
		return err
	}
	var field string
	switch {
	case e.cpus != "" || e.mems != "":
		field = "cpu.cpus and mems"
	case e.reservation != 0:
		field = "memory.reservation"
	case e.swappiness != nil && *e.swappiness != 0:
		field = "memory.swappiness"
	case e.blkio != nil:
		field = "blockIO"
	case len(e.hugetlb) > 0:
		field = "hugepageLimits"
	default:
		// cpu.shares alone, and a swappiness of 0 (no swap, which is
		// off anyway), are taken as before.
		return nil
	}
	return &LimitsError{Field: field, Reason: "moat writes it only in a group at linux.cgroupsPath (the cgroupfs driver); give the container a cgroupsPath"}
}

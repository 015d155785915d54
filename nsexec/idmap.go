package nsexec

import (
	"fmt"
	"math"
)

// IDMap is one line of a user namespace's uid_map or gid_map
// (user_namespaces(7)): Size ids from Inside on, in the sandbox, are the
// ids from Host on in the namespace that starts it (the host's, or a
// rootless engine's whose root is not host root).
type IDMap struct {
	Inside uint32 `json:"inside"`
	Host   uint32 `json:"host"`
	Size   uint32 `json:"size"`
}

// maxMapLines is the kernel's limit of lines in one uid_map or gid_map
// (kernel/user_namespace.c, UID_GID_MAP_MAX_EXTENTS since Linux 4.15).
const maxMapLines = 340

// hostOf is the host id that ms maps id inside to.
func hostOf(ms []IDMap, id uint32) (uint32, bool) {
	for _, m := range ms {
		if id >= m.Inside && uint64(id) < uint64(m.Inside)+uint64(m.Size) {
			return m.Host + (id - m.Inside), true
		}
	}
	return 0, false
}

// covers reports whether the host ids first..first+size-1 all lie in the
// inside ranges of ms (the ids a namespace with map ms has).
func covers(ms []IDMap, first, size uint32) bool {
	lo, hi := uint64(first), uint64(first)+uint64(size)
	for lo < hi {
		ok := false
		for _, m := range ms {
			if lo >= uint64(m.Inside) && lo < uint64(m.Inside)+uint64(m.Size) {
				lo = uint64(m.Inside) + uint64(m.Size)
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// overlaps reports whether a..a+n-1 and b..b+m-1 share an id.
func overlaps(a, n, b, m uint64) bool { return a < b+m && b < a+n }

// checkMap refuses a map the kernel would refuse, with the line named:
// no line, a line of size 0, a range past 4294967294 (4294967295 is the
// invalid id) on either side, two lines that overlap on either side, more
// lines than the kernel takes.
func checkMap(field string, ms []IDMap) error {
	bad := func(i int, reason string, args ...any) error {
		return &ConfigError{Field: fmt.Sprintf("%s[%d]", field, i), Value: fmt.Sprint(ms[i]), Reason: fmt.Sprintf(reason, args...)}
	}
	if len(ms) == 0 {
		return &ConfigError{Field: field, Value: "", Reason: "maps no id; give at least one line"}
	}
	if len(ms) > maxMapLines {
		return &ConfigError{Field: field, Value: fmt.Sprint(len(ms), " lines"), Reason: fmt.Sprintf("the kernel takes at most %d lines", maxMapLines)}
	}
	for i, m := range ms {
		if m.Size == 0 {
			return bad(i, "has size 0")
		}
		if uint64(m.Inside)+uint64(m.Size) > math.MaxUint32 || uint64(m.Host)+uint64(m.Size) > math.MaxUint32 {
			return bad(i, "runs past 4294967294 (4294967295 is the invalid id)")
		}
		for j := range i {
			o := ms[j]
			if overlaps(uint64(m.Inside), uint64(m.Size), uint64(o.Inside), uint64(o.Size)) {
				return bad(i, "overlaps line %d inside", j)
			}
			if overlaps(uint64(m.Host), uint64(m.Size), uint64(o.Host), uint64(o.Size)) {
				return bad(i, "overlaps line %d on the host side", j)
			}
		}
	}
	return nil
}

// The range space of WithHostRange (hostid_linux.go): blocks of
// HostRangeSize host ids, HostRangeCount of them from HostRangeFirst on
// (0x78000000 to 0x7FFDFFFF), each held by a lock file in
// HostRangeLockDir, named by the block's first id, for as long as the
// sandbox that has it runs. It lies in the block systemd leaves
// unassigned (1879048192..2147352575, https://systemd.io/UIDS-GIDS/),
// above the single ids of HostIDFirst (2000000000..2000065535) and below
// systemd's foreign range (0x7FFE0000), each block aligned on its size,
// as systemd-nspawn's container ranges are.
const (
	HostRangeSize    = 65536
	HostRangeFirst   = 0x78000000
	HostRangeCount   = 2046
	HostRangeLockDir = "/run/moat/hostranges"
)

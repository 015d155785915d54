package nsexec

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Callers differ in what they may write into a new user namespace's
// uid_map and gid_map (user_namespaces(7), "Defining user and group ID
// mappings"):
//   - root of the initial user namespace may map any host ids; moat maps
//     none that is host root, none of the ranges it allocates itself but
//     the one it allocated for this sandbox, and allows setgroups;
//   - root of a rootless engine's user namespace (podman's, whose root is
//     the user who ran it) holds CAP_SETUID there and may map every id
//     that namespace has (its own uid_map's inside ranges), none of them
//     host root; setgroups is allowed in the sandbox only where that
//     namespace allows it (a "deny" is inherited);
//   - anyone else may map their own uid and gid only, one id each, and
//     must deny setgroups before writing the gid map.

// Caller is what this process may map into a sandbox.
type Caller struct {
	// HostRoot: root of the initial user namespace.
	HostRoot bool
	// EngineNS: root of a user namespace whose root is not host root (a
	// rootless engine's); IDs and GIDs are that namespace's ids.
	EngineNS  bool
	UIDs      []IDMap
	GIDs      []IDMap
	UID, GID  uint32 // the caller's own effective ids
	SetGroups bool   // a sandbox can be allowed setgroups
}

// CallerIDs says what this process may map (see above).
func CallerIDs() (Caller, error) {
	c := Caller{UID: uint32(os.Geteuid()), GID: uint32(os.Getegid())}
	switch {
	case c.UID == 0 && rootIsHostRoot():
		c.HostRoot, c.SetGroups = true, true
	case c.UID == 0:
		var err error
		if c.UIDs, err = readIDMap("/proc/self/uid_map"); err != nil {
			return c, err
		}
		if c.GIDs, err = readIDMap("/proc/self/gid_map"); err != nil {
			return c, err
		}
		c.EngineNS = true
		b, err := os.ReadFile("/proc/self/setgroups")
		c.SetGroups = err == nil && strings.TrimSpace(string(b)) == "allow"
	}
	return c, nil
}

// readIDMap parses a /proc uid_map or gid_map: "inside outside count".
func readIDMap(path string) ([]IDMap, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("nsexec: read %s: %w", path, err)
	}
	var ms []IDMap
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		var v [3]uint64
		for i := range f {
			if v[i], err = strconv.ParseUint(f[i], 10, 32); err != nil {
				return nil, fmt.Errorf("nsexec: parse %s line %q: %w", path, line, err)
			}
		}
		ms = append(ms, IDMap{Inside: uint32(v[0]), Host: uint32(v[1]), Size: uint32(v[2])})
	}
	return ms, nil
}

// reserved are moat's own allocation spaces: a map a caller gives must
// stay out of them, so that an id moat hands one sandbox is no other's.
var reserved = [...]struct {
	first, size uint64
	what        string
}{
	{HostIDFirst, HostIDCount, "moat's per-sandbox host ids"},
	{HostRangeFirst, uint64(HostRangeCount) * HostRangeSize, "moat's per-sandbox host id ranges"},
}

// CheckIDMaps says whether caller may map a sandbox by uids and gids
// (WithIDMaps), and whether the process's uid, gid and groups are mapped;
// the error is a *ConfigError naming the line. Start and Prepare check
// again.
func (caller Caller) CheckIDMaps(uids, gids []IDMap, uid, gid uint32, groups []uint32) error {
	for _, side := range []struct {
		field string
		ms    []IDMap
		ns    []IDMap
		own   uint32
	}{{"uidMappings", uids, caller.UIDs, caller.UID}, {"gidMappings", gids, caller.GIDs, caller.GID}} {
		if err := checkMap(side.field, side.ms); err != nil {
			return err
		}
		for i, m := range side.ms {
			bad := func(reason string, args ...any) error {
				return &ConfigError{Field: fmt.Sprintf("%s[%d]", side.field, i), Value: fmt.Sprint(m), Reason: fmt.Sprintf(reason, args...)}
			}
			switch {
			case caller.HostRoot:
				if m.Host == 0 {
					return bad("maps host root into the sandbox, which moat never does")
				}
				for _, r := range reserved {
					if overlaps(uint64(m.Host), uint64(m.Size), r.first, r.size) {
						return bad("reaches into %s (%d-%d); map other host ids", r.what, r.first, r.first+r.size-1)
					}
				}
			case caller.EngineNS:
				if !covers(side.ns, m.Host, m.Size) {
					return bad("maps ids this user namespace does not have (its own map is %v)", side.ns)
				}
			default:
				if len(side.ms) != 1 || m.Size != 1 || m.Host != side.own {
					return bad("rootless, moat can map the caller's own id %d alone", side.own)
				}
			}
		}
	}
	if _, ok := hostOf(uids, uid); !ok {
		return &ConfigError{Field: "uid", Value: fmt.Sprint(uid), Reason: "is not mapped by the uid map"}
	}
	if _, ok := hostOf(gids, gid); !ok {
		return &ConfigError{Field: "gid", Value: fmt.Sprint(gid), Reason: "is not mapped by the gid map"}
	}
	return checkGroups(gids, gid, groups, caller.SetGroups)
}

// maxGroups is the kernel's NGROUPS_MAX.
const maxGroups = 65536

// checkGroups refuses supplementary groups that are not mapped, or that
// cannot be set: rootless, setgroups must be denied in the sandbox's user
// namespace, so only the primary gid may be named (it is the process's
// anyway).
func checkGroups(gids []IDMap, gid uint32, groups []uint32, setgroups bool) error {
	if len(groups) > maxGroups {
		return &ConfigError{Field: "groups", Value: fmt.Sprint(len(groups)), Reason: fmt.Sprintf("the kernel takes at most %d supplementary groups", maxGroups)}
	}
	for i, g := range groups {
		if !setgroups && g != gid {
			return &ConfigError{Field: fmt.Sprintf("groups[%d]", i), Value: fmt.Sprint(g),
				Reason: "rootless, setgroups(2) is denied in the sandbox's user namespace (it must be before the gid map is written, user_namespaces(7)), so no supplementary group can be set; drop it"}
		}
		if _, ok := hostOf(gids, g); !ok {
			return &ConfigError{Field: fmt.Sprintf("groups[%d]", i), Value: fmt.Sprint(g), Reason: "is not mapped by the gid map, so the kernel cannot set it"}
		}
	}
	return nil
}

// mapping is how one sandbox's ids are mapped.
type mapping struct {
	uids, gids []IDMap
	id         Identity // the host ids of Config.UID and GID
	root       bool     // the caller is host root
	setgroups  bool     // setgroups is allowed in the sandbox
	lease      *idLease // the range or id moat holds for it, if any
}

// hostMapping picks the sandbox's maps (see above and WithHostRange,
// WithIDMaps). Host root is never mapped; release the lease once the
// sandbox was reaped.
func hostMapping(o *options, c *Config) (*mapping, error) {
	caller, err := CallerIDs()
	if err != nil {
		return nil, err
	}
	m := &mapping{root: caller.HostRoot, setgroups: caller.SetGroups}
	single := func(uid, gid uint32) {
		m.uids = []IDMap{{Inside: c.UID, Host: uid, Size: 1}}
		m.gids = []IDMap{{Inside: c.GID, Host: gid, Size: 1}}
	}
	switch {
	case o.uids != nil || o.gids != nil:
		if err := caller.CheckIDMaps(o.uids, o.gids, c.UID, c.GID, c.Groups); err != nil {
			return nil, err
		}
		m.uids, m.gids = o.uids, o.gids
	case o.sharing && !caller.HostRoot:
		return nil, fmt.Errorf("nsexec: a shared host id range (WithSharedRange) needs root of the initial user namespace: %w", ErrNotRangeLease)
	case o.hostRange && caller.HostRoot:
		r := defaultHostRange
		if o.ranges != nil {
			r = *o.ranges
		}
		if o.sharing {
			m.lease, err = r.sharedLease(o.shared)
		} else {
			m.lease, err = r.acquire()
		}
		if err != nil {
			return nil, err
		}
		first := m.lease.key.id
		m.uids = []IDMap{{Inside: 0, Host: first, Size: m.lease.size}}
		m.gids = m.uids
	case o.hostRange && caller.EngineNS:
		for _, l := range caller.UIDs {
			m.uids = append(m.uids, IDMap{Inside: l.Inside, Host: l.Inside, Size: l.Size})
		}
		for _, l := range caller.GIDs {
			m.gids = append(m.gids, IDMap{Inside: l.Inside, Host: l.Inside, Size: l.Size})
		}
	case !caller.HostRoot:
		single(caller.UID, caller.GID)
	case o.identity != nil:
		if o.identity.UID == 0 || o.identity.GID == 0 {
			return nil, fmt.Errorf("nsexec identity %d:%d: refusing to map host root into a sandbox", o.identity.UID, o.identity.GID)
		}
		single(o.identity.UID, o.identity.GID)
	default:
		r := defaultIDRange
		if o.ids != nil {
			r = *o.ids
		}
		if m.lease, err = r.acquire(); err != nil {
			return nil, err
		}
		single(m.lease.key.id, m.lease.key.id)
	}
	uid, okU := hostOf(m.uids, c.UID)
	gid, okG := hostOf(m.gids, c.GID)
	if !okU || !okG {
		m.lease.release()
		return nil, &ConfigError{Field: "uid", Value: fmt.Sprint(c.UID, ":", c.GID), Reason: fmt.Sprintf("is not in the sandbox's maps (uids %v, gids %v)", m.uids, m.gids)}
	}
	if err := checkGroups(m.gids, c.GID, c.Groups, m.setgroups); err != nil {
		m.lease.release()
		return nil, err
	}
	m.id = Identity{UID: uid, GID: gid}
	return m, nil
}

package nsexec

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// DefaultHostID is the first host uid and gid of the range root-started
// sandboxes get their own id from (HostIDFirst; hostid_linux.go). It lies
// in 1879048192..2147352575, the block that systemd leaves unassigned
// between its container range (524288..1879048191) and its foreign range
// (2147352576..), so it is nobody's: not root, not a login user, not the
// shared 65534 that host daemons run as. See https://systemd.io/UIDS-GIDS/.
const DefaultHostID = 2000000000

// IsHostRoot says whether the caller is root of the initial user namespace
// (root, not root only in a rootless engine's user namespace): such a
// caller maps each sandbox onto a host id (or range, WithHostRange) of its
// own, any other its own id or the ids its namespace has
// (mapping_linux.go).
func IsHostRoot() bool { return os.Geteuid() == 0 && rootIsHostRoot() }

// rootIsHostRoot says whether uid 0 of this process's user namespace is
// uid 0 of its parent namespace. It is not in a rootless engine's user
// namespace (podman's, whose root is the user who ran podman): the caller
// is then rootless in all but name, and maps its own id, or with
// WithHostRange the ids that namespace has, instead of taking host ids
// from a range it cannot lock or map (CallerIDs).
func rootIsHostRoot() bool {
	b, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return true // no user namespaces here: the initial namespace
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == "0" {
			return f[1] == "0"
		}
	}
	return false
}

// SubordinateIdentity returns the first id of the ranges /etc/subuid and
// /etc/subgid delegate to user (a name or a numeric uid), for WithIdentity.
func SubordinateIdentity(user string) (Identity, error) {
	uid, err := firstSubID("/etc/subuid", user)
	if err != nil {
		return Identity{}, err
	}
	gid, err := firstSubID("/etc/subgid", user)
	if err != nil {
		return Identity{}, err
	}
	return Identity{UID: uid, GID: gid}, nil
}

// firstSubID parses subuid(5) lines "name:start:count".
func firstSubID(path, user string) (uint32, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("read subordinate ids: %w", err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Split(strings.TrimSpace(s.Text()), ":")
		if len(fields) != 3 || fields[0] != user {
			continue
		}
		start, err := strconv.ParseUint(fields[1], 10, 32)
		if err != nil {
			return 0, fmt.Errorf("parse %s line for %s: %w", path, user, err)
		}
		count, err := strconv.ParseUint(fields[2], 10, 32)
		if err != nil || count == 0 || start == 0 {
			return 0, fmt.Errorf("parse %s line for %s: unusable range %s:%s", path, user, fields[1], fields[2])
		}
		return uint32(start), nil
	}
	if err := s.Err(); err != nil {
		return 0, fmt.Errorf("read %s: %w", path, err)
	}
	return 0, fmt.Errorf("read %s: no range for %s: %w", path, user, os.ErrNotExist)
}

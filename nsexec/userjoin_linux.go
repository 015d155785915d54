package nsexec

import (
	"fmt"
	"os"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"
)

// A pod is one user namespace (issue 29, item 2): a sandbox given
// WithJoin of the pod sandbox's user namespace is born in it, so its root
// is the pod's root, with capabilities over the pod's ipc, uts and net
// namespaces and files, not a stranger mapped onto the same ids.
//
// setns(CLONE_NEWUSER) needs a single-threaded caller, which neither the
// launcher nor the Go init is, so the init joins in a C constructor before
// its runtime starts (userns.c says what it does there, and why it makes
// the procfs of its pid namespace first). The launcher clones it in a new
// pid namespace (unless one is joined) and nothing else, and checks before
// anything runs:
//   - the user namespace is strictly below the caller's: not the caller's
//     own, not pid 1's or an ancestor's (NS_GET_PARENT from it must reach
//     the caller's), so a sandbox can only ever join one a sandbox made;
//   - the caller is root of its user namespace (it clones the init there,
//     and the init needs CAP_SYS_ADMIN over the pod's to join it);
// and once the init said hello, before it is let go:
//   - the init is in that very user namespace (its /proc/PID/ns/user);
//   - the namespace's uid_map and gid_map, read by the launcher itself,
//     map no host uid or gid 0 and are exactly the maps the sandbox was
//     planned with (the pod's range, WithSharedRange, or WithIDMaps).
// Without cgo (haveUserJoin false) the join is refused, typed, and a
// caller that can do without (moat-runtime) keeps a user namespace of its
// own on the pod's range.

// userNSEnv is the init's variable that asks its constructor to join:
// <fd>:<CLONE_NEW* flags to unshare>:<1 if it makes its procfs>:<the
// capability mask the init keeps>.
const userNSEnv = "_MOAT_USERNS"

// UserJoinSupported reports whether this build can start a sandbox in
// another sandbox's user namespace (WithJoin of a user namespace): only a
// build with cgo can.
func UserJoinSupported() bool { return haveUserJoin }

// checkUserJoin says why the user namespace open at f cannot be joined,
// or nil (see above).
func checkUserJoin(f *os.File) error {
	if err := userNSBelowUs(int(f.Fd())); err != nil {
		return joinErr(f, err.Error(), unix.EPERM)
	}
	if !haveUserJoin {
		return &SetupError{Step: StepJoin, Path: f.Name(), Errno: unix.EOPNOTSUPP,
			Detail: "this build of moat has no cgo: a user namespace can only be joined before the Go runtime starts, from C (userns.c)",
			Hint:   "build with CGO_ENABLED=1 to join a pod's user namespace"}
	}
	if os.Geteuid() != 0 {
		return joinErr(f, "joining a user namespace needs root of the caller's user namespace (the init joins it with CAP_SYS_ADMIN over it)", unix.EPERM)
	}
	return nil
}

// userNSBelowUs says why the user namespace at fd is not strictly below
// the caller's, or nil if it is.
func userNSBelowUs(fd int) error {
	hostNamespaces()
	self := selfUserNS
	if self == (fileID{}) {
		return fmt.Errorf("the caller's user namespace is unknown (no /proc/self/ns/user)")
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat the user namespace: %v", err)
	}
	if idOf(&st) == self {
		return fmt.Errorf("is the caller's own user namespace; moat never shares it with a sandbox")
	}
	u, err := unix.Dup(fd)
	if err != nil {
		return fmt.Errorf("copy the descriptor: %v", err)
	}
	// Nesting stops at 32 user namespaces (user_namespaces(7)); a
	// namespace above the caller's, or beside it, ends the walk with
	// EPERM from NS_GET_PARENT before it reaches the caller's.
	for range 33 {
		p, err := unix.IoctlRetInt(u, nsGetParent)
		unix.Close(u)
		if err != nil {
			return fmt.Errorf("is not below the caller's user namespace (the host's, pid 1's, an ancestor's, or one beside it)")
		}
		if unix.Fstat(p, &st) == nil && idOf(&st) == self {
			unix.Close(p)
			return nil
		}
		u = p
	}
	unix.Close(u)
	return fmt.Errorf("is nested deeper than the kernel allows")
}

// userJoinEnv is the init's userNSEnv for a sandbox that joins j's user
// namespace, whose descriptor the init gets at fd: the namespaces of its
// own to unshare there, and whether it makes its procfs (a new pid
// namespace whose /proc it mounts), and its capabilities there.
func userJoinEnv(j *joins, fd int, proc bool, caps []uintptr) string {
	flags := (unix.CLONE_NEWNS | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS | unix.CLONE_NEWNET) &^ j.flags
	p := 0
	if proc {
		p = 1
	}
	var mask uint64
	for _, c := range caps {
		mask |= 1 << c
	}
	return fmt.Sprintf("%s=%d:%d:%d:%d", userNSEnv, fd, flags, p, mask)
}

// checkJoinedUser is the launcher's check of an init that said hello
// (see above): in the user namespace j joins, whose maps are uids and
// gids and map no host root.
func checkJoinedUser(pid int, j *joins, uids, gids []IDMap) error {
	prefix := "/proc/" + strconv.Itoa(pid) + "/"
	var want, got unix.Stat_t
	if err := unix.Fstat(int(j.user.Fd()), &want); err != nil {
		return joinErr(j.user, "stat the user namespace", err)
	}
	if err := unix.Stat(prefix+"ns/user", &got); err != nil {
		return joinErr(j.user, "stat the init's user namespace", err)
	}
	if idOf(&got) != idOf(&want) {
		return joinErr(j.user, "the init is not in the user namespace it was to join", unix.EPERM)
	}
	for _, side := range []struct {
		file string
		want []IDMap
	}{{"uid_map", uids}, {"gid_map", gids}} {
		ms, err := readIDMap(prefix + side.file)
		if err != nil {
			return joinErr(j.user, "read the joined user namespace's "+side.file, err)
		}
		for _, m := range ms {
			if m.Host == 0 {
				return joinErr(j.user, fmt.Sprintf("the joined user namespace's %s maps host id 0 (%v), which moat never does", side.file, m), unix.EPERM)
			}
		}
		if !slices.Equal(ms, side.want) {
			return joinErr(j.user, fmt.Sprintf("the joined user namespace's %s is %v, not the sandbox's planned %v (the pod's range: WithSharedRange)", side.file, ms, side.want), unix.EPERM)
		}
	}
	return nil
}

package nsexec

import (
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Landlock (Documentation/userspace-api/landlock.rst) as the sandbox's
// second wall (Config.Landlock). The ruleset handles every filesystem right
// of the kernel's ABI and grants them all beneath the sandbox's root, which
// the mount namespace made: what the mount tree shows stays as the mount
// tree says (read-only where it is), and nothing else of the host opens by
// path, whatever descriptor or escape leads there. Landlock checks an
// access against the rules of the path's own ancestry, walked up through
// its mounts (security/landlock/fs.c is_access_to_paths_allowed), so a
// host directory's descriptor, which has no ancestor in the sandbox's
// tree, gets nothing. Network rights (ABI 4) and scopes (ABI 6) are not
// handled here: the sandbox's own network, ipc and pid namespaces already
// hold its TCP ports, abstract sockets and signals.
//
// The domain is made on the exec thread just before the seccomp filter
// (DESIGN.md), after the privilege drop (landlock_restrict_self needs
// no_new_privs, which the drop sets): the tool, and every process the init
// forks on request, are forked from that thread and inherit it. The tail
// (tail_linux.go) is exec'd from that thread after it, so its binary, a
// host file outside the root, gets the one right more it needs: to be
// executed and read, and nothing else, and by no path the tool can reach
// (/proc/1/exe is the non-dumpable init's).

// landlockABI is the kernel's Landlock ABI version, 0 when it has none or
// Landlock is disabled (LANDLOCK_CREATE_RULESET_VERSION).
var landlockABI = sync.OnceValue(func() int {
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 {
		return 0
	}
	return int(v)
})

// LandlockABI is the Landlock ABI version this kernel offers (1 for Linux
// 5.13, 7 for 6.15 and later), or 0 when it has none or it is disabled: a
// Config with Landlock then fails the setup.
func LandlockABI() int { return landlockABI() }

// fsRights are the filesystem rights ABI abi knows.
func fsRights(abi int) uint64 {
	r := uint64(unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE |
		unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_READ_DIR |
		unix.LANDLOCK_ACCESS_FS_REMOVE_DIR | unix.LANDLOCK_ACCESS_FS_REMOVE_FILE |
		unix.LANDLOCK_ACCESS_FS_MAKE_CHAR | unix.LANDLOCK_ACCESS_FS_MAKE_DIR |
		unix.LANDLOCK_ACCESS_FS_MAKE_REG | unix.LANDLOCK_ACCESS_FS_MAKE_SOCK |
		unix.LANDLOCK_ACCESS_FS_MAKE_FIFO | unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK |
		unix.LANDLOCK_ACCESS_FS_MAKE_SYM) // ABI 1
	if abi >= 2 {
		r |= unix.LANDLOCK_ACCESS_FS_REFER // links and renames across rules
	}
	if abi >= 3 {
		r |= unix.LANDLOCK_ACCESS_FS_TRUNCATE
	}
	if abi >= 5 {
		r |= unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
	}
	return r
}

// restrictLandlock puts the calling thread in a Landlock domain with every
// right beneath "/" (the sandbox's root: the init has pivoted) and, when
// exe >= 0, the right to execute and read that one file (the tail's
// binary). A Config without Landlock makes none.
func (c *child) restrictLandlock(exe int) error {
	if !c.cfg.Landlock {
		return nil
	}
	abi := landlockABI()
	if abi < 1 {
		return stepErr(StepLandlock, "", "this kernel has no Landlock (Linux 5.13+, with landlock in its lsm= list): run without it or enable it", unix.EOPNOTSUPP)
	}
	all := fsRights(abi)
	attr := unix.LandlockRulesetAttr{Handled_access_fs: all}
	fd, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr), 0)
	if errno != 0 {
		return stepErr(StepLandlock, "", "landlock_create_ruleset", errno)
	}
	ruleset := int(fd)
	defer unix.Close(ruleset)
	root, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return stepErr(StepLandlock, "/", "open the root", err)
	}
	defer unix.Close(root)
	if err := addPathRule(ruleset, root, all); err != nil {
		return stepErr(StepLandlock, "/", "landlock_add_rule", err)
	}
	if exe < 0 {
		// The tool's stdio, when it is a file of the host (a regular file
		// or a terminal): the tool holds the descriptors, and reopening
		// one by path (/dev/stdout, /proc/self/fd/1, what shells and
		// loggers do) is the path's rule's to allow, so each gets one,
		// with the rights of its open mode. A pipe or socket is no path.
		// The tail's stdio comes with its request, after the domain is
		// made: a prepared sandbox's tool may use it, not reopen it.
		for fd := 0; fd < 3; fd++ {
			if access, ok := stdioRights(fd, all); ok {
				if err := addPathRule(ruleset, fd, access); err != nil {
					return stepErr(StepLandlock, "", "landlock_add_rule for "+stdioNames[fd], err)
				}
			}
		}
	}
	if exe >= 0 {
		// A rule on a file takes the file rights only (EINVAL otherwise).
		if err := addPathRule(ruleset, exe, all&(unix.LANDLOCK_ACCESS_FS_EXECUTE|unix.LANDLOCK_ACCESS_FS_READ_FILE)); err != nil {
			return stepErr(StepLandlock, "", "landlock_add_rule for the init's tail", err)
		}
	}
	if _, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(ruleset), 0, 0); errno != 0 {
		return stepErr(StepLandlock, "", "landlock_restrict_self", errno)
	}
	return nil
}

// addPathRule grants access beneath the file or directory open at fd.
func addPathRule(ruleset, fd int, access uint64) error {
	rule := unix.LandlockPathBeneathAttr{Allowed_access: access, Parent_fd: int32(fd)}
	_, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(ruleset), unix.LANDLOCK_RULE_PATH_BENEATH,
		uintptr(unsafe.Pointer(&rule)), 0, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// stdioRights are the rights a rule on descriptor fd grants, when it is a
// regular file or a device: those of its open mode (truncation with
// writing: a shell's "> /dev/stdout" opens with O_TRUNC), within handled.
func stdioRights(fd int, handled uint64) (uint64, bool) {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil {
		return 0, false
	}
	var access uint64
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
	case unix.S_IFCHR, unix.S_IFBLK:
		access = unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
	default:
		return 0, false
	}
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return 0, false
	}
	switch fl & unix.O_ACCMODE {
	case unix.O_RDONLY:
		access |= unix.LANDLOCK_ACCESS_FS_READ_FILE
	case unix.O_WRONLY:
		access |= unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_TRUNCATE
	default:
		access |= unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_TRUNCATE
	}
	return access & handled, true
}

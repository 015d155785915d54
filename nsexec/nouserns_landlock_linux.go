package nsexec

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// In the no-userns rung Landlock is the filesystem wall (there is no mount
// namespace): the ruleset handles every right of the kernel's ABI, and
// grants
//
//   - read and execute beneath the system directories (noUserNSSystem)
//     and the read-only binds;
//   - read of a fixed list of /etc entries (noUserNSEtc) and of /proc
//     (which shows the host's processes: their environ, fd, mem and the
//     like still need ptrace access, which Landlock refuses towards any
//     process outside the domain, security/landlock/task.c);
//   - read and write of the /dev basics (noUserNSDev);
//   - every right beneath the workdir, the run's TMPDIR and the
//     read-write binds;
//
// and nothing else. With ABI 4, TCP bind and connect are handled, and
// refused on every port but Config.EgressTCP's, the proxy's, which the
// tool may connect to (a rule names a port, on every address: see
// EgressTCP); with ABI 6, abstract unix sockets and
// signals are scoped to the domain (LANDLOCK_SCOPE_*): the tool reaches
// neither a host process's abstract socket nor, by kill, a process
// outside the sandbox.

// NoUserNSMinABI is the lowest Landlock ABI the no-userns rung runs on:
// 3, the first that handles truncate(2) (LANDLOCK_ACCESS_FS_TRUNCATE), so
// that a file outside every rule cannot be emptied; below it the rung is
// refused (*LandlockABIError). A variable so that tests can raise it.
var NoUserNSMinABI = 3

// LandlockABIError is the refusal of the no-userns rung on a kernel whose
// Landlock ABI is below Need (0: none): the sandbox would run without a
// filesystem wall.
type LandlockABIError struct {
	Need, Have int
}

func (e *LandlockABIError) Error() string {
	return fmt.Sprintf("nsexec: mode %s needs Landlock ABI %d or later as its filesystem wall, and this kernel has ABI %d (0: none, or landlock is not in its lsm= list); "+
		"moat does not run a sandbox without a wall: allow user namespaces here, or run on Linux 6.2 or later with Landlock enabled", ModeNoUserNS, e.Need, e.Have)
}

// CheckNoUserNS says whether this kernel can run the no-userns rung:
// nil, or the *LandlockABIError.
func CheckNoUserNS() error {
	if have := landlockABI(); have < NoUserNSMinABI {
		return &LandlockABIError{Need: NoUserNSMinABI, Have: have}
	}
	return nil
}

// noUserNSSystem are the directories whose files the tool may read and
// execute; a missing one is skipped.
var noUserNSSystem = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// noUserNSEtc are the entries of /etc the tool may read: identity and name
// resolution, the dynamic loader's, time zone, certificates, and Debian's
// alternatives (which /usr/bin links through).
var noUserNSEtc = []string{
	"/etc/passwd", "/etc/group", "/etc/nsswitch.conf", "/etc/hosts", "/etc/host.conf", "/etc/resolv.conf",
	"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime", "/etc/os-release",
	"/etc/ssl", "/etc/ca-certificates", "/etc/pki", "/etc/alternatives", "/etc/mime.types", "/etc/protocols", "/etc/services",
}

// noUserNSDev are the devices the tool may read and write.
var noUserNSDev = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"}

// Rights of a rule.
const (
	llRead    = unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_READ_DIR
	llExecute = unix.LANDLOCK_ACCESS_FS_EXECUTE
	llDev     = unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_TRUNCATE
	// llFile are the rights a rule on a file (not a directory) may hold
	// (EINVAL otherwise: security/landlock/fs.c ACCESS_FILE).
	llFile = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_READ_FILE |
		unix.LANDLOCK_ACCESS_FS_TRUNCATE | unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
)

// restrictNoUserNS puts the calling thread, the exec thread, in the
// rung's Landlock domain; tmp is the run's TMPDIR.
func (c *child) restrictNoUserNS(tmp string) error {
	abi := landlockABI()
	if abi < NoUserNSMinABI {
		return stepErr(StepLandlock, "", (&LandlockABIError{Need: NoUserNSMinABI, Have: abi}).Error(), unix.EOPNOTSUPP)
	}
	all := fsRights(abi)
	attr := unix.LandlockRulesetAttr{Handled_access_fs: all}
	if abi >= 4 {
		attr.Handled_access_net = unix.LANDLOCK_ACCESS_NET_BIND_TCP | unix.LANDLOCK_ACCESS_NET_CONNECT_TCP
	} else if c.cfg.EgressTCP != 0 { // normalize refused it; no rule would hold it
		return stepErr(StepLandlock, "", (&EgressModeError{Mode: ModeNoUserNS, Need: NoUserNSEgressABI, Have: abi}).Error(), unix.EOPNOTSUPP)
	}
	if abi >= 6 {
		attr.Scoped = unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | unix.LANDLOCK_SCOPE_SIGNAL
	}
	fd, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr), 0)
	if errno != 0 {
		return stepErr(StepLandlock, "", "landlock_create_ruleset", errno)
	}
	ruleset := int(fd)
	defer unix.Close(ruleset)
	if port := c.cfg.EgressTCP; port != 0 {
		if err := addPortRule(ruleset, port, unix.LANDLOCK_ACCESS_NET_CONNECT_TCP); err != nil {
			return stepErr(StepLandlock, "", fmt.Sprintf("landlock_add_rule for TCP port %d", port), err)
		}
	}
	type rule struct {
		path   string
		access uint64
		must   bool    // fail the setup when it cannot be opened
		want   *fileID // the inode the parent opened (a bind's source)
		fd     int     // held already (the workdir), else -1
	}
	var rules []rule
	for _, p := range noUserNSSystem {
		rules = append(rules, rule{p, llRead | llExecute, false, nil, -1})
	}
	for _, p := range noUserNSEtc {
		rules = append(rules, rule{p, llRead, false, nil, -1})
	}
	rules = append(rules, rule{"/proc", llRead, false, nil, -1})
	for _, p := range noUserNSDev {
		rules = append(rules, rule{p, llDev, false, nil, -1})
	}
	for i := range c.cfg.Mounts {
		m := &c.cfg.Mounts[i]
		spec, err := parseMount("", m, c.cfg.TmpSize)
		if err != nil {
			return stepErr(StepLandlock, m.Source, err.Error(), unix.EINVAL)
		}
		access := uint64(llRead | llExecute)
		if spec.attr&attrRdOnly == 0 {
			access = all
		}
		if spec.attr&unix.MOUNT_ATTR_NOEXEC != 0 {
			access &^= llExecute
		}
		var want *fileID
		if i < len(c.srcs.Mounts) {
			want = &c.srcs.Mounts[i]
		}
		rules = append(rules, rule{m.Source, access, true, want, -1})
	}
	if c.workdirFD >= 0 {
		rules = append(rules, rule{c.cfg.Workdir, all, true, nil, c.workdirFD})
	}
	if tmp != "" {
		rules = append(rules, rule{tmp, all, true, nil, -1})
	}
	for _, r := range rules {
		fd, err := r.fd, error(nil)
		switch {
		case fd >= 0:
			fd, err = unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 3)
		case r.want != nil:
			fd, err = openSource(r.path, r.want)
		case r.must: // the run's TMPDIR, which the parent made and the tool has not run in yet
			fd, err = unix.Open(r.path, unix.O_PATH|unix.O_CLOEXEC|unix.O_NOFOLLOW|unix.O_DIRECTORY, 0)
		default:
			fd, err = unix.Open(r.path, unix.O_PATH|unix.O_CLOEXEC, 0)
		}
		if err != nil {
			if r.must {
				return stepErr(StepLandlock, r.path, "open a rule's path", err)
			}
			continue
		}
		access := r.access & all
		var st unix.Stat_t
		if unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT != unix.S_IFDIR {
			access &= llFile
		}
		err = addPathRule(ruleset, fd, access)
		unix.Close(fd)
		if err != nil {
			return stepErr(StepLandlock, r.path, "landlock_add_rule", err)
		}
	}
	// The tool's stdio, as in full mode (restrictLandlock): reopening one
	// by path is the path's rule's to allow.
	for fd := 0; fd < 3; fd++ {
		if access, ok := stdioRights(fd, all); ok {
			if err := addPathRule(ruleset, fd, access); err != nil {
				return stepErr(StepLandlock, "", "landlock_add_rule for "+stdioNames[fd], err)
			}
		}
	}
	if _, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(ruleset), 0, 0); errno != 0 {
		return stepErr(StepLandlock, "", "landlock_restrict_self", errno)
	}
	return nil
}

// landlockNetPortAttr is struct landlock_net_port_attr
// (include/uapi/linux/landlock.h, packed: two __u64), which x/sys lacks.
type landlockNetPortAttr struct {
	allowedAccess uint64
	port          uint64
}

// landlockRuleNetPort is LANDLOCK_RULE_NET_PORT.
const landlockRuleNetPort = 2

// addPortRule grants access (LANDLOCK_ACCESS_NET_*) on TCP port port, on
// every address (landlock(7): the rule names no address).
func addPortRule(ruleset int, port uint16, access uint64) error {
	rule := landlockNetPortAttr{allowedAccess: access, port: uint64(port)}
	_, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(ruleset), landlockRuleNetPort,
		uintptr(unsafe.Pointer(&rule)), 0, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

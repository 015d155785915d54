package nsexec

import (
	"fmt"
	"slices"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"golang.org/x/sys/unix"
)

// hygiene sets what the tool inherits besides the mounts: hostname,
// loopback, working directory, rlimits and umask.
func (c *child) hygiene() error {
	cfg := c.cfg
	// A joined uts namespace's hostname is its owner's (WithJoin).
	if !c.keepHostname {
		if err := unix.Sethostname([]byte(cfg.Hostname)); err != nil {
			return stepErr(StepHostname, "", cfg.Hostname, err)
		}
	}
	if cfg.Network == NetworkLoopback && !cfg.NoUserNS {
		if err := loopbackUp(); err != nil {
			return stepErr(StepNetwork, "lo", "", err)
		}
		if cfg.Egress != nil {
			fd, err := listenEgress(cfg.Egress.Port)
			if err != nil {
				return stepErr(StepNetwork, "lo", "egress forwarder: listen on 127.0.0.1:"+fmt.Sprint(cfg.Egress.Port), err)
			}
			c.egress = fd
		}
	}
	cwd := "/"
	if cfg.Workdir != "" {
		cwd = "/work"
	}
	if cfg.Cwd != "" {
		cwd = cfg.Cwd
	}
	if cfg.NoUserNS {
		cwd = noUserNSCwd(cfg)
	}
	if err := unix.Chdir(cwd); err != nil {
		return stepErr(StepCwd, cwd, "", err)
	}
	// A working directory outside the new root shows as "(unreachable)" or
	// fails; it must be exactly the one we chose (CVE-2024-21626, runc
	// verifyCwd).
	if got, err := unix.Getwd(); err != nil || got != cwd {
		return stepErr(StepCwd, cwd, fmt.Sprintf("getcwd is %q", got), unix.ENOTDIR)
	}
	// No core dumps unless the config sets RLIMIT_CORE itself: then its
	// values are set as they are, since a hard limit lowered to 0 first
	// could not be raised again without CAP_SYS_RESOURCE in the initial
	// user namespace (setrlimit(2)).
	if !slices.ContainsFunc(cfg.Rlimits, func(r specs.POSIXRlimit) bool { return r.Type == "RLIMIT_CORE" }) {
		if err := unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{}); err != nil {
			return stepErr(StepRlimits, "", "RLIMIT_CORE", err)
		}
	}
	for _, r := range cfg.Rlimits {
		res, ok := rlimitResources[r.Type]
		if !ok {
			return stepErr(StepRlimits, "", "unknown rlimit "+r.Type, unix.EINVAL)
		}
		if err := unix.Setrlimit(res, &unix.Rlimit{Cur: r.Soft, Max: r.Hard}); err != nil {
			return stepErr(StepRlimits, "", r.Type, err)
		}
	}
	umask := uint32(0o022)
	if cfg.Umask != nil {
		umask = *cfg.Umask
	}
	unix.Umask(int(umask))
	return nil
}

// loopbackUp sets IFF_UP on lo with the SIOCGIFFLAGS/SIOCSIFFLAGS ioctls
// (netdevice(7)); the new network namespace has lo, down.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// rlimitResources maps OCI rlimit names to resources.
var rlimitResources = map[string]int{
	"RLIMIT_AS":         unix.RLIMIT_AS,
	"RLIMIT_CORE":       unix.RLIMIT_CORE,
	"RLIMIT_CPU":        unix.RLIMIT_CPU,
	"RLIMIT_DATA":       unix.RLIMIT_DATA,
	"RLIMIT_FSIZE":      unix.RLIMIT_FSIZE,
	"RLIMIT_LOCKS":      unix.RLIMIT_LOCKS,
	"RLIMIT_MEMLOCK":    unix.RLIMIT_MEMLOCK,
	"RLIMIT_MSGQUEUE":   unix.RLIMIT_MSGQUEUE,
	"RLIMIT_NICE":       unix.RLIMIT_NICE,
	"RLIMIT_NOFILE":     unix.RLIMIT_NOFILE,
	"RLIMIT_NPROC":      unix.RLIMIT_NPROC,
	"RLIMIT_RSS":        unix.RLIMIT_RSS,
	"RLIMIT_RTPRIO":     unix.RLIMIT_RTPRIO,
	"RLIMIT_RTTIME":     unix.RLIMIT_RTTIME,
	"RLIMIT_SIGPENDING": unix.RLIMIT_SIGPENDING,
	"RLIMIT_STACK":      unix.RLIMIT_STACK,
}

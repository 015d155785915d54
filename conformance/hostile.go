package conformance

import (
	"encoding/json"
	"os"

	"github.com/moat-sandbox/moat/seccomp/attack"
	"golang.org/x/sys/unix"
)

func init() {
	probes["probe-attacks"] = func(map[string]json.RawMessage) any {
		out := map[string]int{}
		for _, p := range attack.Probes() {
			out[p.Name] = int(p.Run())
		}
		for name, run := range sandboxAttacks {
			out[name] = int(run())
		}
		return out
	}
}

// sandboxAttacks are attacks that only make sense inside a sandbox, on top
// of the syscall table (peers.md section 3).
var sandboxAttacks = map[string]func() unix.Errno{
	// Raising the core limit would let a crash dump memory to disk.
	"setrlimit RLIMIT_CORE up": func() unix.Errno {
		return errno(unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{Cur: 1 << 20, Max: 1 << 20}))
	},
	// Attaching to the sandbox's pid 1 (the tool itself here) or any pid.
	"ptrace attach pid 1": func() unix.Errno {
		_, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_ATTACH, 1, 0, 0, 0, 0)
		return e
	},
	// A nested user namespace is the door to most kernel attack surface.
	"unshare CLONE_NEWUSER": func() unix.Errno { return errno(unix.Unshare(unix.CLONE_NEWUSER)) },
	"unshare CLONE_NEWNS":   func() unix.Errno { return errno(unix.Unshare(unix.CLONE_NEWNS)) },
	// Writing the runtime's binary through /proc (CVE-2019-5736).
	"open proc 1 exe for writing": func() unix.Errno {
		fd, err := unix.Open("/proc/1/exe", unix.O_WRONLY, 0)
		if err == nil {
			unix.Close(fd)
		}
		return errno(err)
	},
	// Injecting input into a terminal through a real pty (CVE-2017-5226).
	"ioctl TIOCSTI on a pty": func() unix.Errno {
		fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY, 0)
		if err != nil {
			return unix.ENODEV // no pty to attack: the attack cannot happen
		}
		defer unix.Close(fd)
		c := byte('x')
		return errno(unix.IoctlSetPointerInt(fd, unix.TIOCSTI, int(c)))
	},
	// Changing identity: with no capabilities, setuid(0) must fail.
	"setuid 0": func() unix.Errno {
		_, _, e := unix.RawSyscall(unix.SYS_SETUID, 0, 0, 0)
		return e
	},
}

func errno(err error) unix.Errno {
	if err == nil {
		return 0
	}
	if e, ok := err.(unix.Errno); ok {
		return e
	}
	if pe, ok := err.(*os.PathError); ok {
		if e, ok := pe.Err.(unix.Errno); ok {
			return e
		}
	}
	return unix.EIO
}

// checkAttacks runs the hostile battery inside the sandbox and requires
// every attack to fail the right way: the filter's EPERM for a denied call,
// ENOSYS where libc must fall back, and the kernel's own answer for an
// ordinary call the filter must let through.
func checkAttacks(k *kit) {
	var got map[string]int
	k.probe(Config{}, "probe-attacks", nil, &got)
	for _, p := range attack.Probes() {
		e, ok := got[p.Name]
		if !ok {
			k.fatalf("attack %q did not report", p.Name)
		}
		switch errno := unix.Errno(e); p.Want {
		case attack.Deny:
			if errno != unix.EPERM {
				k.t.Errorf("executor-conformance h1: %s returned %d (%v), want EPERM from the filter: the call reached the kernel", p.Name, e, errno)
			}
		case attack.ENOSYS:
			if errno != unix.ENOSYS {
				k.t.Errorf("executor-conformance h1: %s returned %d (%v), want ENOSYS", p.Name, e, errno)
			}
		case attack.Allow:
			// Not an isolation failure: a stricter policy may refuse more.
			// That ordinary programs still work is checked elsewhere.
			if errno == unix.EPERM || errno == unix.ENOSYS {
				k.t.Logf("h1: ordinary call %s is refused by this policy (%v)", p.Name, errno)
			}
		}
	}
	for name := range sandboxAttacks {
		e := unix.Errno(got[name])
		if e == 0 {
			k.t.Errorf("executor-conformance h1: the attack %q succeeded inside the sandbox", name)
		}
	}
}

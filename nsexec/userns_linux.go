package nsexec

import (
	"sync"

	"golang.org/x/sys/unix"
)

// UserNSRefused reports whether a seccomp filter around this process
// refuses it new namespaces, which the sandbox's clone needs: moat's own
// filter does, so a moat run inside a moat sandbox meets it (and so do
// container profiles that forbid unshare). It is decided once per
// process, with why when refused.
//
// The probe: no filter at all (Seccomp 0) refuses nothing. Under one,
// unshare(CLONE_NEWUSER|CLONE_PARENT) is asked: CLONE_PARENT is no flag
// of unshare, so the kernel answers EINVAL before it does anything
// (kernel/fork.c check_unshare_flags), and any other answer is the
// filter's. A host that disables user namespaces by sysctl is not seen
// here; the sandbox's clone then fails with the sysctl's name
// (userNSHint).
func UserNSRefused() (bool, string) { return userNSRefused() }

var userNSRefused = sync.OnceValues(func() (bool, string) {
	if seccompMode() == 0 {
		return false, ""
	}
	_, _, e := unix.RawSyscall(unix.SYS_UNSHARE, unix.CLONE_NEWUSER|unix.CLONE_PARENT, 0, 0)
	if e == unix.EINVAL {
		return false, ""
	}
	return true, "a seccomp filter around moat refuses new namespaces (unshare: " + e.Error() +
		"): moat runs inside a moat sandbox, or in a container whose seccomp profile forbids them"
})

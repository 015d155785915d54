package nsexec

import (
	"errors"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// UserNSRefused reports whether this process can make no user namespace,
// which every rung above ModeNoUserNS needs, and why. It is decided once
// per process.
//
// The probe makes one for real: a child cloned with CLONE_NEWUSER that
// execs a path that does not exist. A clone the kernel allows fails only
// at the exec (ENOENT, through Go's exec pipe), and then nothing ran; a
// clone the kernel refuses fails with its own errno before any child
// exists. Only the kernel's refusals count: ENOSPC or EUSERS
// (user.max_user_namespaces is 0, or its count is reached:
// kernel/ucount.c inc_user_namespaces), EPERM (a sysctl such as Debian's
// kernel.unprivileged_userns_clone, an LSM such as Ubuntu's AppArmor
// restriction, or a seccomp filter around moat, as in a moat sandbox or
// a container's profile). A transient failure (EAGAIN, ENOMEM) drops no
// rung: the sandbox's own clone then fails and says so.
func UserNSRefused() (bool, string) { return userNSRefused() }

// userNSProbePath is what the probe's child execs: nothing, by design.
const userNSProbePath = "/proc/self/moat-userns-probe-does-not-exist"

var userNSRefused = sync.OnceValues(func() (bool, string) {
	_, err := syscall.ForkExec(userNSProbePath, []string{"moat-userns-probe"}, &syscall.ProcAttr{
		Sys: &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWUSER},
	})
	return userNSVerdict(err)
})

// userNSVerdict reads the probe's error.
func userNSVerdict(err error) (bool, string) {
	var e syscall.Errno
	if err == nil || !errors.As(err, &e) {
		return false, ""
	}
	switch e {
	case unix.ENOSPC, unix.EUSERS:
		return true, "the kernel refuses a new user namespace (clone CLONE_NEWUSER: " + e.Error() +
			"): user.max_user_namespaces is 0 here, or its count is reached"
	case unix.EPERM:
		return true, "the kernel refuses a new user namespace (clone CLONE_NEWUSER: " + e.Error() +
			"): a sysctl (kernel.unprivileged_userns_clone, kernel.apparmor_restrict_unprivileged_userns), an LSM, " +
			"or a seccomp filter around moat (moat runs inside a moat sandbox, or in a container whose seccomp profile forbids new namespaces)"
	}
	return false, ""
}

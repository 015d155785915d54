package nsexec

import (
	"bytes"
	"errors"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// UserNSRefused reports whether this process can make no user namespace,
// which every rung above ModeNoUserNS needs, and why. It is decided once
// per process.
//
// First what the sysctls say for certain, with nothing made
// (userNSSysctlRefusal). Else the probe makes one for real: a child
// cloned with CLONE_NEWUSER that execs a path that does not exist. A
// clone the kernel allows fails only at the exec (ENOENT, through Go's
// exec pipe), and then nothing ran; a clone the kernel refuses fails with
// its own errno before any child exists, so the probe is cheap exactly
// where it says refused, and costs a child (1 to 2 ms) where it does not.
// Only the kernel's refusals count: ENOSPC or EUSERS
// (user.max_user_namespaces is 0, or its count is reached:
// kernel/ucount.c inc_user_namespaces), EPERM (a sysctl such as Debian's
// kernel.unprivileged_userns_clone, an LSM such as Ubuntu's AppArmor
// restriction, or a seccomp filter around moat, as in a moat sandbox or
// a container's profile). A transient failure (EAGAIN, ENOMEM) drops no
// rung: the sandbox's own clone then fails and says so.
func UserNSRefused() (bool, string) { return userNSRefused() }

// UserNSClear reports whether nothing this process can see without
// making a namespace refuses it a new user namespace: no sysctl that
// does (userNSSysctlRefusal) and no seccomp filter that answers
// unshare(CLONE_NEWUSER) (userNSFilterRefuses). It is decided once per
// process, for the reads of two sysctls (and, under a filter, one
// unshare that makes nothing) where UserNSRefused may clone a child.
//
// It proves nothing: an LSM (AppArmor's restriction, SELinux's
// user_namespace create, a BPF LSM), a count reached or a parent user
// namespace's max_user_namespaces of 0 refuse unseen. A caller that
// trusts it takes the sandbox's own clone as the last word: a clone
// refused as UserNSVerdict reads it, confirmed by UserNSRefused, which
// is then cheap (the executor/native fallback).
func UserNSClear() bool { return userNSClear() }

var userNSClear = sync.OnceValue(func() bool {
	if refused, _ := userNSSysctlRefusal(os.ReadFile, hasSysAdmin()); refused {
		return false
	}
	return !userNSFilterRefuses()
})

// userNSProbePath is what the probe's child execs: nothing, by design.
const userNSProbePath = "/proc/self/moat-userns-probe-does-not-exist"

var userNSRefused = sync.OnceValues(func() (bool, string) {
	if refused, why := userNSSysctlRefusal(os.ReadFile, hasSysAdmin()); refused {
		return true, why
	}
	_, err := syscall.ForkExec(userNSProbePath, []string{"moat-userns-probe"}, &syscall.ProcAttr{
		Sys: &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWUSER},
	})
	return userNSVerdict(err)
})

// userNSSysctlRefusal reports the sysctls that refuse a new user
// namespace for certain, read by read: user.max_user_namespaces 0 in
// this process's own user namespace, which every clone counts against
// (kernel/ucount.c inc_ucount walks each ancestor's maximum, so a
// nonzero one here proves nothing), and Debian's
// kernel.unprivileged_userns_clone 0 where this process lacks
// CAP_SYS_ADMIN (kernel/fork.c in Debian's patch refuses the clone
// unless capable(CAP_SYS_ADMIN) in the initial user namespace, which an
// effective set without it never is). A sysctl that cannot be read
// refuses nothing: the probe or the clone decides.
func userNSSysctlRefusal(read func(string) ([]byte, error), sysAdmin bool) (bool, string) {
	if b, err := read("/proc/sys/user/max_user_namespaces"); err == nil && string(bytes.TrimSpace(b)) == "0" {
		return true, "the kernel refuses a new user namespace (clone CLONE_NEWUSER: " + unix.ENOSPC.Error() +
			"): user.max_user_namespaces is 0 here"
	}
	if b, err := read("/proc/sys/kernel/unprivileged_userns_clone"); err == nil && string(bytes.TrimSpace(b)) == "0" && !sysAdmin {
		return true, "the kernel refuses a new user namespace (clone CLONE_NEWUSER: " + unix.EPERM.Error() +
			"): kernel.unprivileged_userns_clone is 0 and moat runs without CAP_SYS_ADMIN"
	}
	return false, ""
}

// hasSysAdmin reports whether CAP_SYS_ADMIN is in this process's
// effective set.
func hasSysAdmin() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if unix.Capget(&hdr, &data[0]) != nil {
		return false
	}
	return data[unix.CAP_SYS_ADMIN/32].Effective&(1<<(unix.CAP_SYS_ADMIN%32)) != 0
}

// userNSFilterRefuses reports whether a seccomp filter around this
// process answers unshare(CLONE_NEWUSER|CLONE_PARENT) itself.
// CLONE_PARENT is no flag of unshare, so the kernel answers EINVAL
// before it does anything (kernel/fork.c check_unshare_flags), and any
// other answer is the filter's, which then most likely refuses the
// sandbox's clone too. No filter at all (Seccomp 0) refuses nothing.
func userNSFilterRefuses() bool {
	if seccompMode() == 0 {
		return false
	}
	_, _, e := unix.RawSyscall(unix.SYS_UNSHARE, unix.CLONE_NEWUSER|unix.CLONE_PARENT, 0, 0)
	return e != unix.EINVAL
}

// UserNSVerdict reads err, a clone's with CLONE_NEWUSER (the probe's or a
// sandbox's *SetupError of StepClone): whether it is the kernel's refusal
// of a new user namespace, and why. Any other error, transient ones
// (EAGAIN, ENOMEM) among them, is not.
func UserNSVerdict(err error) (bool, string) { return userNSVerdict(err) }

// userNSVerdict reads the probe's error.
func userNSVerdict(err error) (bool, string) {
	var e syscall.Errno
	if se := (*SetupError)(nil); errors.As(err, &se) {
		if se.Step != StepClone {
			return false, ""
		}
		e = se.Errno
	} else if err == nil || !errors.As(err, &e) {
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

package nsexec

import (
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// hintFor explains the usual causes of a setup failure. It runs in the
// parent, which can still read the host's sysctls.
func hintFor(step Step, errno unix.Errno) string {
	switch {
	case step == StepClone && (errno == unix.EPERM || errno == unix.EACCES || errno == unix.EINVAL || errno == unix.ENOSPC || errno == unix.EUSERS):
		return userNSHint()
	case step == StepProc && (errno == unix.EPERM || errno == unix.EACCES):
		// fs/namespace.c mount_too_revealing: a new procfs is refused in a
		// user namespace unless a fully visible procfs is already mounted,
		// which is not the case inside most containers (runc#1658).
		return "the kernel refused a new /proc: probably a container with a masked /proc " +
			"(mount_too_revealing); run it with an unmasked /proc (--security-opt systempaths=unconfined, " +
			"procMount: Unmasked) or outside the container"
	case (step == StepPropagation || step == StepRootfs || step == StepMount || step == StepBind) &&
		(errno == unix.EPERM || errno == unix.EACCES):
		if restricted, _ := sysctl("kernel/apparmor_restrict_unprivileged_userns"); restricted == "1" {
			return "AppArmor denies capabilities in unprivileged user namespaces " +
				"(kernel.apparmor_restrict_unprivileged_userns=1); add an AppArmor profile with 'userns,' for this binary"
		}
		return "mounting in the sandbox's user namespace was refused: an LSM (AppArmor, SELinux) " +
			"or a container's seccomp profile may forbid it"
	case step == StepExec && errno == unix.ENOENT:
		return "the tool is not in the sandbox: check Args[0], the PATH in Env and the binds"
	case step == StepExec && errno == unix.EACCES:
		return "the tool is not executable by the sandbox uid, or sits on a noexec mount"
	case step == StepSysctl && errno == unix.EACCES:
		return "an ipc namespace's sysctl (kernel.shm*, kernel.msg*, kernel.sem, fs.mqueue.*) is writable only by uid 0 " +
			"of the sandbox's user namespace (ipc/ipc_sysctl.c ipc_permissions): run the process as uid 0, or leave it unset"
	case step == StepSysctl && errno == unix.ENOENT:
		return "the kernel has no such sysctl in the sandbox's namespace (a host-wide one exists in the host's only)"
	case step == StepMountTarget && errno == unix.EXDEV:
		return "the mount target resolves outside the new root (a symlink or ..); refused"
	case step == StepMountTarget && errno == unix.ELOOP:
		return "the mount target is a symlink; refused"
	case step == StepRootfs && errno == unix.ENOENT:
		return "the rootfs directory does not exist"
	case (step == StepBind || step == StepRootfs) && errno == unix.ESTALE:
		return "the path was replaced (renamed over) after moat opened it; refused"
	case (step == StepBind || step == StepRootfs) && errno == unix.ELOOP:
		return "a component of the host path became a symlink after moat opened it; refused"
	case step == StepBind && errno == unix.ENOENT:
		return "the bind source does not exist on the host"
	}
	return ""
}

// userNSHint names the sysctl that disables user namespaces on this host,
// or lists the usual suspects.
func userNSHint() string {
	if v, ok := sysctl("user/max_user_namespaces"); ok && v == "0" {
		return "user namespaces are disabled: sysctl user.max_user_namespaces=0"
	}
	if v, ok := sysctl("kernel/unprivileged_userns_clone"); ok && v == "0" {
		return "unprivileged user namespaces are disabled: sysctl kernel.unprivileged_userns_clone=0"
	}
	if v, ok := sysctl("kernel/apparmor_restrict_unprivileged_userns"); ok && v == "1" {
		return "AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns=1)"
	}
	return "creating a user namespace was refused: check sysctl user.max_user_namespaces and " +
		"kernel.unprivileged_userns_clone, AppArmor (kernel.apparmor_restrict_unprivileged_userns), " +
		"or the seccomp profile of the container this runs in"
}

func sysctl(name string) (string, bool) {
	b, err := os.ReadFile("/proc/sys/" + name)
	if err != nil {
		return "", false
	}
	return strings.TrimSpace(string(b)), true
}

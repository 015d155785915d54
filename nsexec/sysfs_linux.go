package nsexec

import "golang.org/x/sys/unix"

// mountSysfs mounts a read-only sysfs at /sys (Config.Sysfs). A sysfs
// shows the network devices of the mounter's network namespace and belongs
// to the user namespace that owns that namespace (fs/sysfs/mount.c
// sysfs_init_fs_context), here the sandbox's own, so the init may mount
// it; the kernel allows it only while a sysfs is fully visible in the
// mount namespace (fs/namespace.c mount_too_revealing), which the host's
// still is before the pivot. Read-only, nosuid, nodev, noexec: nothing in
// it is the sandbox's to change, and its files belong to host root anyway.
func mountSysfs(root int) error {
	sys, err := newFS("sysfs", attrDevNode|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return stepErr(StepMount, "/sys", "create a sysfs of the sandbox's network namespace", err)
	}
	return mountAt(root, "/sys", strictTarget, sys)
}

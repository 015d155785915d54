package main

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// unifiedMount is where a hybrid host mounts its cgroup2 hierarchy.
const unifiedMount = "/sys/fs/cgroup/unified"

// runtimeThread says how to start an OCI runtime on this host: crun refuses
// a hybrid cgroup layout (v1 controllers plus a cgroup2 mount), so on such
// a host its runs start from a thread whose private mount namespace does
// not have the cgroup2 mount; crun then sees a v1 host. The host's mounts
// and cgroups are not touched. why is set when the runtime cannot run
// here this way.
func runtimeThread(runtime string) (thread func() error, why string) {
	if runtime != "crun" || !hybrid() {
		return nil, ""
	}
	if os.Geteuid() != 0 {
		return nil, "this hybrid-cgroup host's cgroup2 mount must be hidden from crun in a private mount namespace, " +
			"which an unprivileged user gets only inside a user namespace, where crun takes itself for root"
	}
	return hideUnified, ""
}

func hybrid() bool {
	var root, unified unix.Statfs_t
	return unix.Statfs("/sys/fs/cgroup", &root) == nil && root.Type != unix.CGROUP2_SUPER_MAGIC &&
		unix.Statfs(unifiedMount, &unified) == nil && unified.Type == unix.CGROUP2_SUPER_MAGIC
}

// hideUnified gives the calling (locked) thread a private mount namespace
// without the cgroup2 mount: unshare(CLONE_NEWNS) applies to the calling
// thread only (it implies CLONE_FS), propagation is made private first so
// the detach cannot reach the host's namespace (mount_namespaces(7)).
func hideUnified() error {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("hide the cgroup2 mount: unshare the mount namespace: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("hide the cgroup2 mount: make / private: %w", err)
	}
	if err := unix.Unmount(unifiedMount, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("hide the cgroup2 mount: detach %s: %w", unifiedMount, err)
	}
	return nil
}

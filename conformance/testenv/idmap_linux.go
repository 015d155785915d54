package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// RequireIDMappedMounts skips (or fails, see Skipf) unless dir's filesystem
// takes an id-mapped mount here (mount_setattr(2) MOUNT_ATTR_IDMAP: Linux
// 5.12, a filesystem that allows it, root). The probe makes a detached,
// id-mapped copy of dir and drops it; nothing is attached anywhere.
func RequireIDMappedMounts(t testing.TB, dir string) {
	t.Helper()
	if err := idMappable(dir); err != nil {
		Skipf(t, "id-mapped mounts of %s: %v", dir, err)
	}
}

// IDMappable says why dir's filesystem takes no id-mapped mount here, or
// nil when it does (the probe of RequireIDMappedMounts), for a test whose
// expected result depends on it.
func IDMappable(dir string) error { return idMappable(dir) }

func idMappable(dir string) error {
	// A user namespace with a one-line map, held by a sleeping process
	// for as long as the probe needs its descriptor.
	cmd := exec.Command("/bin/sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: os.Geteuid(), HostID: 2147000000, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: os.Getegid(), HostID: 2147000000, Size: 1}},
		Pdeathsig:   syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("a user namespace: %w", err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	ns, err := unix.Open("/proc/"+strconv.Itoa(cmd.Process.Pid)+"/ns/user", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(ns)
	tree, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("open_tree: %w", err)
	}
	defer unix.Close(tree)
	a := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_RDONLY, Userns_fd: uint64(ns)}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, &a); err != nil {
		return fmt.Errorf("mount_setattr MOUNT_ATTR_IDMAP: %w", err)
	}
	return nil
}

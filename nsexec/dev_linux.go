package nsexec

import (
	"strconv"

	"golang.org/x/sys/unix"
)

// devNodes are bound from the host's /dev: mknod(2) is refused in a user
// namespace, and nodes on a tmpfs mounted there would not open anyway
// (SB_I_NODEV), so each node is a read-only, nosuid, noexec bind of the host
// node (as bwrap --dev does).
var devNodes = []string{"null", "zero", "full", "random", "urandom", "tty"}

var devLinks = [][2]string{
	{"fd", "/proc/self/fd"},
	{"stdin", "/proc/self/fd/0"},
	{"stdout", "/proc/self/fd/1"},
	{"stderr", "/proc/self/fd/2"},
	{"ptmx", "pts/ptmx"},
}

// mountDev builds a minimal /dev on a small tmpfs, with the sandbox's own
// ipc namespace's message queues at /dev/mqueue when mqueue is set. shm,
// when not -1, is the cloned tree of a Config bind at /dev/shm (a pod's
// shared /dev/shm, which the CRI binds into each of its containers),
// attached there instead of a tmpfs of the sandbox's own. devices are the
// Config's host devices (devices_linux.go).
func mountDev(root int, shmSize int64, mqueue bool, shm int, devices []Device) (err error) {
	defer func() {
		if err != nil && shm >= 0 {
			unix.Close(shm) // not attached (mountAt closes what it was given)
		}
	}()
	dev, err := newFS("tmpfs", unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NOEXEC, "mode=0755", "size=64k", "nr_inodes=64")
	if err != nil {
		return stepErr(StepDev, "/dev", "", err)
	}
	defer unix.Close(dev)
	tfd, err := openTarget(root, "/dev", strictTarget)
	if err != nil {
		return stepErr(StepMountTarget, "/dev", "", err)
	}
	err = unix.MoveMount(dev, "", tfd, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH)
	unix.Close(tfd)
	if err != nil {
		return stepErr(StepDev, "/dev", "", err)
	}
	for _, n := range devNodes {
		src, err := cloneTree(unix.AT_FDCWD, "/dev/"+n, attrDevNode)
		if err != nil {
			return stepErr(StepDev, "/dev/"+n, "bind the host node", err)
		}
		if err := writeAt(dev, n, ""); err != nil {
			unix.Close(src)
			return stepErr(StepDev, "/dev/"+n, "create", err)
		}
		if err := mountAt(dev, n, strictTarget, src); err != nil {
			return err
		}
	}
	for _, l := range devLinks {
		if err := unix.Symlinkat(l[1], dev, l[0]); err != nil {
			return stepErr(StepDev, "/dev/"+l[0], "symlink", err)
		}
	}
	dirs := []string{"shm", "pts"}
	if mqueue {
		dirs = append(dirs, "mqueue")
	}
	for _, d := range dirs {
		if err := unix.Mkdirat(dev, d, 0o755); err != nil {
			return stepErr(StepDev, "/dev/"+d, "mkdir", err)
		}
	}
	// In the order of an OCI config's default mounts (pts, shm, mqueue),
	// which mountinfo shows and the runtime-tools suite checks.
	// A private devpts instance gives the tool pseudo-terminals without the
	// host's; without the gid= option it needs no group mapped. Optional:
	// a kernel or LSM that refuses it leaves /dev/ptmx dangling.
	if pts, err := newFS("devpts", unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NOEXEC, "ptmxmode=0666", "mode=0620"); err == nil {
		if err := mountAt(dev, "pts", strictTarget, pts); err != nil {
			return err
		}
	}
	if shm < 0 {
		if shm, err = newFS("tmpfs", unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC, "source=shm", "mode=1777", "size="+strconv.FormatInt(shmSize, 10)); err != nil {
			return stepErr(StepDev, "/dev/shm", "", err)
		}
	}
	given := shm
	shm = -1 // mountAt closes it either way
	if err := mountAt(dev, "shm", strictTarget, given); err != nil {
		return err
	}
	if mqueue {
		// An mqueue filesystem is of the mounter's ipc namespace
		// (ipc/mqueue.c mqueue_init_fs_context), the sandbox's own.
		mq, err := newFS("mqueue", unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
		if err != nil {
			return stepErr(StepDev, "/dev/mqueue", "", err)
		}
		if err := mountAt(dev, "mqueue", strictTarget, mq); err != nil {
			return err
		}
	}
	if err := mountDevices(dev, devices); err != nil {
		return err
	}
	// Nothing may be created in /dev by the tool.
	if err := setAttr(dev, unix.MOUNT_ATTR_RDONLY, false); err != nil {
		return stepErr(StepDev, "/dev", "read-only", err)
	}
	return nil
}

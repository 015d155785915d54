package nsexec

import (
	"golang.org/x/sys/unix"
)

// The /proc hardening follows runc's default spec (maskedPaths,
// readonlyPaths) and Docker's: entries that leak host-wide information are
// covered, the writable kernel knobs are read-only (peers.md 3.11, 3.12).
var (
	// procNulled files are covered by a bind of /dev/null.
	procNulled = []string{"kcore", "keys", "timer_list", "sched_debug", "latency_stats", "timer_stats", "interrupts", "kallsyms"}
	// procEmptied directories are covered by an empty read-only tmpfs.
	procEmptied = []string{"acpi", "asound", "scsi"}
	// procReadOnly entries are bound read-only onto themselves.
	procReadOnly = []string{"sys", "sysrq-trigger", "irq", "bus", "fs"}
)

const attrProc = unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC

// mountProc mounts a procfs of the sandbox's pid namespace at /proc (a
// process born in that namespace is the only one that can, peers.md 2c.7;
// given, when not -1, is the one the parent made of a joined pid
// namespace, WithJoin), writes the namespaced sysctls through it while
// /proc/sys is still writable, and masks it. With noProc (ModeNoProc) the
// tool gets an empty read-only tmpfs at /proc instead.
func mountProc(root, given int, sysctls map[string]string, noProc bool) error {
	if noProc {
		return mountNoProc(root, given)
	}
	proc := given
	if proc < 0 {
		var err error
		if proc, err = newFS("proc", attrProc); err != nil {
			return stepErr(StepProc, "/proc", "", err)
		}
	}
	defer unix.Close(proc)
	tfd, err := openTarget(root, "/proc", strictTarget)
	if err != nil {
		return stepErr(StepMountTarget, "/proc", "", err)
	}
	err = unix.MoveMount(proc, "", tfd, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH)
	unix.Close(tfd)
	if err != nil {
		return stepErr(StepProc, "/proc", "", err)
	}
	if err := writeSysctls(proc, sysctls); err != nil {
		return err
	}
	cover := func(name string, tree func() (int, error)) error {
		t, err := openTarget(proc, name, strictTarget)
		if err == unix.ENOENT {
			return nil // not in this kernel
		}
		if err != nil {
			return stepErr(StepProc, "/proc/"+name, "", err)
		}
		defer unix.Close(t)
		src, err := tree()
		if err != nil {
			return stepErr(StepProc, "/proc/"+name, "", err)
		}
		if err := attach(src, t); err != nil {
			return stepErr(StepProc, "/proc/"+name, "", err)
		}
		return nil
	}
	for _, n := range procNulled {
		if err := cover(n, func() (int, error) { return cloneTree(unix.AT_FDCWD, "/dev/null", attrDevNode) }); err != nil {
			return err
		}
	}
	for _, n := range procEmptied {
		if err := cover(n, func() (int, error) {
			return newFS("tmpfs", unix.MOUNT_ATTR_RDONLY|attrProc, "mode=0555", "size=4k", "nr_inodes=2")
		}); err != nil {
			return err
		}
	}
	for _, n := range procReadOnly {
		if err := cover(n, func() (int, error) { return cloneTree(proc, n, unix.MOUNT_ATTR_RDONLY|attrProc) }); err != nil {
			return err
		}
	}
	return nil
}

// mountNoProc covers /proc with an empty read-only tmpfs: the kernel
// refuses this sandbox a procfs (HostMode), and the root's own /proc (a
// rootfs's directory, or the tmpfs root's) is no better left bare. A
// joined pid namespace's init needs its procfs to end what it leaves
// behind (reaper_linux.go), so it is refused there.
func mountNoProc(root, given int) error {
	if given >= 0 {
		unix.Close(given)
		return stepErr(StepProc, "/proc", "a sandbox that joins a pid namespace needs a procfs (the init ends what it leaves behind through it); this one is in mode "+string(ModeNoProc), unix.EINVAL)
	}
	tfd, err := openTarget(root, "/proc", strictTarget)
	if err != nil {
		return stepErr(StepMountTarget, "/proc", "", err)
	}
	defer unix.Close(tfd)
	empty, err := newFS("tmpfs", unix.MOUNT_ATTR_RDONLY|attrProc, "mode=0555", "size=4k", "nr_inodes=2")
	if err != nil {
		return stepErr(StepProc, "/proc", "the empty /proc of mode "+string(ModeNoProc), err)
	}
	if err := attach(empty, tfd); err != nil {
		return stepErr(StepProc, "/proc", "the empty /proc of mode "+string(ModeNoProc), err)
	}
	return nil
}

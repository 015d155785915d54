package nsexec

import (
	"golang.org/x/sys/unix"
)

// A sandbox in ModeNoProc has no procfs, yet the init with cgo lists its
// own threads to drop the privileges of each (threads.c): it lists them
// from its task directory in the procfs of the pid namespace it was born
// from (the launcher's, an ancestor of the sandbox's, so the init has a
// pid there and /proc/self names it: fs/proc/self.c), opened before the
// pivot leaves that procfs behind and closed once the drop is done,
// before the tool or the filter exist. It is a directory of the init's
// own threads and nothing else; it is close-on-exec and never reaches the
// tool.
var outerTasks = -1

// openOuterTasks opens /proc/self/task of the mount namespace's procfs
// (the launcher's) for the broadcast.
func openOuterTasks() error {
	fd, err := unix.Open("/proc/self/task", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return stepErr(StepProc, "/proc/self/task", "the init's threads, from the launcher's procfs (mode "+string(ModeNoProc)+")", err)
	}
	outerTasks = fd
	setTaskDir(fd)
	return nil
}

// closeOuterTasks ends the broadcast's use of the launcher's procfs.
func closeOuterTasks() {
	if outerTasks >= 0 {
		setTaskDir(-1)
		unix.Close(outerTasks)
		outerTasks = -1
	}
}

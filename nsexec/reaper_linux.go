package nsexec

import (
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// In a joined pid namespace (WithJoin) the init is not its pid 1: when it
// exits, the kernel ends nothing (zap_pid_ns_processes runs for a
// namespace's init only), and what the tool left behind would live on,
// handed to that namespace's pid 1, another container's. So the init is
// the child subreaper of its tool (init_linux.go), and before it exits it
// ends what it started: the tool's process group first, then each child it
// has, until it has none; the children of one it killed come to it in turn.
// It never signals anything else: not kill(-1), which would reach every
// process of the pod it may signal, nor a group that is not the tool's (a
// process can join a group of its own session only, setpgid(2), and the
// tool's session is its own).

// maxEndRounds bounds endDescendants: each round kills every child the init
// has and waits a millisecond for their children to be handed to it.
const maxEndRounds = 1000

// endDescendants kills and reaps everything the init leaves behind, when it
// is not pid 1 of its pid namespace; tool is the tool's pid (its process
// group, setsid at the fork), or 0 before it ran.
func (c *child) endDescendants(tool int) {
	if !c.reaper {
		return
	}
	if tool > 0 && !c.cfg.NoUserNS { // no-userns: the tool leads no group, it is in the init's
		// The group outlives the reaped tool while it has members, so its
		// id is not reused meanwhile.
		unix.Kill(-tool, unix.SIGKILL)
	}
	for range maxEndRounds {
		kids := children()
		if len(kids) == 0 {
			return
		}
		for _, k := range kids {
			unix.Kill(k, unix.SIGKILL)
		}
		for {
			if pid, _ := unix.Wait4(-1, nil, unix.WNOHANG, nil); pid <= 0 {
				break
			}
		}
		time.Sleep(time.Millisecond)
	}
}

// children lists the init's children, zombies included, from every one of
// its threads (/proc/PID/task/TID/children, proc(5)).
func children() []int {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil
	}
	var pids []int
	for _, t := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + t.Name() + "/children")
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

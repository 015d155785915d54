//go:build linux && !cgo

package nsexec

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// broadcastBounding: without cgo only the exec thread empties its bounding
// set. Each all-threads call stops the world, about 0.1 ms with the init's
// threads, and the bounding set is one call per capability: 41 more would
// cost some 4 ms per cold start. The other threads never execve, and an
// execve from one could gain nothing through a bounding set anyway: their
// permitted, inheritable and ambient sets are empty, no_new_privs ignores
// file capabilities and the locked SECBIT_NOROOT gives uid 0 none
// (capabilities(7), "Transformation of capabilities during execve()").
const broadcastBounding = false

// onEveryThread makes each call on every thread of the Go runtime, the
// world stopped (syscall.AllThreadsSyscall6), in order; without cgo the
// runtime knows every thread there is. A thread it starts between two
// calls is born in the state of the one that made it, after the same
// calls, so target has nothing to check here.
func onEveryThread(calls []threadCall, _ *dropTarget) *threadErr {
	for i, c := range calls {
		a := c.args
		if _, _, e := syscall.AllThreadsSyscall6(c.nr, a[0], a[1], a[2], a[3], a[4], 0); e != 0 {
			return callErr(calls, i, 0, unix.Errno(e))
		}
	}
	return nil
}

// setTaskDir: the runtime's all-threads call lists no directory.
func setTaskDir(int) {}

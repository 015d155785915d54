//go:build linux && cgo

package nsexec

// The broadcast is threads.c; threads.h declares what this file calls
// (tail_cgo_linux.go sets the package's C flags).

/*
#include "threads.h"
*/
import "C"

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// broadcastBounding: with cgo the broadcast empties every thread's bounding
// set too, 41 calls more on each at a fraction of a microsecond each.
const broadcastBounding = true

// broadcastSignal carries the broadcast: a real-time signal, so that one
// sent by anyone else meanwhile is queued, not merged, and raised again
// (moat_broadcast).
const broadcastSignal = 64 // SIGRTMAX

// broadcastTimeoutMS bounds the wait for every thread's answer: a thread
// that does not answer in that time (its signal blocked, say) fails the
// setup.
const broadcastTimeoutMS = 5000

// onEveryThread makes each call on every thread of the init, in order; a
// thread already in target's state (born of one that had dropped) is left
// as it is. target may be nil.
func onEveryThread(calls []threadCall, target *dropTarget) *threadErr {
	if target == nil {
		C.moat_bc_target(0, 0, 0, -1, nil, 0, 0, 0, 0, 0, 0)
	} else {
		var groups *C.uint
		if len(target.groupList) > 0 {
			groups = (*C.uint)(unsafe.Pointer(&target.groupList[0]))
		}
		c := target.caps
		C.moat_bc_target(1, C.uint(target.uid), C.uint(target.gid), C.int(target.groups), groups, C.int(target.lastCap), C.int(target.secbits),
			C.ulonglong(c.Permitted), C.ulonglong(c.Inheritable), C.ulonglong(c.Bounding), C.ulonglong(c.Ambient))
	}
	for i, c := range calls {
		a := c.args
		if C.moat_bc_set(C.int(i), C.long(c.nr), C.ulong(a[0]), C.ulong(a[1]), C.ulong(a[2]), C.ulong(a[3]), C.ulong(a[4])) != 0 {
			return callErr(calls, i, 0, unix.E2BIG)
		}
	}
	var tid C.pid_t
	var call C.int
	if e := C.moat_broadcast(broadcastSignal, broadcastTimeoutMS, &tid, &call); e != 0 {
		return callErr(calls, int(call), int(tid), unix.Errno(e))
	}
	return nil
}

// setTaskDir has the broadcast list the threads from the task directory
// fd, or from /proc/self/task when fd is -1 (noproc_linux.go).
func setTaskDir(fd int) { C.moat_bc_taskdir(C.int(fd)) }

package nsexec

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Every thread of a Go init drops, not only the exec thread.
//
// Credentials, capability sets, the bounding set, securebits and
// no_new_privs are per thread (credentials(7), capabilities(7)), and the Go
// runtime has several threads before the init's first line runs: they were
// born of the init's first thread, so as root they are host uid 0 (unmapped
// in the sandbox's user namespace, and not the namespace's root, so no
// setuid fixup ever clears their capabilities) with the init's capabilities
// in that namespace. The exec thread's own drop leaves them as they are.
// When a tail takes over (tail_linux.go), its execve ends every other
// thread; when the Go init stays pid 1 (cold starts, egress, a dynamic or
// cgo-less launcher), those threads run its supervision: the egress relay
// connected to the host's proxy as uid 0 from them.
//
// So the init gives every thread the exec thread's identity and the same
// empty privileges, after the setup and before the filter: without cgo,
// each call through the runtime's all-threads syscall (syscall
// AllThreadsSyscall6, which stops the world); with cgo, where the runtime
// refuses that, by a signal to each thread in turn whose handler makes the
// calls (threads_cgo_linux.go), as glibc's set*id broadcast and libpsx do.

// threadCall is one system call that every thread of the init makes.
type threadCall struct {
	nr   uintptr
	args [5]uintptr
	what string
	step Step // reported when it fails; StepCapabilities if unset
}

// capsNone are capset(2)'s arguments for empty sets: no capability
// permitted, effective or inheritable on the calling thread (pid 0). They
// live for the process so a call made from another thread may read them.
var capsNone = struct {
	hdr  unix.CapUserHeader
	data [2]unix.CapUserData
}{hdr: unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}}

// privilegeDrop is what every thread does: the sandbox's identity
// (identityCalls, as switchIdentity made it on the exec thread), then no
// privilege (dropCalls, with the bounding set unless bounding is false).
func privilegeDrop(uid, gid uint32, dropGroups, bounding bool) ([]threadCall, *dropTarget, error) {
	last, err := lastCap()
	if err != nil {
		return nil, nil, err
	}
	calls := append(identityCalls(uid, gid, dropGroups), dropCalls(last, bounding)...)
	return calls, &dropTarget{uid: uid, gid: gid, dropGroups: dropGroups, lastCap: last}, nil
}

// identityCalls give a thread the sandbox's groups (none, when dropGroups),
// gid and uid.
func identityCalls(uid, gid uint32, dropGroups bool) []threadCall {
	var calls []threadCall
	if dropGroups {
		calls = append(calls, threadCall{nr: sysSetgroups, what: "setgroups", step: StepIdentity})
	}
	return append(calls,
		threadCall{nr: sysSetresgid, args: [5]uintptr{uintptr(gid), uintptr(gid), uintptr(gid)}, what: "setresgid", step: StepIdentity},
		threadCall{nr: sysSetresuid, args: [5]uintptr{uintptr(uid), uintptr(uid), uintptr(uid)}, what: "setresuid", step: StepIdentity})
}

// dropCalls take every privilege from a thread: no ambient capability; an
// empty bounding set up to last (which needs CAP_SETPCAP, so before the
// capset), unless bounding is false; locked securebits, so that neither the
// thread nor anything it execs can hold or regain a capability; empty
// capability sets; no_new_privs.
func dropCalls(last uintptr, bounding bool) []threadCall {
	calls := []threadCall{{nr: unix.SYS_PRCTL, args: [5]uintptr{unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL}, what: "clear ambient"}}
	if bounding {
		calls = append(calls, boundingCalls(last)...)
	}
	return append(calls,
		threadCall{nr: unix.SYS_PRCTL, args: [5]uintptr{unix.PR_SET_SECUREBITS, lockedSecurebits}, what: "securebits"},
		threadCall{nr: unix.SYS_CAPSET, args: [5]uintptr{uintptr(unsafe.Pointer(&capsNone.hdr)), uintptr(unsafe.Pointer(&capsNone.data[0]))}, what: "capset"},
		threadCall{nr: unix.SYS_PRCTL, args: [5]uintptr{unix.PR_SET_NO_NEW_PRIVS, 1}, what: "no_new_privs", step: StepNoNewPrivs})
}

// boundingCalls empty the bounding set, capability 0 to last.
func boundingCalls(last uintptr) []threadCall {
	calls := make([]threadCall, 0, last+1)
	for cp := uintptr(0); cp <= last; cp++ {
		calls = append(calls, threadCall{nr: unix.SYS_PRCTL, args: [5]uintptr{unix.PR_CAPBSET_DROP, cp}, what: "drop bounding set"})
	}
	return calls
}

// onThisThread makes the calls on the calling thread alone, in order.
func onThisThread(calls []threadCall) *threadErr {
	for _, c := range calls {
		a := c.args
		if _, _, e := unix.RawSyscall6(c.nr, a[0], a[1], a[2], a[3], a[4], 0); e != 0 {
			return &threadErr{step: c.step, detail: c.what, errno: e}
		}
	}
	return nil
}

// dropTarget is the state privilegeDrop's calls leave a thread in: a
// thread that is in it already (one the runtime made from a thread that
// had dropped) skips them, since the calls that need a capability would
// fail on it.
type dropTarget struct {
	uid, gid   uint32
	dropGroups bool
	lastCap    uintptr
}

// lastCap is this kernel's CAP_LAST_CAP: the bounding set of the calling
// thread, still whole, answers for every capability up to it and EINVAL
// past it (PR_CAPBSET_READ, prctl(2)).
func lastCap() (uintptr, error) {
	for cp := uintptr(0); cp < 64; cp++ {
		if _, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, cp, 0, 0, 0); err == unix.EINVAL {
			if cp == 0 {
				break
			}
			return cp - 1, nil
		} else if err != nil {
			return 0, stepErr(StepCapabilities, "", "read the bounding set", err)
		}
	}
	return 0, stepErr(StepCapabilities, "", "no last capability below 64", unix.EINVAL)
}

// dropEveryThread gives every thread of the init, this one included, the
// sandbox's identity and no privilege (see above). A thread that fails a
// call, or does not answer, fails the setup: the tool never starts beside a
// thread that kept a capability.
func (c *child) dropEveryThread() error {
	calls, target, err := privilegeDrop(c.cfg.UID, c.cfg.GID, c.drop, broadcastBounding)
	if err != nil {
		return err
	}
	if !broadcastBounding {
		// This thread's bounding set, which the tool inherits, empties
		// here; the others keep theirs (broadcastBounding says why).
		if err := onThisThread(boundingCalls(target.lastCap)); err != nil {
			return err.setupErr()
		}
	}
	if err := onEveryThread(calls, target); err != nil {
		return err.setupErr()
	}
	return nil
}

// threadErr says which call failed on which thread, and its step.
type threadErr struct {
	step   Step
	detail string
	errno  unix.Errno
}

func (e *threadErr) setupErr() *SetupError {
	step := e.step
	if step == StepUnknown {
		step = StepCapabilities
	}
	return stepErr(step, "", e.detail, e.errno)
}

func callErr(calls []threadCall, i int, tid int, e unix.Errno) *threadErr {
	what, step := "answer", StepCapabilities
	if i >= 0 && i < len(calls) {
		what, step = calls[i].what, calls[i].step
	}
	if tid > 0 {
		return &threadErr{step: step, detail: fmt.Sprintf("thread %d of the init: %s", tid, what), errno: e}
	}
	return &threadErr{step: step, detail: "every thread of the init: " + what, errno: e}
}

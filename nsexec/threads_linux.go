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
}

// capsNone are capset(2)'s arguments for empty sets: no capability
// permitted, effective or inheritable on the calling thread (pid 0). They
// live for the process so a call made from another thread may read them.
var capsNone = struct {
	hdr  unix.CapUserHeader
	data [2]unix.CapUserData
}{hdr: unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}}

// privilegeDrop is what every thread does, in dropPrivileges' order after
// switchIdentity's: the sandbox's groups, gid and uid; no ambient
// capability; an empty bounding set (which needs CAP_SETPCAP, so before the
// capset) unless bounding is false; locked securebits; empty capability
// sets; no_new_privs.
func privilegeDrop(uid, gid uint32, dropGroups, bounding bool) ([]threadCall, *dropTarget, error) {
	var calls []threadCall
	if dropGroups {
		calls = append(calls, threadCall{nr: sysSetgroups, what: "setgroups"})
	}
	calls = append(calls,
		threadCall{nr: sysSetresgid, args: [5]uintptr{uintptr(gid), uintptr(gid), uintptr(gid)}, what: "setresgid"},
		threadCall{nr: sysSetresuid, args: [5]uintptr{uintptr(uid), uintptr(uid), uintptr(uid)}, what: "setresuid"},
		threadCall{nr: unix.SYS_PRCTL, args: [5]uintptr{unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL}, what: "clear ambient"})
	last, err := lastCap()
	if err != nil {
		return nil, nil, err
	}
	for cp := uintptr(0); bounding && cp <= last; cp++ {
		calls = append(calls, threadCall{nr: unix.SYS_PRCTL, args: [5]uintptr{unix.PR_CAPBSET_DROP, cp}, what: "drop bounding set"})
	}
	return append(calls,
			threadCall{nr: unix.SYS_PRCTL, args: [5]uintptr{unix.PR_SET_SECUREBITS, lockedSecurebits}, what: "securebits"},
			threadCall{nr: unix.SYS_CAPSET, args: [5]uintptr{uintptr(unsafe.Pointer(&capsNone.hdr)), uintptr(unsafe.Pointer(&capsNone.data[0]))}, what: "capset"},
			threadCall{nr: unix.SYS_PRCTL, args: [5]uintptr{unix.PR_SET_NO_NEW_PRIVS, 1}, what: "no_new_privs"}),
		&dropTarget{uid: uid, gid: gid, dropGroups: dropGroups, lastCap: last}, nil
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
		for cp := uintptr(0); cp <= target.lastCap; cp++ {
			if err := unix.Prctl(unix.PR_CAPBSET_DROP, cp, 0, 0, 0); err != nil {
				return stepErr(StepCapabilities, "", "drop bounding set", err)
			}
		}
	}
	if err := onEveryThread(calls, target); err != nil {
		return stepErr(StepCapabilities, "", err.detail, err.errno)
	}
	// no_new_privs was the last call; StepNoNewPrivs has nothing left.
	return nil
}

// threadErr says which call failed on which thread.
type threadErr struct {
	detail string
	errno  unix.Errno
}

func callErr(calls []threadCall, i int, tid int, e unix.Errno) *threadErr {
	what := "answer"
	if i >= 0 && i < len(calls) {
		what = calls[i].what
	}
	if tid > 0 {
		return &threadErr{detail: fmt.Sprintf("thread %d of the init: %s", tid, what), errno: e}
	}
	return &threadErr{detail: "every thread of the init: " + what, errno: e}
}

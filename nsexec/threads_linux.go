package nsexec

import (
	"fmt"
	"math/bits"
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
// privileges, after the setup and before the filter: the sandbox's
// permitted, inheritable, ambient and bounding sets (none, unless
// Config.Caps grants some) and no effective capability, the same
// securebits and no_new_privs. Without cgo,
// each call through the runtime's all-threads syscall (syscall
// AllThreadsSyscall6, which stops the world); with cgo, where the runtime
// refuses that, by a signal to each thread in turn whose handler makes the
// calls (threads.c), as glibc's set*id broadcast and libpsx do.

// threadCall is one system call that every thread of the init makes.
type threadCall struct {
	nr   uintptr
	args [5]uintptr
	what string
	step Step // reported when it fails; StepCapabilities if unset
}

// capsWant are capset(2)'s arguments: the sandbox's permitted and
// inheritable sets and no effective capability on the calling thread (pid
// 0); for a sandbox granted none, every set empty. They live for the
// process so a call made from another thread may read them; the child
// sets them once (setCapsWant).
var capsWant = struct {
	hdr  unix.CapUserHeader
	data [2]unix.CapUserData
}{hdr: unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}}

// setCapsWant fills capsWant for caps. The init keeps no effective
// capability: the tool's exec computes its own from the permitted,
// inheritable, ambient and bounding sets (caps.go), and a process the
// init forks later (exec, D2) raises from the permitted set what it needs
// and no more.
func setCapsWant(caps *Capabilities) {
	var prm, inh uint64
	if caps != nil {
		prm, inh = caps.Permitted, caps.Inheritable
	}
	capsWant.data[0] = unix.CapUserData{Permitted: uint32(prm), Inheritable: uint32(inh)}
	capsWant.data[1] = unix.CapUserData{Permitted: uint32(prm >> 32), Inheritable: uint32(inh >> 32)}
}

// privilegeDrop is what every thread does: the sandbox's identity
// (identityCalls, as switchIdentity made it on the exec thread), then the
// sandbox's capability sets and no more (capCalls, with the bounding set
// unless bounding is false).
func privilegeDrop(uid, gid uint32, groups []uint32, setGroups bool, caps *Capabilities, bounding bool) ([]threadCall, *dropTarget, error) {
	last, err := lastCap()
	if err != nil {
		return nil, nil, err
	}
	if err := checkCaps(caps, last); err != nil {
		return nil, nil, err
	}
	calls := append(identityCalls(uid, gid, groups, setGroups), capCalls(last, caps, bounding)...)
	t := &dropTarget{uid: uid, gid: gid, groups: -1, lastCap: last, secbits: securebitsFor(caps)}
	if setGroups {
		t.groups = len(groups)
		t.groupList = groups
	}
	if caps != nil {
		t.caps = *caps
		t.caps.Effective = 0
		t.caps.Ambient &= caps.Permitted & caps.Inheritable
	}
	t.caps.Bounding &= 1<<(last+1) - 1
	return calls, t, nil
}

// identityCalls give a thread the sandbox's groups (when setGroups), gid
// and uid.
func identityCalls(uid, gid uint32, groups []uint32, setGroups bool) []threadCall {
	// As switchIdentity: no setuid fixup for the switch (a thread that
	// is uid 0 of the namespace would lose what capCalls needs).
	calls := []threadCall{{nr: unix.SYS_PRCTL, args: [5]uintptr{unix.PR_SET_SECUREBITS, secbitNoSetuidFixup}, what: "securebits for the identity switch", step: StepIdentity}}
	if setGroups {
		n, p := groupsArg(groups)
		calls = append(calls, threadCall{nr: sysSetgroups, args: [5]uintptr{n, p}, what: "setgroups", step: StepIdentity})
	}
	return append(calls,
		threadCall{nr: sysSetresgid, args: [5]uintptr{uintptr(gid), uintptr(gid), uintptr(gid)}, what: "setresgid", step: StepIdentity},
		threadCall{nr: sysSetresuid, args: [5]uintptr{uintptr(uid), uintptr(uid), uintptr(uid)}, what: "setresuid", step: StepIdentity})
}

// capCalls leave a thread with the sandbox's capability sets (caps; nil:
// none) and nothing more: no ambient capability; the bounding set cut to
// caps.Bounding, capability 0 to last (which needs CAP_SETPCAP, so before
// the capset), unless bounding is false; the securebits (securebitsFor:
// locked when nothing is granted, so that neither the thread nor anything
// it execs can hold or regain a capability); the permitted and
// inheritable sets, no effective one (setCapsWant); the ambient set,
// raised now that the permitted and inheritable sets hold it; and
// no_new_privs.
func capCalls(last uintptr, caps *Capabilities, bounding bool) []threadCall {
	setCapsWant(caps)
	calls := []threadCall{{nr: unix.SYS_PRCTL, args: [5]uintptr{unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL}, what: "clear ambient"}}
	if bounding {
		calls = append(calls, boundingCalls(last, caps)...)
	}
	calls = append(calls,
		threadCall{nr: unix.SYS_PRCTL, args: [5]uintptr{unix.PR_SET_SECUREBITS, securebitsFor(caps)}, what: "securebits"},
		threadCall{nr: unix.SYS_CAPSET, args: [5]uintptr{uintptr(unsafe.Pointer(&capsWant.hdr)), uintptr(unsafe.Pointer(&capsWant.data[0]))}, what: "capset"})
	if caps != nil {
		for set := caps.Ambient & caps.Permitted & caps.Inheritable; set != 0; set &= set - 1 {
			cp := uintptr(bits.TrailingZeros64(set))
			calls = append(calls, threadCall{nr: unix.SYS_PRCTL, args: [5]uintptr{unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_RAISE, cp}, what: "raise ambient " + capNames[cp]})
		}
	}
	return append(calls, threadCall{nr: unix.SYS_PRCTL, args: [5]uintptr{unix.PR_SET_NO_NEW_PRIVS, 1}, what: "no_new_privs", step: StepNoNewPrivs})
}

// boundingCalls drop from the bounding set every capability, 0 to last,
// that caps.Bounding does not keep.
func boundingCalls(last uintptr, caps *Capabilities) []threadCall {
	var keep uint64
	if caps != nil {
		keep = caps.Bounding
	}
	calls := make([]threadCall, 0, last+1)
	for cp := uintptr(0); cp <= last; cp++ {
		if keep&(1<<cp) == 0 {
			calls = append(calls, threadCall{nr: unix.SYS_PRCTL, args: [5]uintptr{unix.PR_CAPBSET_DROP, cp}, what: "drop bounding set"})
		}
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
	uid, gid  uint32
	groups    int // how many supplementary groups; -1: not set (rootless)
	groupList []uint32
	lastCap   uintptr
	secbits   uintptr
	caps      Capabilities // Effective 0, Ambient as raised, Bounding up to lastCap
}

// checkCaps refuses capabilities past this kernel's last one, last.
func checkCaps(caps *Capabilities, last uintptr) *SetupError {
	if extra := caps.all() &^ (1<<(last+1) - 1); extra != 0 {
		return stepErr(StepCapabilities, "", fmt.Sprintf("this kernel has no %v (its last capability is %d)", CapabilityNames(extra), last), unix.EINVAL)
	}
	return nil
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
// sandbox's identity and capability sets and no other privilege (see
// above). A thread that fails a
// call, or does not answer, fails the setup: the tool never starts beside a
// thread that kept a capability.
func (c *child) dropEveryThread() error {
	calls, target, err := privilegeDrop(c.cfg.UID, c.cfg.GID, c.cfg.Groups, c.setGroups, c.cfg.Caps, broadcastBounding)
	if err != nil {
		return err
	}
	if !broadcastBounding {
		// This thread's bounding set, which the tool inherits, is cut
		// here; the others keep theirs (broadcastBounding says why).
		if err := onThisThread(boundingCalls(target.lastCap, c.cfg.Caps)); err != nil {
			return err.setupErr()
		}
	}
	terr := onEveryThread(calls, target)
	closeOuterTasks() // the last use of the launcher's procfs (noproc_linux.go)
	if terr != nil {
		return terr.setupErr()
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

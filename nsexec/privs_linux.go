package nsexec

import (
	"math/bits"
	"slices"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Securebits (include/uapi/linux/securebits.h; capabilities(7)).
const (
	secbitNoRoot                 = 1 << 0
	secbitNoRootLocked           = 1 << 1
	secbitNoSetuidFixup          = 1 << 2
	secbitNoSetuidFixupLocked    = 1 << 3
	secbitKeepCapsLocked         = 1 << 5
	secbitNoCapAmbientRaise      = 1 << 6
	secbitNoCapAmbientRaiseLockd = 1 << 7
)

// lockedSecurebits: uid 0 gets no capabilities at exec (NOROOT), uid
// changes never touch capability sets (NO_SETUID_FIXUP), KEEP_CAPS stays off,
// no ambient capability can be raised, and every bit is locked. They are a
// sandbox's that is granted no capability (Config.Caps nil). One granted
// some has none set, as with runc: uid 0 must get its sets at its exec
// (the legacy root rule that NOROOT turns off), and an entrypoint that
// drops to another uid must lose them at its setuid (the fixup that
// NO_SETUID_FIXUP turns off).
const lockedSecurebits = secbitNoRoot | secbitNoRootLocked | secbitNoSetuidFixup |
	secbitNoSetuidFixupLocked | secbitKeepCapsLocked | secbitNoCapAmbientRaise | secbitNoCapAmbientRaiseLockd

// securebitsFor are the securebits of a sandbox granted caps.
func securebitsFor(caps *Capabilities) uintptr {
	if caps.empty() {
		return lockedSecurebits
	}
	return 0
}

// initCaps are the capabilities the init holds in its user namespace,
// raised as ambient capabilities by the parent's SysProcAttr so they survive
// the re-exec although the init's uid is not 0 there.
var initCaps = []uintptr{
	unix.CAP_SYS_ADMIN,    // mounts, pivot_root, sethostname
	unix.CAP_NET_ADMIN,    // loopback up
	unix.CAP_SETUID,       // switch to the sandbox uid
	unix.CAP_SETGID,       // switch gid, clear groups
	unix.CAP_SETPCAP,      // bounding set, securebits
	unix.CAP_SYS_RESOURCE, // rlimits above the inherited hard limit
}

// initCapsFor are the init's capabilities for a sandbox granted caps: its
// own, and every one it hands on, since it can pass on at exec only what
// its permitted set holds (under no_new_privs an exec never gains a
// permitted capability, security/commoncap.c cap_bprm_creds_from_file),
// and capset(2) can only lower that set.
func initCapsFor(caps *Capabilities) []uintptr {
	out := slices.Clone(initCaps)
	for set := caps.all(); set != 0; set &= set - 1 {
		if cp := uintptr(bits.TrailingZeros64(set)); !slices.Contains(out, cp) {
			out = append(out, cp)
		}
	}
	return out
}

// switchIdentity makes the exec thread the sandbox uid and gid. It uses
// raw per-thread system calls on purpose: the goroutine is locked to this
// thread and every later step of the setup runs on it. The other threads
// of the init follow once the setup is done (dropEveryThread), or end at
// the tail's execve.
// Capabilities survive: the old uid is not 0 in this user namespace, so the
// kernel's setuid fixup does not clear them (security/commoncap.c
// cap_emulate_setxuid compares against the namespace's uid 0), or
// SECBIT_NO_SETUID_FIXUP is set for the switch.
func (c *child) switchIdentity() error {
	// Unless the init is uid 0 of its namespace: in a rootless engine's
	// namespace (WithHostRange maps its ids to themselves) it is, and a
	// setresuid from uid 0 to another would clear its capabilities (the
	// setuid fixup). NO_SETUID_FIXUP, unlocked, keeps them; capCalls sets
	// the sandbox's own securebits later.
	if _, _, e := unix.RawSyscall(unix.SYS_PRCTL, unix.PR_SET_SECUREBITS, secbitNoSetuidFixup, 0); e != 0 {
		return stepErr(StepIdentity, "", "securebits for the identity switch", e)
	}
	if c.setGroups {
		n, p := groupsArg(c.cfg.Groups)
		if _, _, e := unix.RawSyscall(sysSetgroups, n, p, 0); e != 0 {
			return stepErr(StepIdentity, "", "setgroups", e)
		}
	}
	gid, uid := uintptr(c.cfg.GID), uintptr(c.cfg.UID)
	if _, _, e := unix.RawSyscall(sysSetresgid, gid, gid, gid); e != 0 {
		return stepErr(StepIdentity, "", "setresgid", e)
	}
	if _, _, e := unix.RawSyscall(sysSetresuid, uid, uid, uid); e != 0 {
		return stepErr(StepIdentity, "", "setresuid", e)
	}
	// A credential change clears the parent-death signal
	// (kernel/cred.c commit_creds); re-arm it on the exec thread, whose value
	// the tool inherits (rootlesskit re-arms it for the same reason). An
	// init to hand over has none (WithHandover): its sync socket alone
	// ties it to its launcher.
	if c.handover {
		return nil
	}
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		return stepErr(StepIdentity, "", "PR_SET_PDEATHSIG", err)
	}
	return nil
}

// groupsArg are setgroups(2)'s arguments for groups: a copy that lives
// for the process, since the broadcast makes the call from every thread
// (threads_linux.go). The child sets one list in its life.
func groupsArg(groups []uint32) (n, p uintptr) {
	if len(groups) == 0 {
		return 0, 0
	}
	groupsKept = slices.Clone(groups)
	return uintptr(len(groupsKept)), uintptr(unsafe.Pointer(&groupsKept[0]))
}

var groupsKept []uint32

// dropPrivileges leaves the calling thread, the exec thread, whose
// identity switchIdentity already made, with the sandbox's capability
// sets and no more (capCalls). The tail's execve ends every other thread;
// a Go init that stays pid 1 drops on all of them instead
// (dropEveryThread, the same calls).
func (c *child) dropPrivileges() error {
	last, err := lastCap()
	if err != nil {
		return err
	}
	if err := checkCaps(c.cfg.Caps, last); err != nil {
		return err
	}
	if err := onThisThread(capCalls(last, c.cfg.Caps, true)); err != nil {
		return err.setupErr()
	}
	return nil
}

//go:build linux && cgo

package seccomp

import (
	"errors"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"
)

// standInAction picks ERRNO(n) for the largest n (at most 4094, libseccomp refuses 4095) that no
// action of the profile returns, to stand in for the default action while
// libseccomp builds the filter.
func standInAction(profile *specs.LinuxSeccomp) (libseccomp.ScmpAction, error) {
	used := map[uint]bool{}
	mark := func(a specs.LinuxSeccompAction, r *uint) {
		if (a == specs.ActErrno || a == specs.ActTrace) && r != nil {
			used[*r] = true
		}
	}
	mark(profile.DefaultAction, profile.DefaultErrnoRet)
	used[uint(unix.EPERM)] = true // the implicit errnoRet
	used[uint(unix.ENOSYS)] = true
	for _, r := range profile.Syscalls {
		mark(r.Action, r.ErrnoRet)
	}
	for n := uint(4094); n > 0; n-- {
		if !used[n] {
			return libseccomp.ActErrno.SetReturnCode(int16(n)), nil
		}
	}
	return libseccomp.ActInvalid, errors.New("no free errno value for the stand-in default action")
}

// retValue is the SECCOMP_RET_* value the kernel sees for a, the K of the
// BPF return instruction libseccomp emits for it.
func retValue(a libseccomp.ScmpAction) uint32 {
	code := uint32(uint16(a.GetReturnCode()))
	switch a & 0xffff {
	case libseccomp.ActAllow:
		return unix.SECCOMP_RET_ALLOW
	case libseccomp.ActErrno:
		return unix.SECCOMP_RET_ERRNO | code
	case libseccomp.ActTrace:
		return unix.SECCOMP_RET_TRACE | code
	case libseccomp.ActKillThread:
		return unix.SECCOMP_RET_KILL_THREAD
	case libseccomp.ActKillProcess:
		return unix.SECCOMP_RET_KILL_PROCESS
	case libseccomp.ActTrap:
		return unix.SECCOMP_RET_TRAP
	case libseccomp.ActLog:
		return unix.SECCOMP_RET_LOG
	}
	return unix.SECCOMP_RET_KILL_PROCESS
}

// rewriteReturns replaces every "return from" instruction by "return to".
// Only BPF_RET|BPF_K instructions are touched, never a comparison constant.
func rewriteReturns(p Program, from, to uint32) {
	for i := range p {
		if p[i].Code == unix.BPF_RET|unix.BPF_K && p[i].K == from {
			p[i].K = to
		}
	}
}

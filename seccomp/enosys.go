package seccomp

import "golang.org/x/sys/unix"

// Offsets in struct seccomp_data (include/uapi/linux/seccomp.h).
const (
	offsetNr   = 0
	offsetArch = 4
)

// enosysStub returns instructions to put in front of a libseccomp program:
// on the program's architecture a, a syscall number above maxNr (the
// highest the profile names) returns ENOSYS instead of falling through to
// the default action. A syscall newer than the profile is then "not implemented" to the
// tool, which is what a libc expects before it falls back to an older call
// (glibc's fchmodat2 and clone3 probes, for instance); an EPERM there would
// be reported as a real failure. This is the idea of runc's
// libcontainer/seccomp/patchbpf, reduced to one comparison because our
// profiles list syscalls by name and libseccomp knows their numbers.
//
// x32 numbers (bit 30 set on x86_64) are not touched: they fall through to
// libseccomp's program, which refuses them unless the profile adds x32.
// On an architecture without an entry in archs (a.audit == 0) the stub is
// empty, and newer syscalls get the default action.
func enosysStub(maxNr uint32, a archInfo) Program {
	if a.audit == 0 {
		return nil
	}
	ret := unix.SockFilter{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)}
	ldNr := unix.SockFilter{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: offsetNr}
	ldArch := unix.SockFilter{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: offsetArch}
	jgt := func(k uint32, jt, jf uint8) unix.SockFilter {
		return unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JGT | unix.BPF_K, Jt: jt, Jf: jf, K: k}
	}
	if a.x32Bit != 0 {
		return Program{
			ldArch,
			{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 0, Jf: 4, K: a.audit}, // not native: skip to the program
			ldNr,
			{Code: unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K, Jt: 2, Jf: 0, K: a.x32Bit}, // x32: skip to the program
			jgt(maxNr, 0, 1),
			ret,
		}
	}
	return Program{
		ldArch,
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 0, Jf: 3, K: a.audit},
		ldNr,
		jgt(maxNr, 0, 1),
		ret,
	}
}

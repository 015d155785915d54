package attack

import (
	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/seccomp/attack/internal/int80"
)

// Non-native ABIs on x86_64 (peers.md section 3, item 14). The default
// profile lists only the native architecture, so an x32 call (number with
// __X32_SYSCALL_BIT) and an i386 call through int $0x80 both get the
// profile's default action: the errno (marker here), never the kernel.
// Unfiltered, x32 close(-1) is EBADF (or ENOSYS where x32 is compiled out)
// and i386 getpid (20) returns the pid.
var archProbes = []Probe{
	// The legacy path calls of x86_64 that take a mode (arm64 has only the
	// *at forms, in attack.go).
	{"chmod S_ISUID", Deny, sys(unix.SYS_CHMOD, 0, 0o4755)},
	{"chmod S_ISGID", Deny, sys(unix.SYS_CHMOD, 0, 0o2755)},
	{"creat S_ISUID", Deny, sys(unix.SYS_CREAT, 0, 0o4755)},
	{"open O_CREAT S_ISGID", Deny, sys(unix.SYS_OPEN, 0, unix.O_CREAT|unix.O_WRONLY, 0o2755)},
	{"mknod S_IFREG|S_ISUID", Deny, sys(unix.SYS_MKNOD, 0, unix.S_IFREG|0o4755, 0)},
	{"chmod 0755", Allow, sys(unix.SYS_CHMOD, 0, 0o755)},

	{"x32 close", Deny, sys(0x40000000|unix.SYS_CLOSE, ^uintptr(0))},
	{"i386 int 0x80 getpid", Deny, func() unix.Errno {
		r := int80.Syscall(20, 0, 0, 0)
		if r > 0xfffff000 {
			return unix.Errno(-int32(r))
		}
		return 0
	}},
}

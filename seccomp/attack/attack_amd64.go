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
	{"x32 close", Deny, sys(0x40000000|unix.SYS_CLOSE, ^uintptr(0))},
	{"i386 int 0x80 getpid", Deny, func() unix.Errno {
		r := int80.Syscall(20, 0, 0, 0)
		if r > 0xfffff000 {
			return unix.Errno(-int32(r))
		}
		return 0
	}},
}

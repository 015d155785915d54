package seccomp

import "golang.org/x/sys/unix"

// archInfo is what the instructions moat writes itself (enosysStub) need to
// know of an architecture: its AUDIT_ARCH_* value, which seccomp_data.arch
// holds, and the bit that marks an x32 call (x86_64 only).
type archInfo struct {
	audit  uint32
	x32Bit uint32
}

// archs are the architectures, by GOARCH, whose programs get the ENOSYS
// stub and can be compiled from any host (compileFor), so the ones the
// precompiled programs are made for (precompiled.go). On another
// architecture Compile still works natively, without the stub: newer
// syscalls then get the default action.
var archs = map[string]archInfo{
	"amd64": {audit: unix.AUDIT_ARCH_X86_64, x32Bit: 0x40000000}, // __X32_SYSCALL_BIT
	"arm64": {audit: unix.AUDIT_ARCH_AARCH64},
}

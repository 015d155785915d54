package int80

// Supported reports whether Syscall exists on this architecture.
const Supported = true

// Syscall executes int $0x80 with eax=nr, ebx=a1, ecx=a2, edx=a3 and returns
// eax: the result, or -errno as an unsigned 32-bit value.
//
//go:noescape
func Syscall(nr, a1, a2, a3 uint32) uint32

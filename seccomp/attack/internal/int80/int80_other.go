//go:build !amd64

package int80

// Supported reports whether Syscall exists on this architecture.
const Supported = false

// Syscall is not available here; it panics.
func Syscall(nr, a1, a2, a3 uint32) uint32 { panic("int80: not amd64") }

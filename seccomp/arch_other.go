//go:build !amd64 && !arm64

package seccomp

// No ENOSYS stub on architectures without a table here (see enosysStub).
const (
	nativeAuditArch = 0
	x32Bit          = 0
)

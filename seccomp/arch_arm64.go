package seccomp

import "golang.org/x/sys/unix"

const (
	nativeAuditArch = unix.AUDIT_ARCH_AARCH64
	x32Bit          = 0
)

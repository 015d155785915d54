//go:build linux && !386 && !arm

package nsexec

import "golang.org/x/sys/unix"

// 32-bit uid system call numbers (the 16-bit ones share the plain names on
// 386 and arm).
const (
	sysSetgroups = unix.SYS_SETGROUPS
	sysSetresgid = unix.SYS_SETRESGID
	sysSetresuid = unix.SYS_SETRESUID
)

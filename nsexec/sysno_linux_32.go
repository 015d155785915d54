//go:build linux && (386 || arm)

package nsexec

import "golang.org/x/sys/unix"

// 32-bit uid system call numbers: the plain names are the 16-bit calls here.
const (
	sysSetgroups = unix.SYS_SETGROUPS32
	sysSetresgid = unix.SYS_SETRESGID32
	sysSetresuid = unix.SYS_SETRESUID32
)

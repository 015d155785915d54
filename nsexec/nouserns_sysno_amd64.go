//go:build linux

package nsexec

import "golang.org/x/sys/unix"

// noUserNSArchCalls are the filter's EPERM calls that only some
// architectures have (arm64 has only the *at forms).
var noUserNSArchCalls = []uintptr{unix.SYS_CHMOD, unix.SYS_CHOWN, unix.SYS_LCHOWN}

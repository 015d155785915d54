package seccomp

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Load installs p on the calling process with seccomp(2)
// SECCOMP_SET_MODE_FILTER and SECCOMP_FILTER_FLAG_TSYNC, so every thread of
// the Go runtime gets it, not only the calling one.
//
// With TSYNC the kernel reports a thread it could not synchronise (one that
// already runs a diverging filter) as a positive return value, the id of that
// thread, with no errno; the filter is then installed on no thread at all.
// Load treats that as an error (*TSyncError), because a filter missing on one
// Go thread is a filter the tool could step around. See seccomp(2), "RETURN
// VALUE", and kernel/seccomp.c seccomp_can_sync_threads.
//
// Preconditions: no_new_privs is already set (PR_SET_NO_NEW_PRIVS), or the
// caller has CAP_SYS_ADMIN in its user namespace; the filter is irreversible,
// so this is for the sandbox child (or a re-exec'd test binary) only.
// See seccomp(2) and Documentation/userspace-api/seccomp_filter.rst.
func Load(p Program) error {
	if len(p) == 0 {
		return fmt.Errorf("load seccomp program: empty program")
	}
	if len(p) > unix.BPF_MAXINSNS {
		return fmt.Errorf("load seccomp program: %d instructions exceed the kernel's limit of %d", len(p), unix.BPF_MAXINSNS)
	}
	prog := unix.SockFprog{Len: uint16(len(p)), Filter: &p[0]}
	r, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&prog)))
	runtime.KeepAlive(p)
	runtime.KeepAlive(&prog)
	if errno != 0 {
		return fmt.Errorf("load seccomp program: %w", errno)
	}
	if r != 0 {
		return fmt.Errorf("load seccomp program: %w", &TSyncError{TID: int(r)})
	}
	return nil
}

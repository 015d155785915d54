// Package testenv holds the capability probes and skips shared by moat's
// tests, in the spirit of the standard library's internal/testenv: a test that
// needs something the host lacks skips with the reason, and when the
// environment variable MOAT_REQUIRE_ALL=1 is set (CI sets it) that skip is a
// failure instead, so nothing silently stops being tested.
//
// It is a leaf: it imports nothing of moat's, so every package's tests may
// use it.
package testenv

import (
	"os"
	"syscall"
	"testing"
)

// RequireAllVar is the environment variable that turns every capability skip
// into a failure.
const RequireAllVar = "MOAT_REQUIRE_ALL"

// RequireAll reports whether capability skips must fail.
func RequireAll() bool { return os.Getenv(RequireAllVar) == "1" }

// Skipf skips t with the reason, or fails it when MOAT_REQUIRE_ALL=1.
func Skipf(t testing.TB, format string, args ...any) {
	t.Helper()
	if RequireAll() {
		t.Fatalf("required capability missing ("+RequireAllVar+"=1): "+format, args...)
	}
	t.Skipf("skipped, capability missing: "+format, args...)
}

// RequireRoot skips (or fails, see Skipf) unless the test runs as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Skipf(t, "needs root (euid is %d)", os.Geteuid())
	}
}

// PrivateMounts returns the attributes that start a child in a mount
// namespace of its own, where it may mount (a tiny tmpfs, say) without
// touching the host's: as root a plain CLONE_NEWNS, else inside a user
// namespace mapping the caller's own ids to root.
func PrivateMounts() *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS}
	if os.Geteuid() != 0 {
		a.Cloneflags |= syscall.CLONE_NEWUSER
		a.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}}
		a.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}
	}
	return a
}

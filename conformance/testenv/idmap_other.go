//go:build !linux

package testenv

import "testing"

// RequireIDMappedMounts skips (or fails, see Skipf): id-mapped mounts are
// Linux's.
func RequireIDMappedMounts(t testing.TB, dir string) {
	t.Helper()
	Skipf(t, "id-mapped mounts of %s: Linux only", dir)
}

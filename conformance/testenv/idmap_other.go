//go:build !linux

package testenv

import (
	"errors"
	"testing"
)

// RequireIDMappedMounts skips (or fails, see Skipf): id-mapped mounts are
// Linux's.
func RequireIDMappedMounts(t testing.TB, dir string) {
	t.Helper()
	Skipf(t, "id-mapped mounts of %s: Linux only", dir)
}

// IDMappable says id-mapped mounts are Linux's.
func IDMappable(dir string) error { return errors.New("id-mapped mounts are Linux's") }

package testenv

import (
	"os"
	"testing"
)

// The probe tells a filesystem that takes id-mapped mounts from one that
// does not (sysfs never does), so RequireIDMappedMounts skips, or under
// MOAT_REQUIRE_ALL=1 fails, exactly where the host lacks them.
func TestIDMappable(t *testing.T) {
	if os.Geteuid() != 0 {
		Skipf(t, "needs root (euid is %d)", os.Geteuid())
	}
	if err := idMappable("/sys/kernel"); err == nil {
		t.Error("sysfs took an id-mapped mount")
	}
	if err := idMappable(t.TempDir()); err != nil {
		Skipf(t, "id-mapped mounts of the test's temporary directory: %v", err)
	}
}

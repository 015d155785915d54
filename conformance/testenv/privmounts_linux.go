package testenv

import (
	"os"
	"os/exec"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// privateMountsVar marks the copy of the test binary that InPrivateMounts
// started.
const privateMountsVar = "MOAT_TEST_PRIVATE_MOUNTS"

// InPrivateMounts runs the current test again in a copy of this binary in a
// mount namespace of its own, for a test that mounts (volumes below a bind
// source, say) and must never touch the host's mount table. It returns true
// in the caller, which should then return (a failed copy fails t), and
// false in the copy, whose "/" it made private first: a new mount
// namespace keeps the host's peer groups, and a mount there would propagate
// back (mount_namespaces(7)). It needs root (CLONE_NEWNS).
//
//	if testenv.InPrivateMounts(t) { return }
func InPrivateMounts(t *testing.T) bool {
	t.Helper()
	if os.Getenv(privateMountsVar) != "" {
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			t.Fatalf("make / private in the test's mount namespace: %v", err)
		}
		return false
	}
	RequireRoot(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run="+runPattern(t.Name()), "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), privateMountsVar+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	t.Logf("in a private mount namespace:\n%s", out)
	if err != nil {
		t.Fatalf("the run in a private mount namespace failed: %v", err)
	}
	return true
}

package main

import (
	"testing"
)

// TestUmask: process.user.umask (once refused unless 022) is the umask
// of the container's init, which starts the container's process, and so
// of a process exec'd into the container, which the init forks.
func TestUmask(t *testing.T) { testUmask(t) }

// TestUmaskAsNobody is TestUmask run by nobody.
func TestUmaskAsNobody(t *testing.T) { asNobody(t, testUmask) }

func testUmask(t *testing.T) {
	root := t.TempDir()
	spec := sleeper(t)
	u := uint32(0o002)
	spec.Process.User.Umask = &u
	running(t, root, "u1", spec)
	if out, errs, code := rt(t, root, "exec", "u1", "/bin/sh", "-c", "umask; cat /proc/1/status /proc/self/status | grep Umask"); code != 0 || out != "0002\nUmask:\t0002\nUmask:\t0002\n" {
		t.Fatalf("exec: exit %d, %q: %s", code, out, errs)
	}
}

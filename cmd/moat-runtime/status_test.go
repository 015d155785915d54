package main

import (
	"os"
	"strings"
	"testing"
)

// TestMissingCommandFailsCreate: a process.args[0] that is not in the
// container's root, or not executable there, fails create (not start) in
// runc's words, which engines turn into 127 and 126, and leaves no state.
// The names are resolved in the container's root: sh is on the host's
// PATH (/bin), but the image's PATH is /bin of the image, where sh is a
// busybox link; "ls-moat" and a link to a host path are not there.
func TestMissingCommandFailsCreate(t *testing.T) { testMissingCommand(t) }

// TestMissingCommandFailsCreateAsNobody is TestMissingCommandFailsCreate
// run by nobody.
func TestMissingCommandFailsCreateAsNobody(t *testing.T) { asNobody(t, testMissingCommand) }

func testMissingCommand(t *testing.T) {
	root := t.TempDir()
	for name, want := range map[string]string{
		"nosuch":      `exec: "nosuch": executable file not found in $PATH`,
		"/nosuch":     `exec: "/nosuch": stat /nosuch: no such file or directory`,
		"/etc/passwd": `exec: "/etc/passwd": permission denied`,
		"/etc":        `exec: "/etc": is a directory`,
		// /usr/bin/env is the host's; the image has no /usr.
		"/usr/bin/env": `exec: "/usr/bin/env": stat /usr/bin/env: no such file or directory`,
	} {
		b, _ := bundle(t, name)
		_, errs, code := rt(t, root, "create", "--bundle", b, "m1")
		if code != 1 || !strings.Contains(errs, "unable to start container process: "+want) {
			t.Errorf("create with %s: exit %d: %s", name, code, errs)
		}
		if entries, _ := os.ReadDir(root); len(entries) != 0 {
			t.Fatalf("a failed create left state: %v", entries)
		}
	}
	// A found one still runs, by a bare name in the image's PATH.
	b, _ := bundle(t, "sh", "-c", "exit 3")
	if _, errs, code := rt(t, root, "run", "--bundle", b, "m2"); code != 3 {
		t.Fatalf("run sh: exit %d: %s", code, errs)
	}
}

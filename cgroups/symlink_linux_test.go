package cgroups

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/moat-sandbox/moat/conformance/testenv"
	"golang.org/x/sys/unix"
)

// TestNoSymlinkInACgroupfs pins what the package doc's "Symlinks" rests
// on: in every cgroup hierarchy of the host no one, root included, can
// create a symlink, so no component below a mountpoint can be a planted
// link; and the mountpoints Detect reports are resolved paths, with no
// symlink in any component.
func TestNoSymlinkInACgroupfs(t *testing.T) {
	testenv.RequireRoot(t)
	h, err := Detect()
	if err != nil {
		t.Fatal(err)
	}
	mounts := map[string]bool{}
	for _, m := range h.V1 {
		mounts[m] = true
	}
	if h.Unified != "" {
		mounts[h.Unified] = true
	}
	if len(mounts) == 0 {
		testenv.Skipf(t, "no cgroup hierarchy mounted")
	}
	for m := range mounts {
		link := filepath.Join(m, "moat-test-link-"+strconv.Itoa(os.Getpid()))
		err := os.Symlink("/", link)
		if err == nil {
			os.Remove(link)
			t.Errorf("a symlink could be made in the cgroupfs at %s", m)
		} else if !errors.Is(err, unix.EPERM) {
			t.Errorf("symlink in %s: %v, want EPERM", m, err)
		}
		for p := m; p != "/"; p = filepath.Dir(p) {
			var st unix.Stat_t
			if err := unix.Lstat(p, &st); err != nil || st.Mode&unix.S_IFMT == unix.S_IFLNK {
				t.Errorf("mountpoint %s: %s is a symlink (%v)", m, p, err)
			}
		}
	}
	if err := checkParent("a/../../b"); err == nil {
		t.Error("a parent with .. was accepted")
	}
}

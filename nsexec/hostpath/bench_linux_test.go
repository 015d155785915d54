//go:build linux

package hostpath

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// benchPath is a typical bind source: four components, no link.
const benchPath = "/usr/lib/x86_64-linux-gnu/gconv"

// BenchmarkOpen is what resolving one caller path costs: without a link
// (one openat2, direct), and with one (the walk: two system calls a
// component, one more for the last, one for the link), against openat2(2)
// RESOLVE_NO_SYMLINKS, the one system call it replaced in nsexec.
func BenchmarkOpen(b *testing.B) {
	if _, _, err := Open(benchPath, unix.O_PATH, 0); err != nil {
		b.Skipf("no %s here: %v", benchPath, err)
	}
	b.Run("no-link", func(b *testing.B) { // openat2 alone: direct
		for b.Loop() {
			fd, _, err := Open(benchPath, unix.O_PATH, 0)
			if err != nil {
				b.Fatal(err)
			}
			unix.Close(fd)
		}
	})
	// One link of root's on the way (/var/run -> /run): the walk.
	dir := b.TempDir()
	if err := os.Symlink("/usr/lib", filepath.Join(dir, "lib")); err != nil {
		b.Fatal(err)
	}
	linked := filepath.Join(dir, "lib", "x86_64-linux-gnu", "gconv")
	b.Run("one-link", func(b *testing.B) {
		for b.Loop() {
			fd, _, err := Open(linked, unix.O_PATH, 0)
			if err != nil {
				b.Fatal(err)
			}
			unix.Close(fd)
		}
	})
	b.Run("openat2", func(b *testing.B) {
		how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
		for b.Loop() {
			fd, err := unix.Openat2(unix.AT_FDCWD, benchPath, how)
			if err != nil {
				b.Fatal(err)
			}
			unix.Close(fd)
		}
	})
}

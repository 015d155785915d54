//go:build linux

package hostpath

import (
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// raceFixture: for each caller a directory it may write (so it can swap
// its entries) holding "x", the real thing, and "y", a link to ../real of
// another user's. "x" is a directory holding f ("good") or, in the file
// variant, a file "good".
var raceFixture = []entry{
	dir("real", 0, 0o755), file("real/f", 0, "real"), file("realf", 0, "real"),
	dir("root", 0, 0o755),
	dir("root/x", 0, 0o755), file("root/x/f", 0, "good"), link("root/y", nobody, "../real"),
	file("root/xf", 0, "good"), link("root/yf", nobody, "../realf"),
	dir("nobody", nobody, 0o755),
	dir("nobody/x", nobody, 0o755), file("nobody/x/f", nobody, "good"), link("nobody/y", otherUID, "../real"),
	file("nobody/xf", nobody, "good"), link("nobody/yf", otherUID, "../realf"),
}

// TestSwapNeverFollowed: while another goroutine swaps a component (the
// directory on the way, then the last component) with another user's link
// (renameat2 RENAME_EXCHANGE, atomic), Open in a loop either gets the real
// thing or refuses the link; it never reads what the link points to.
func TestSwapNeverFollowed(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		base := fixture(t, raceFixture)
		d := filepath.Join(base, "root")
		if os.Geteuid() != 0 {
			d = filepath.Join(base, "nobody")
		}
		for _, c := range []struct{ x, y, open string }{
			{"x", "y", "x/f"},  // a directory on the way
			{"xf", "yf", "xf"}, // the last component
		} {
			var stop atomic.Bool
			done := make(chan error)
			go func() {
				var err error
				for !stop.Load() && err == nil {
					err = unix.Renameat2(unix.AT_FDCWD, filepath.Join(d, c.x), unix.AT_FDCWD, filepath.Join(d, c.y), unix.RENAME_EXCHANGE)
				}
				done <- err
			}()
			var good, refused int
			for i := 0; i < 200000 && (good < 100 || refused < 100); i++ {
				fd, _, err := Open(filepath.Join(d, c.open), unix.O_RDONLY, 0)
				var le *LinkError
				var ce *ChangedError
				switch {
				case errors.As(err, &le), errors.As(err, &ce):
					refused++
					continue
				case err != nil:
					t.Fatalf("%s: %v", c.open, err)
				}
				b := make([]byte, 16)
				n, _ := unix.Read(fd, b)
				unix.Close(fd)
				if string(b[:n]) != "good" {
					t.Fatalf("%s: read %q: a swapped-in link of another user's was followed", c.open, b[:n])
				}
				good++
			}
			stop.Store(true)
			if err := <-done; err != nil {
				t.Fatalf("swap: %v", err)
			}
			if good == 0 || refused == 0 {
				t.Fatalf("%s: %d opens of the real thing, %d refusals: the swap never raced the opens", c.open, good, refused)
			}
			t.Logf("%s: %d opens of the real thing, %d refused links", c.open, good, refused)
		}
	})
}

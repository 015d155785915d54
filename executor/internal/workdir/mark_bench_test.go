//go:build linux

package workdir

import "testing"

// BenchmarkMarkUnlock is what a marker adds to a workdir: made, locked,
// named, written, unlinked.
func BenchmarkMarkUnlock(b *testing.B) {
	for b.Loop() {
		d := &Dir{markers: -1, lock: -1}
		if err := d.mark(); err != nil {
			b.Fatal(err)
		}
		if err := writePath(d.lock, "/tmp/moat-run-abcdef", false); err != nil {
			b.Fatal(err)
		}
		d.unlock(true)
	}
}

//go:build linux

package nsexec

import (
	"context"
	"os/exec"
	"testing"
)

// BenchmarkStartTrue spawns /bin/true through the full setup (host mode,
// every namespace, the mount tree, the privilege drop) and waits for it.
func BenchmarkStartTrue(b *testing.B) {
	cfg := &Config{Args: []string{"/bin/true"}, Workdir: b.TempDir()}
	for b.Loop() {
		p, err := Start(context.Background(), cfg, Stdio{})
		if err != nil {
			b.Fatal(err)
		}
		if e, err := p.Wait(); err != nil || e.Code != 0 {
			b.Fatalf("%+v %v", e, err)
		}
	}
}

// BenchmarkPlainExecTrue is the floor: fork and exec /bin/true, no sandbox.
func BenchmarkPlainExecTrue(b *testing.B) {
	for b.Loop() {
		if err := exec.Command("/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
	}
}

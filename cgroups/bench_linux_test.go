package cgroups

import (
	"testing"

	"github.com/moat-sandbox/moat/conformance/testenv"
)

// BenchmarkCreateDelete measures one leaf with all three limits made and
// removed, the per-dispatch cgroup cost.
func BenchmarkCreateDelete(b *testing.B) {
	testenv.RequireRoot(b)
	m := newManager(b, testParent("bench"))
	if err := m.Posture().Require(Memory, Pids, CPU); err != nil {
		testenv.Skipf(b, "limits not available: %v", err)
	}
	res := limitsOf(64<<20, 20, 0.5)
	for i := 0; b.Loop(); i++ {
		leaf, err := m.Create("bench-"+itoa(i), res)
		if err != nil {
			b.Fatal(err)
		}
		if err := leaf.Delete(); err != nil {
			b.Fatal(err)
		}
	}
}

package cgroups

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/moat-sandbox/moat/conformance/testenv"
)

// delegatedVar names, for the re-run as nobody, the subtree root delegated.
const delegatedVar = "MOAT_CGROUPS_TEST_DELEGATED"

// delegate creates, as root, a group below this process's cgroup in every
// v1 hierarchy moat uses and chowns it and its control files to nobody, the
// way an administrator delegates a v1 subtree. It is removed at the end.
func delegate(t *testing.T) string {
	t.Helper()
	h, err := Detect()
	if err != nil {
		t.Fatal(err)
	}
	switch h.Layout {
	case V1, Hybrid:
	case Unified:
		// Not a missing capability: TestV2DelegatedSubtreeAsNobody
		// delegates a v2 subtree instead.
		t.Skipf("layout %v: the v1 delegation test needs v1 hierarchies; TestV2DelegatedSubtreeAsNobody covers v2", h.Layout)
	default:
		testenv.Skipf(t, "layout %v: the v1 delegation test needs v1 hierarchies", h.Layout)
	}
	name := testParent("deleg")
	for _, c := range v1Controllers {
		self, ok := h.Self[c]
		if !ok {
			continue
		}
		dir := filepath.Join(self, name)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			removeTree(t, dir)
			if err := rmdir(dir); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		})
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		paths := []string{dir}
		for _, e := range ents {
			paths = append(paths, filepath.Join(dir, e.Name()))
		}
		for _, p := range paths {
			if err := os.Chown(p, testenv.NobodyUID, testenv.NobodyGID); err != nil {
				t.Fatal(err)
			}
		}
	}
	return name
}

func TestRootlessDelegatedSubtree(t *testing.T) {
	if !testenv.ReRun() {
		testenv.RequireRoot(t)
		t.Setenv(delegatedVar, delegate(t))
	}
	if testenv.RunAsUser(t, testenv.NobodyUID, testenv.NobodyGID) {
		return
	}
	if os.Geteuid() != testenv.NobodyUID {
		t.Fatalf("body runs as uid %d", os.Geteuid())
	}
	name := os.Getenv(delegatedVar)
	m := newManager(t, name+"/moat")
	p := m.Posture()
	if err := p.Require(Memory, Pids, CPU); err != nil {
		t.Fatalf("posture in a delegated subtree: %v (%+v)", err, p)
	}
	if err := m.CleanStale(); err != nil {
		t.Fatal(err)
	}
	leaf, err := m.Create("nobody-hog", limitsOf(64<<20, 20, 0.5))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { leaf.Delete() })
	c := startIn(t, leaf, helper(t, "hog", "200"))
	if sig := killedBy(c.cmd.Wait()); sig != syscall.SIGKILL {
		t.Fatalf("hog as nobody ended with signal %v, want SIGKILL", sig)
	}
	u, err := leaf.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if !u.OOMKilled {
		t.Errorf("Stats = %+v, want an OOM kill", u)
	}
	if err := leaf.Delete(); err != nil {
		t.Fatal(err)
	}
}

func TestRootlessWithoutDelegation(t *testing.T) {
	if testenv.RunAsUser(t, testenv.NobodyUID, testenv.NobodyGID) {
		return
	}
	if os.Geteuid() == 0 {
		t.Fatal("body runs as root")
	}
	m, err := New()
	if err != nil {
		t.Fatalf("New without delegation: %v", err)
	}
	defer m.Close()
	p := m.Posture()
	t.Logf("posture: %+v", p)
	if !p.Degraded() || p.Memory.Enforced || p.Memory.Reason == "" || p.Fix == "" {
		t.Fatalf("posture = %+v, want degraded with a reason and a fix", p)
	}
	var re *RequiredError
	if err := p.Require(Memory); !errors.As(err, &re) || re.Fix == "" {
		t.Errorf("Require(Memory) = %v, want a RequiredError with a fix", err)
	}
	_, err = m.Create("x", limitsOf(64<<20, 0, 0))
	var de *DelegationError
	if !errors.Is(err, ErrNoDelegation) || !errors.As(err, &de) || de.Fix == "" {
		t.Errorf("Create = %v, want a DelegationError matching ErrNoDelegation", err)
	}
	if err := m.CleanStale(); err != nil {
		t.Errorf("CleanStale without cgroups: %v", err)
	}
}

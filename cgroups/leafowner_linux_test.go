package cgroups

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/moat-sandbox/moat/conformance/testenv"
)

// TestLeafOwner: a leaf made for another process (WithLeafOwner, as
// moat-runtime's create makes one for the container's monitor) is named
// after it, survives CleanStale while it runs although its maker is gone,
// is found by that process's Manager (Open), and is stale once it is gone.
func TestLeafOwner(t *testing.T) {
	testenv.RequireRoot(t)
	parent := testParent("owner")
	live := newManager(t, parent)
	requireV1Limits(t, live)

	holder := exec.Command("sleep", "60")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer holder.Process.Kill()
	gone := exec.Command("/bin/true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	// The maker: a process that is gone by the time CleanStale runs.
	maker, err := New(WithParent(parent), withOwner(owner{pid: gone.Process.Pid, start: 1}), WithLeafOwner(holder.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := maker.Create("held", limitsOf(64<<20, 20, 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { leaf.Delete() })
	hs, err := startTime(holder.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	want := owner{pid: holder.Process.Pid, start: hs}.leafName("held")
	if err := live.CleanStale(); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range leafDirs(t, live) {
		if !slices.Contains(names, filepath.Base(d)) { // one per v1 hierarchy
			names = append(names, filepath.Base(d))
		}
	}
	if len(names) != 1 || names[0] != want {
		t.Fatalf("after CleanStale with its maker gone: %v, want the holder's %s", names, want)
	}

	// The holder's own Manager finds it; another's does not.
	mine, err := New(WithParent(parent), withOwner(owner{pid: holder.Process.Pid, start: hs}))
	if err != nil {
		t.Fatal(err)
	}
	got, err := mine.Open("held")
	if err != nil {
		t.Fatalf("open by its holder: %v", err)
	}
	if p, err := got.ops.populated(); err != nil || p {
		t.Fatalf("the opened leaf: populated %v %v", p, err)
	}
	if _, err := live.Open("held"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("open by another owner: %v, want ErrNotExist", err)
	}
	if _, err := mine.Open("missing"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("open of a missing leaf: %v, want ErrNotExist", err)
	}
	if _, err := mine.Open("../x"); err == nil {
		t.Fatal("an invalid id was opened")
	}

	holder.Process.Kill()
	holder.Wait()
	if err := live.CleanStale(); err != nil {
		t.Fatal(err)
	}
	if d := leafDirs(t, live); len(d) != 0 {
		t.Fatalf("a leaf whose holder is gone survived CleanStale: %v", d)
	}
	if _, err := New(WithParent(parent), WithLeafOwner(holder.Process.Pid)); err == nil {
		t.Fatal("a Manager for a gone leaf owner was made")
	}
}

//go:build linux

package workdir

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/conformance/testenv"
	"github.com/moat-sandbox/moat/nsexec/hostpath"
)

// TestCreateRefusesAPlantedBaseLink (issue 28 item 7): a workdir base
// reached through another user's symlink, or through root's own in a
// directory anyone may write, is refused with the link named, and nothing
// is made where it points. Root's own link in its own directory is
// followed, and the workdir's path has no link in it (the sandbox setup
// reopens it following none).
func TestCreateRefusesAPlantedBaseLink(t *testing.T) {
	testenv.RequireRoot(t)
	ownMarkers(t)
	log := slog.New(slog.DiscardHandler)
	target := t.TempDir() // where a planted link would have the workdir made
	base := t.TempDir()
	must(t, os.Chmod(base, 0o755))

	theirs := filepath.Join(base, "theirs")
	must(t, os.Symlink(target, theirs))
	must(t, os.Lchown(theirs, testenv.NobodyUID, testenv.NobodyGID))
	open := filepath.Join(base, "open")
	must(t, os.Mkdir(open, 0o777))
	must(t, os.Chmod(open, 0o777))
	must(t, os.Symlink(target, filepath.Join(open, "tmp")))
	for _, c := range []struct{ base, link string }{
		{theirs, theirs},
		{filepath.Join(theirs, "sub"), theirs},
		{filepath.Join(open, "tmp"), filepath.Join(open, "tmp")},
	} {
		d, err := Create(c.base, "moat-run-", log)
		if err == nil {
			d.Remove(log)
		}
		var le *hostpath.LinkError
		if !errors.As(err, &le) || le.Link != c.link || !strings.Contains(err.Error(), c.base) {
			t.Errorf("Create(%s): %v, want a *hostpath.LinkError naming %s", c.base, err, c.link)
		}
	}
	if ents, _ := os.ReadDir(target); len(ents) != 0 {
		t.Fatalf("a workdir was made through a planted link: %v", ents)
	}

	mine := filepath.Join(base, "mine")
	must(t, os.Symlink(target, mine))
	d, err := Create(mine, "moat-run-", log)
	if err != nil {
		t.Fatalf("through root's own link: %v", err)
	}
	defer d.Remove(log)
	if filepath.Dir(d.Path) != target {
		t.Fatalf("workdir %s, want it named by its real path in %s", d.Path, target)
	}
}

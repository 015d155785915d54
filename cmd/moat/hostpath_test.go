package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/conformance/testenv"
)

// TestExposeArgvRefusesAPlantedLink (issue 28 item 7): an argument that is,
// or lies behind, a link someone else could have planted (another user's,
// or root's own in a directory anyone may write) is refused naming the
// link, not resolved and bound: the bind source --expose-argv hands nsexec
// has no link left for it to refuse. The caller's own link is followed.
func TestExposeArgvRefusesAPlantedLink(t *testing.T) {
	testenv.RequireRoot(t)
	dir, x := exposeFixture(t)
	secret := filepath.Join(t.TempDir(), "shadow")
	os.WriteFile(secret, []byte("root only"), 0o600)
	shared := filepath.Join(dir, "shared")
	os.Mkdir(shared, 0o755)
	theirs := filepath.Join(shared, "input.csv")
	os.Symlink(secret, theirs)
	os.Lchown(theirs, testenv.NobodyUID, testenv.NobodyGID)
	open := filepath.Join(dir, "open")
	os.Mkdir(open, 0o777)
	os.Chmod(open, 0o777)
	os.Symlink(filepath.Dir(secret), filepath.Join(open, "data"))
	for _, c := range []struct{ arg, link string }{
		{theirs, theirs},
		{filepath.Join(open, "data", "shadow"), filepath.Join(open, "data")},
	} {
		x.mounts = nil
		_, mounts, err := x.exposeArgv([]string{"/bin/cat", c.arg})
		var e *ExposeError
		if !errors.As(err, &e) || !strings.Contains(e.Reason, "is a symlink") || !strings.Contains(e.Reason, c.link) {
			t.Errorf("expose %s: %v (mounts %v), want an ExposeError naming the link %s", c.arg, err, mounts, c.link)
		}
	}
	x.mounts = nil
	mine := filepath.Join(dir, "mine.csv")
	os.Symlink(filepath.Join(dir, "data.csv"), mine)
	_, mounts, err := x.exposeArgv([]string{"/bin/cat", mine})
	if err != nil || len(mounts) != 1 || mounts[0].Source != filepath.Join(dir, "data.csv") {
		t.Fatalf("the caller's own link: %v %v", mounts, err)
	}
}

// TestArgsFileNotReadThroughAPlantedLink: --args-file through another
// user's link is refused (exit 64, naming the link), and what the link
// points to never reaches the tool; the caller's own link is followed.
func TestArgsFileNotReadThroughAPlantedLink(t *testing.T) {
	testenv.RequireRoot(t)
	secret := filepath.Join(t.TempDir(), "args.json")
	os.WriteFile(secret, []byte(`{"secret":"root only"}`), 0o600)
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	theirs := filepath.Join(dir, "args.json")
	os.Symlink(secret, theirs)
	os.Lchown(theirs, testenv.NobodyUID, testenv.NobodyGID)
	r := moat(t, "", "dispatch", "--tool", "x", "--executor", "subprocess", "--args-file", theirs, "--", "/bin/cat")
	if r.code != 64 || strings.Contains(r.stdout, "root only") || !strings.Contains(r.stderr, theirs) {
		t.Fatalf("through a planted link: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	mine := filepath.Join(dir, "mine.json")
	os.Symlink(secret, mine)
	r = moat(t, "", "dispatch", "--tool", "x", "--executor", "subprocess", "--args-file", mine, "--", "/bin/cat")
	if !strings.Contains(r.stdout, "root only") {
		t.Fatalf("through root's own link: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

package ledger

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/moat-sandbox/moat/conformance/testenv"
	"github.com/moat-sandbox/moat/nsexec/hostpath"
)

// The hostile tests of issue 28 item 7 for the ledger: a symlink on the
// way to the ledger's directory is followed only if root or the caller
// could have planted it, and the repair lock goes where the ledger is.

// victimLedger is a ledger of the caller's that a planted link points at,
// in a directory of its own, and what it holds.
func victimLedger(t *testing.T) (dir, before string) {
	t.Helper()
	path := writeLedger(t, intentLine(t, intentFor("k", "a", 1))+tornFrag)
	os.Chmod(filepath.Dir(path), 0o755)
	return filepath.Dir(path), readFile(t, path)
}

// checkUntouched: nothing was written, created or locked in dir.
func checkUntouched(t *testing.T, dir, before string) {
	t.Helper()
	if got := readFile(t, filepath.Join(dir, "effects.jsonl")); got != before {
		t.Fatalf("the link's target ledger was written: %q", got)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("the link's target directory holds %v, want the ledger alone", ents)
	}
}

// wantLinkRefused: Open and Scan both refuse path with ProblemSymlink
// wrapping the *hostpath.LinkError that names link.
func wantLinkRefused(t *testing.T, path, link string) {
	t.Helper()
	l, err := Open(path)
	if err == nil {
		l.Intent(t.Context(), intentFor("k2", "a", 2)) // what a wrong accept would do
		l.Close()
	}
	_, serr := Scan(path)
	for _, err := range []error{err, serr} {
		fe := wantProblem(t, err, ProblemSymlink)
		var le *hostpath.LinkError
		if !errors.As(fe, &le) || le.Link != link || le.Path != path {
			t.Fatalf("%v: want a *hostpath.LinkError naming %s and %s", err, path, link)
		}
	}
}

// TestOpenRefusesPlantedDirectoryLinks (as root): another user's link to
// the caller's ledger directory, root's own link in a directory anyone may
// write, and root's own link in another user's directory are not
// followed; nothing is written or locked through them. Root's link in its
// own directory is.
func TestOpenRefusesPlantedDirectoryLinks(t *testing.T) {
	testenv.RequireRoot(t)
	victim, before := victimLedger(t)
	base := t.TempDir()
	os.Chmod(base, 0o755)

	foreign := filepath.Join(base, "foreign")
	if err := os.Symlink(victim, foreign); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(foreign, testenv.NobodyUID, testenv.NobodyGID); err != nil {
		t.Fatal(err)
	}
	wantLinkRefused(t, filepath.Join(foreign, "effects.jsonl"), foreign)

	open := filepath.Join(base, "open")
	os.Mkdir(open, 0o777)
	os.Chmod(open, 0o777)
	os.Symlink(victim, filepath.Join(open, "dir"))
	wantLinkRefused(t, filepath.Join(open, "dir", "effects.jsonl"), filepath.Join(open, "dir"))

	theirs := filepath.Join(base, "theirs")
	os.Mkdir(theirs, 0o755)
	os.Chown(theirs, testenv.NobodyUID, testenv.NobodyGID)
	os.Symlink(victim, filepath.Join(theirs, "dir"))
	wantLinkRefused(t, filepath.Join(theirs, "dir", "effects.jsonl"), filepath.Join(theirs, "dir"))
	checkUntouched(t, victim, before)

	mine := filepath.Join(base, "mine")
	os.Symlink(victim, mine)
	mustScan(t, filepath.Join(mine, "effects.jsonl"))
}

// TestOpenFollowsOnlyTheCallersLinks (as nobody): the caller's own link in
// its own directory is followed; the same link in a directory everyone may
// write is not.
func TestOpenFollowsOnlyTheCallersLinks(t *testing.T) {
	if testenv.RunAsUser(t, testenv.NobodyUID, testenv.NobodyGID) {
		return
	}
	victim, before := victimLedger(t)
	base := t.TempDir()
	mine := filepath.Join(base, "mine")
	if err := os.Symlink(victim, mine); err != nil {
		t.Fatal(err)
	}
	mustScan(t, filepath.Join(mine, "effects.jsonl"))

	open := filepath.Join(base, "open")
	os.Mkdir(open, 0o777)
	os.Chmod(open, 0o777)
	os.Symlink(victim, filepath.Join(open, "dir"))
	wantLinkRefused(t, filepath.Join(open, "dir", "effects.jsonl"), filepath.Join(open, "dir"))
	checkUntouched(t, victim, before)
}

// TestRepairLockStaysWithTheLedger: the ledger's directory is renamed away
// and a link put in its place after Open (by whoever could). The repair
// lock is still taken in the ledger's own directory, not where the path
// now leads. As root and as nobody.
func TestRepairLockStaysWithTheLedger(t *testing.T) {
	_ = testenv.RunAsUser(t, testenv.NobodyUID, testenv.NobodyGID)
	base := t.TempDir()
	sub := filepath.Join(base, "sub")
	os.Mkdir(sub, 0o700)
	path := filepath.Join(sub, "effects.jsonl")
	if err := os.WriteFile(path, []byte(intentLine(t, intentFor("k", "a", 1))+tornFrag), 0o600); err != nil {
		t.Fatal(err)
	}
	elsewhere := t.TempDir()
	l := mustOpen(t, path, fixedNow(3))

	moved := filepath.Join(base, "moved")
	if err := os.Rename(sub, moved); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, sub); err != nil {
		t.Fatal(err)
	}
	held := false
	l.beforeTruncate = func() {
		if _, err := os.Lstat(filepath.Join(elsewhere, "effects.jsonl.repair-lock")); err == nil {
			t.Error("the repair lock was taken through the link, where the path now leads")
		}
		_, err := os.Lstat(filepath.Join(moved, "effects.jsonl.repair-lock"))
		held = err == nil
	}
	mustIntent(t, l, intentFor("k2", "a", 2))
	if !held {
		t.Fatal("the repair lock was not in the ledger's own directory during the repair")
	}
	if ents, _ := os.ReadDir(elsewhere); len(ents) != 0 {
		t.Fatalf("the link's target got %v", ents)
	}
	res := mustScan(t, filepath.Join(moved, "effects.jsonl"))
	if len(res.Torn) != 1 || len(res.Intents) != 2 {
		t.Fatalf("%+v", res)
	}
	assertNoLock(t, filepath.Join(moved, "effects.jsonl"))
}

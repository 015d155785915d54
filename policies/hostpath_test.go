package policies

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/conformance/testenv"
	"github.com/moat-sandbox/moat/nsexec/hostpath"
)

// The hostile tests of issue 28 item 7 for policy files: a policy decides
// what a sandbox may do, so a link planted in its path must not hand root
// (or the caller) someone else's.

// weakPolicy is what a planter would put behind the link.
const weakPolicy = `{"name":"planted","extends":"default","unfiltered":true,` +
	`"mounts":[{"source":"/etc","destination":"/etc","type":"bind","options":["rw"]}]}`

func wantPolicyLinkRefused(t *testing.T, path, link string) {
	t.Helper()
	p, err := Load(path)
	var le *hostpath.LinkError
	if !errors.As(err, &le) || le.Link != link {
		t.Fatalf("Load(%s) = %v, %v; want a *hostpath.LinkError naming %s", path, p, err, link)
	}
}

// TestLoadRefusesPlantedLinks (as root): a policy file, its directory or
// an extends base reached through another user's link, or through root's
// own link in a directory anyone may write, is refused; root's own link
// in its own directory is followed.
func TestLoadRefusesPlantedLinks(t *testing.T) {
	testenv.RequireRoot(t)
	theirs := t.TempDir() // the planter's files
	if err := os.WriteFile(filepath.Join(theirs, "p.json"), []byte(weakPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	base := t.TempDir()
	os.Chmod(base, 0o755)
	plant := func(name, target string, uid int) string {
		p := filepath.Join(base, name)
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
		return p
	}
	file := plant("file.json", filepath.Join(theirs, "p.json"), testenv.NobodyUID)
	wantPolicyLinkRefused(t, file, file)
	dir := plant("dir", theirs, testenv.NobodyUID)
	wantPolicyLinkRefused(t, filepath.Join(dir, "p.json"), dir)

	// A policy of root's whose relative extends goes through a planted link.
	child := filepath.Join(base, "child.json")
	os.WriteFile(child, []byte(`{"name":"child","extends":"dir/p.json"}`), 0o644)
	wantPolicyLinkRefused(t, child, dir)

	open := filepath.Join(base, "open")
	os.Mkdir(open, 0o777)
	os.Chmod(open, 0o777)
	if err := os.Symlink(filepath.Join(theirs, "p.json"), filepath.Join(open, "p.json")); err != nil {
		t.Fatal(err)
	}
	wantPolicyLinkRefused(t, filepath.Join(open, "p.json"), filepath.Join(open, "p.json"))

	mine := plant("mine.json", filepath.Join(theirs, "p.json"), 0)
	if p, err := Load(mine); err != nil || p.Name != "planted" {
		t.Fatalf("through root's own link: %v, %v", p, err)
	}
}

// TestLoadCallersOwnLinks (as nobody): the caller's own link in its own
// directory is followed; in a directory everyone may write it is not.
func TestLoadCallersOwnLinks(t *testing.T) {
	if testenv.RunAsUser(t, testenv.NobodyUID, testenv.NobodyGID) {
		return
	}
	d := t.TempDir()
	os.WriteFile(filepath.Join(d, "p.json"), []byte(weakPolicy), 0o644)
	os.Symlink(filepath.Join(d, "p.json"), filepath.Join(d, "mine.json"))
	if p, err := Load(filepath.Join(d, "mine.json")); err != nil || p.Name != "planted" {
		t.Fatalf("through the caller's own link: %v, %v", p, err)
	}
	open := filepath.Join(d, "open")
	os.Mkdir(open, 0o777)
	os.Chmod(open, 0o777)
	os.Symlink(filepath.Join(d, "p.json"), filepath.Join(open, "p.json"))
	wantPolicyLinkRefused(t, filepath.Join(open, "p.json"), filepath.Join(open, "p.json"))
}

// TestLoadRefusesAFIFOWithoutBlocking: a FIFO planted as the policy file
// would hang the open waiting for a writer.
func TestLoadRefusesAFIFOWithoutBlocking(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "p.json")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := Load(fifo); done <- err }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a FIFO loaded as a policy")
		}
	case <-time.After(10 * time.Second):
		// Unblock the open so the test binary can end.
		if f, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
			f.Close()
		}
		t.Fatal("Load blocked on a FIFO")
	}
}

//go:build linux

package hostpath

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/moat-sandbox/moat/conformance/testenv"
	"golang.org/x/sys/unix"
)

// The hostile tests plant links and directories owned by users other than
// the caller. Only root can make those, so root builds one fixture, and the
// re-run as nobody (testenv.RunAsUser) finds it through fixtureVar: the
// same tree, judged by another caller.

const (
	fixtureVar = "MOAT_HOSTPATH_FIXTURE"
	otherUID   = 1234 // neither root nor nobody: "another user" for both
	nobody     = testenv.NobodyUID
)

// entry is one thing of the fixture: a directory (mode, no target), a
// file (content) or a symlink (target), with its owner.
type entry struct {
	path    string
	uid     int
	mode    uint32 // directories, as chmod(2) takes it
	target  string // symlinks
	content string // files
	hard    string // a hard link of this fixture path
}

func dir(path string, uid int, mode uint32) entry { return entry{path: path, uid: uid, mode: mode} }
func link(path string, uid int, target string) entry {
	return entry{path: path, uid: uid, target: target}
}
func file(path string, uid int, content string) entry {
	return entry{path: path, uid: uid, content: content, mode: 0o644}
}

// fixture returns the shared fixture's directory: built here as root, or
// the one the root run built for this re-run.
func fixture(t *testing.T, entries []entry) string {
	t.Helper()
	if testenv.ReRun() {
		b := os.Getenv(fixtureVar)
		if b == "" {
			t.Fatal("re-run without the fixture")
		}
		return b
	}
	testenv.RequireRoot(t) // only root can own files for others
	base, err := os.MkdirTemp("", "moat-hostpath-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		p := filepath.Join(base, e.path)
		switch {
		case e.hard != "":
			err = unix.Linkat(unix.AT_FDCWD, filepath.Join(base, e.hard), unix.AT_FDCWD, p, 0)
		case e.target != "":
			err = os.Symlink(e.target, p)
		case e.content != "":
			err = os.WriteFile(p, []byte(e.content), 0o644)
		default:
			if err = os.Mkdir(p, 0); err == nil {
				err = unix.Chmod(p, e.mode) // past the umask, sticky included
			}
		}
		if err == nil && e.hard == "" {
			err = os.Lchown(p, e.uid, e.uid)
		}
		if err != nil {
			t.Fatalf("fixture %s: %v", e.path, err)
		}
	}
	t.Setenv(fixtureVar, base)
	return base
}

// asRootAndNobody runs body as root, then again as nobody in a copy of the
// test binary (the fixture passes along in the environment).
func asRootAndNobody(t *testing.T, body func(t *testing.T)) {
	t.Helper()
	body(t)
	if t.Failed() || testenv.ReRun() {
		return
	}
	testenv.RunAsUser(t, nobody, nobody)
}

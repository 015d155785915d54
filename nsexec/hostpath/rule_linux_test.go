//go:build linux

package hostpath

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// ruleFixture: every kind of component the rule judges. "real/f" holds
// "real"; every link below points at real.
var ruleFixture = func() []entry {
	es := []entry{
		dir("real", 0, 0o755), file("real/f", 0, "real"),
		link("rootlink", 0, "real"),
		link("nobodylink", nobody, "real"),
		link("otherlink", otherUID, "real"),
		link("flink", nobody, "real/f"),
		dir("open", 0, 0o777), link("open/rootlink", 0, "../real"),
		dir("group", 0, 0o775), link("group/rootlink", 0, "../real"),
		dir("sticky", 0, 0o1777),
		link("sticky/rootlink", 0, "../real"),
		link("sticky/nobodylink", nobody, "../real"),
		link("sticky/otherlink", otherUID, "../real"),
		dir("hsrc", 0, 0o755), link("hsrc/link", 0, "../real"), {path: "sticky/hard", hard: "hsrc/link"},
		dir("nobodydir", nobody, 0o755), link("nobodydir/rootlink", 0, "../real"),
		dir("nobodydir/sub", 0, 0o755), link("nobodydir/sub/rootlink", 0, "../../real"),
		dir("otherdir", otherUID, 0o755), dir("otherdir/plain", otherUID, 0o755),
		file("otherdir/plain/f", otherUID, "other"), link("otherdir/rootlink", 0, "../real"),
		link("loop1", 0, "loop2"), link("loop2", 0, "loop1"),
		dir("sub1", 0, 0o755), link("sub1/up", 0, "../real"),
		dir("drop", nobody, 0o755), link("otherdrop", otherUID, "drop"),
	}
	// l0 -> l1 -> ... -> l40 -> real: 41 links from l0, 40 from l1.
	for i := 0; i < 41; i++ {
		next := fmt.Sprintf("l%d", i+1)
		if i == 40 {
			next = "real"
		}
		es = append(es, link(fmt.Sprintf("l%d", i), 0, next))
	}
	return es
}()

// Who follows a case's links: root, nobody, nobody with TrustOnlyRoot.
const (
	byRoot = 1 << iota
	byNobody
	byNobodyRootOnly
	byAll = byRoot | byNobody | byNobodyRootOnly
)

type ruleCase struct {
	path    string // below the fixture
	follows int    // who reaches real (or the content below)
	link    string // the link refused, for the others
	content string // what the followers read; "real" by default
}

var ruleCases = []ruleCase{
	{path: "real/f", follows: byAll},
	{path: "real/../real/f", follows: byAll},
	{path: "rootlink/f", follows: byAll},
	{path: "sub1/up/f", follows: byAll},
	{path: "l1/f", follows: byAll},
	{path: "sticky/rootlink/f", follows: byAll},
	{path: "otherdir/plain/f", follows: byAll, content: "other"}, // no link on the way
	{path: "nobodylink/f", follows: byNobody, link: "nobodylink"},
	{path: "flink", follows: byNobody, link: "flink"},
	{path: "sticky/nobodylink/f", follows: byNobody, link: "sticky/nobodylink"},
	{path: "nobodydir/rootlink/f", follows: byNobody, link: "nobodydir/rootlink"},
	{path: "nobodydir/sub/rootlink/f", follows: byNobody, link: "nobodydir/sub/rootlink"},
	{path: "otherlink/f", link: "otherlink"},
	{path: "open/rootlink/f", link: "open/rootlink"},
	{path: "group/rootlink/f", link: "group/rootlink"},
	{path: "sticky/otherlink/f", link: "sticky/otherlink"},
	{path: "sticky/hard/f", link: "sticky/hard"},
	{path: "otherdir/rootlink/f", link: "otherdir/rootlink"},
	{path: "loop1/f", link: "loop1"}, // whichever of the two is the 41st
	{path: "l0/f", link: "l40"},
}

func (c ruleCase) followed(rootOnly bool) bool {
	switch {
	case os.Geteuid() == 0:
		return c.follows&byRoot != 0
	case rootOnly:
		return c.follows&byNobodyRootOnly != 0
	}
	return c.follows&byNobody != 0
}

// TestRule: each component the rule judges, for root and for nobody, with
// and without TrustOnlyRoot. A followed path reads what it names; a refused
// one is a *LinkError (and ELOOP) naming the path and the link.
func TestRule(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		base := fixture(t, ruleFixture)
		for _, rootOnly := range []bool{false, true} {
			var opts []Option
			if rootOnly {
				opts = append(opts, TrustOnlyRoot())
			}
			for _, c := range ruleCases {
				path := filepath.Join(base, c.path)
				fd, real, err := Open(path, unix.O_RDONLY, 0, opts...)
				if !c.followed(rootOnly) {
					checkRefused(t, err, path, c.link, base)
					if err == nil {
						unix.Close(fd)
					}
					continue
				}
				if err != nil {
					t.Errorf("uid %d rootOnly=%v: %s: %v, want it followed", os.Geteuid(), rootOnly, c.path, err)
					continue
				}
				b := make([]byte, 64)
				n, _ := unix.Read(fd, b)
				unix.Close(fd)
				want := c.content
				if want == "" {
					want = "real"
				}
				if string(b[:n]) != want || strings.Contains(real, "link") || strings.Contains(real, "..") {
					t.Errorf("uid %d rootOnly=%v: %s read %q at %s, want %q at a path without links", os.Geteuid(), rootOnly, c.path, b[:n], real, want)
				}
			}
		}
	})
}

func checkRefused(t *testing.T, err error, path, link, base string) {
	t.Helper()
	var le *LinkError
	if !errors.As(err, &le) {
		t.Errorf("uid %d: %s: got %v, want a *LinkError", os.Geteuid(), path, err)
		return
	}
	wantLink := filepath.Join(base, link)
	if link == "loop1" {
		if le.Link != wantLink && le.Link != filepath.Join(base, "loop2") {
			t.Errorf("%s: link %s, want the loop's", path, le.Link)
		}
	} else if le.Link != wantLink {
		t.Errorf("uid %d: %s: names link %s, want %s (%v)", os.Geteuid(), path, le.Link, wantLink, err)
	}
	if le.Path != path || !strings.Contains(err.Error(), le.Link) || le.Reason == "" {
		t.Errorf("%s: error %q does not name the path, the link and why", path, err)
	}
	if !errors.Is(err, syscall.ELOOP) {
		t.Errorf("%s: %v is not ELOOP", path, err)
	}
}

// TestRefusedCreatesNothing: a refused link creates nothing where it
// points, neither a file (O_CREAT) nor directories (CreateDirs).
func TestRefusedCreatesNothing(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		base := fixture(t, ruleFixture)
		_, _, err := Open(filepath.Join(base, "otherdrop", "new"), unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o600)
		checkRefused(t, err, filepath.Join(base, "otherdrop", "new"), "otherdrop", base)
		_, _, err = Open(filepath.Join(base, "otherdrop", "a", "b"), unix.O_PATH|unix.O_DIRECTORY, 0, CreateDirs(0o700))
		checkRefused(t, err, filepath.Join(base, "otherdrop", "a", "b"), "otherdrop", base)
		_, _, _, err = OpenParent(filepath.Join(base, "otherdrop", "ledger"))
		checkRefused(t, err, filepath.Join(base, "otherdrop", "ledger"), "otherdrop", base)
		if ents, _ := os.ReadDir(filepath.Join(base, "drop")); len(ents) != 0 {
			t.Fatalf("the refused link's target got %v", ents)
		}
	})
}

// TestOpenCreates: the caller's own paths work as open(2) and mkdir -p
// would, and a trusted link is followed to create at its target.
func TestOpenCreates(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		d := t.TempDir()
		fd, real, err := Open(filepath.Join(d, "a", "b", "c"), unix.O_RDONLY|unix.O_DIRECTORY, 0, CreateDirs(0o700))
		if err != nil {
			t.Fatal(err)
		}
		unix.Close(fd)
		if fi, err := os.Stat(filepath.Join(d, "a", "b", "c")); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 || real != filepath.Join(d, "a", "b", "c") {
			t.Fatalf("made %v (%v) at %s", fi, err, real)
		}
		if err := os.Symlink("a/b", filepath.Join(d, "mine")); err != nil {
			t.Fatal(err)
		}
		fd, real, err = Open(filepath.Join(d, "mine", "new"), unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o600)
		if err != nil {
			t.Fatalf("through the caller's own link: %v", err)
		}
		unix.Close(fd)
		if _, err := os.Stat(filepath.Join(d, "a", "b", "new")); err != nil || real != filepath.Join(d, "a", "b", "new") {
			t.Fatalf("created at %s: %v", real, err)
		}
		// O_EXCL never follows the last component, as open(2), not even a
		// dangling link of the caller's.
		if _, _, err := Open(filepath.Join(d, "mine"), unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o600); !errors.Is(err, os.ErrExist) {
			t.Fatalf("O_EXCL on a link: %v, want EEXIST", err)
		}
		os.Symlink("a/b/dangling", filepath.Join(d, "dangling"))
		if _, _, err := Open(filepath.Join(d, "dangling"), unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o600); !errors.Is(err, os.ErrExist) {
			t.Fatalf("O_EXCL on a dangling link: %v, want EEXIST", err)
		}
		if _, err := os.Lstat(filepath.Join(d, "a", "b", "dangling")); err == nil {
			t.Fatal("O_EXCL created the file a dangling link names")
		}
		// Without O_EXCL a trusted dangling link is followed, as open(2).
		fd, _, err = Open(filepath.Join(d, "dangling"), unix.O_WRONLY|unix.O_CREAT, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		unix.Close(fd)
		if _, err := os.Lstat(filepath.Join(d, "a", "b", "dangling")); err != nil {
			t.Fatalf("O_CREAT through the caller's own dangling link: %v", err)
		}
		// A missing directory is an *os.PathError naming it.
		_, _, err = Open(filepath.Join(d, "none", "x"), unix.O_RDONLY, 0)
		var pe *os.PathError
		if !errors.As(err, &pe) || pe.Path != filepath.Join(d, "none") || !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("missing directory: %v", err)
		}
		// A file on the way is ENOTDIR.
		os.WriteFile(filepath.Join(d, "file"), nil, 0o600)
		if _, _, err := Open(filepath.Join(d, "file", "x"), unix.O_RDONLY, 0); !errors.Is(err, unix.ENOTDIR) {
			t.Fatalf("file on the way: %v", err)
		}
		// Relative to the current directory, as getcwd(2) names it.
		t.Chdir(d)
		fd, real, err = Open("mine/new", unix.O_RDONLY, 0)
		if err != nil || real != filepath.Join(d, "a", "b", "new") {
			t.Fatalf("relative: %s, %v", real, err)
		}
		unix.Close(fd)
		fd, real, name, err := OpenParent("mine/new")
		if err != nil || real != filepath.Join(d, "a", "b") || name != "new" {
			t.Fatalf("OpenParent: %s %s %v", real, name, err)
		}
		unix.Close(fd)
		if _, _, _, err := OpenParent(d + "/"); !errors.Is(err, unix.EISDIR) {
			t.Fatalf("OpenParent of a directory path: %v", err)
		}
	})
}

// TestProcMagicLinksNotFollowed: /proc/self is a plain link, followed;
// /proc/self/root, /proc/self/cwd and /proc/self/fd/N are magic links
// (the kernel jumps to the process's file, whatever readlink says), never
// followed, as openat2 RESOLVE_NO_MAGICLINKS.
func TestProcMagicLinksNotFollowed(t *testing.T) {
	fd, real, err := Open("/proc/self/status", unix.O_RDONLY, 0)
	if err != nil {
		t.Fatalf("/proc/self/status: %v", err)
	}
	unix.Close(fd)
	if real != fmt.Sprintf("/proc/%d/status", os.Getpid()) {
		t.Fatalf("/proc/self/status resolved to %s", real)
	}
	for _, p := range []string{"/proc/self/root/etc", "/proc/self/cwd", "/proc/self/fd/0", "/proc/self/ns/net", "/proc/thread-self/root"} {
		var le *LinkError
		if _, _, err := Open(p, unix.O_PATH, 0); !errors.As(err, &le) || !strings.Contains(le.Reason, "magic") {
			t.Errorf("%s: %v, want a magic link refused", p, err)
		}
	}
}

package oci

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/moat-sandbox/moat/conformance/testenv"
	"github.com/moat-sandbox/moat/nsexec/hostpath"
)

// plantLink makes a link to target in a directory anyone may write, owned
// by nobody when the test runs as root: a link the hostpath rule refuses.
func plantLink(t *testing.T, target string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "shared")
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o777)
	link := filepath.Join(dir, "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		os.Lchown(link, testenv.NobodyUID, testenv.NobodyGID)
	}
	return link
}

func wantLinkError(t *testing.T, what string, err error, link string) {
	t.Helper()
	var le *hostpath.LinkError
	if !errors.As(err, &le) || le.Link != link {
		t.Fatalf("%s through a planted link: %v, want a *hostpath.LinkError naming %s", what, err, link)
	}
}

// TestLoadBundleRefusesAPlantedLink (issue 28 item 7): a bundle reached
// through a link someone else could have planted is not read (its config
// would choose the rootfs and binds); the caller's own link is followed and
// the bundle named by its real path.
func TestLoadBundleRefusesAPlantedLink(t *testing.T) {
	theirs := t.TempDir()
	os.Mkdir(filepath.Join(theirs, "b"), 0o755)
	if err := os.WriteFile(filepath.Join(theirs, "b", "config.json"), []byte(`{"ociVersion":"1.0.2","root":{"path":"rootfs"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	theirs = filepath.Join(theirs, "b")
	link := plantLink(t, filepath.Dir(theirs))
	_, _, err := LoadBundle(filepath.Join(link, "b"))
	wantLinkError(t, "LoadBundle", err, link)
	link = plantLink(t, theirs)
	_, _, err = LoadBundle(link)
	wantLinkError(t, "LoadBundle", err, link)

	mine := filepath.Join(t.TempDir(), "bundle")
	os.Symlink(theirs, mine)
	if _, abs, err := LoadBundle(mine); err != nil || abs != theirs {
		t.Fatalf("through the caller's own link: %s, %v", abs, err)
	}
}

// TestCreateTargetsRefusesAPlantedRootLink: the root the mount targets are
// made in, reached through a planted link, gets nothing made where it
// points.
func TestCreateTargetsRefusesAPlantedRootLink(t *testing.T) {
	target := t.TempDir()
	os.Mkdir(filepath.Join(target, "rootfs"), 0o755)
	link := plantLink(t, target)
	err := CreateTargets(filepath.Join(link, "rootfs"), []Target{{Path: "/made", Dir: true}})
	wantLinkError(t, "CreateTargets", err, link)
	err = CreateTargets(link, []Target{{Path: "/made", Dir: true}})
	wantLinkError(t, "CreateTargets", err, link)
	if _, err := os.Lstat(filepath.Join(target, "made")); err == nil {
		t.Fatal("made through a planted link")
	}
	if ents, _ := os.ReadDir(filepath.Join(target, "rootfs")); len(ents) != 0 {
		t.Fatalf("made through a planted link: %v", ents)
	}
}

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/moat-sandbox/moat/conformance/testenv"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// TestReadOnlyBindIsRuncs: a bind's "ro" is runc's, read-only on its top
// mount alone, so a volume mounted below the bound directory stays
// writable; "rro" makes every mount of the tree read-only (critest's
// "should support non-recursive readonly mounts" and runc's rro). The top
// mount is read-only either way.
func TestReadOnlyBindIsRuncs(t *testing.T) {
	testenv.RequireRoot(t)
	// The volumes below the sources are mounted in a copy of this
	// binary in a mount namespace of its own, never on the host's.
	if testenv.InPrivateMounts(t) {
		return
	}
	base := t.TempDir()
	os.Chmod(base, 0o755)
	var srcs [2]string
	for i := range srcs {
		srcs[i] = filepath.Join(base, fmt.Sprint("src", i))
		vol := filepath.Join(srcs[i], "vol")
		if err := os.MkdirAll(vol, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount("tmpfs", vol, "tmpfs", 0, "size=64k,mode=1777"); err != nil {
			t.Fatal(err)
		}
		defer unix.Unmount(vol, unix.MNT_DETACH)
		os.Chmod(srcs[i], 0o777) // writable but for the mount's flag
	}
	_, spec := bundle(t, "/bin/sh", "-c", "for f in /ro/top /ro/vol/f /rro/top /rro/vol/f; do "+
		"if echo x 2>/dev/null > $f; then echo $f written; else echo $f refused; fi; done")
	spec.Mounts = append(spec.Mounts,
		specs.Mount{Destination: "/ro", Type: "bind", Source: srcs[0], Options: []string{"rbind", "ro"}},
		specs.Mount{Destination: "/rro", Type: "bind", Source: srcs[1], Options: []string{"rbind", "rro"}})
	b := writeBundle(t, spec)
	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if _, errs, code := rtIO(t, t.TempDir(), out, "run", "--bundle", b, "ro1"); code != 0 {
		t.Fatalf("run: exit %d: %s", code, errs)
	}
	got, _ := os.ReadFile(out.Name())
	want := "/ro/top refused\n/ro/vol/f written\n/rro/top refused\n/rro/vol/f refused\n"
	if string(got) != want {
		t.Fatalf("the container says:\n%s\nwant:\n%s", got, want)
	}
	for _, p := range []string{filepath.Join(srcs[0], "top"), filepath.Join(srcs[1], "top"), filepath.Join(srcs[1], "vol", "f")} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s was written through a read-only mount", p)
		}
	}
}

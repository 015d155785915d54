package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/conformance/testenv"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// TestPropagationStaysInside: hostile. A container granted CAP_SYS_ADMIN
// with no filter, an rshared bind of a host directory that is shared on
// the host (with a peer there) and a shared root, mounts a tmpfs under
// the bind: neither the host's directory nor its peer ever sees it, and a
// host mount made below the directory after create never shows inside.
// Every mount of the sandbox is private before its source is cloned, so
// "shared" makes a peer group of the container's own mounts only.
func TestPropagationStaysInside(t *testing.T) {
	testenv.RequireRoot(t)
	// The shared host directory and its peer are made in a copy of this
	// binary in a mount namespace of its own, never on the host's.
	if testenv.InPrivateMounts(t) {
		return
	}
	base := t.TempDir()
	os.Chmod(base, 0o755)
	shared, peer := filepath.Join(base, "shared"), filepath.Join(base, "peer")
	for _, d := range []string{filepath.Join(shared, "inner"), filepath.Join(shared, "later"), peer} {
		if err := os.MkdirAll(d, 0o777); err != nil {
			t.Fatal(err)
		}
		os.Chmod(d, 0o777)
	}
	os.Chmod(shared, 0o777)
	if err := unix.Mount(shared, shared, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(shared, unix.MNT_DETACH)
	if err := unix.Mount("", shared, "", unix.MS_SHARED, ""); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(shared, peer, "", unix.MS_BIND, ""); err != nil { // a peer of shared
		t.Fatal(err)
	}
	defer unix.Unmount(peer, unix.MNT_DETACH)

	_, spec := bundle(t, "/bin/sh", "-c",
		"mount -t tmpfs none /s/inner && touch /s/inner/x && echo mounted; "+
			"test -e /s/later/hostmark && echo later-seen; "+
			"grep -q ' /s ' /proc/self/mountinfo && grep ' /s ' /proc/self/mountinfo | grep -q shared: && echo s-shared; "+
			"touch /s/ready; i=0; while ! test -e /s/go && test $i -lt 100; do sleep 0.1; i=$((i+1)); done")
	spec.Mounts = append(spec.Mounts, specs.Mount{Destination: "/s", Type: "bind", Source: shared, Options: []string{"rbind", "rw", "rshared"}})
	spec.Linux.RootfsPropagation = "rshared"
	caps := []string{"CAP_SYS_ADMIN"}
	spec.Process.Capabilities = &specs.LinuxCapabilities{Bounding: caps, Effective: caps, Permitted: caps}
	spec.Linux.Seccomp = &specs.LinuxSeccomp{DefaultAction: specs.ActAllow}
	if err := os.MkdirAll(filepath.Join(spec.Root.Path, "s"), 0o755); err != nil && !os.IsExist(err) {
		t.Fatal(err)
	}
	b := writeBundle(t, spec)
	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	root := t.TempDir()
	if _, errs, code := rtIO(t, root, out, "create", "--bundle", b, "prop"); code != 0 {
		t.Fatalf("create: exit %d: %s", code, errs)
	}
	defer rt(t, root, "delete", "--force", "prop")
	// After create: a host mount below the shared directory.
	later := filepath.Join(shared, "later")
	if err := unix.Mount("tmpfs", later, "tmpfs", 0, "size=64k,mode=0777"); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(later, unix.MNT_DETACH)
	if err := os.WriteFile(filepath.Join(later, "hostmark"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errs, code := rt(t, root, "start", "prop"); code != 0 {
		t.Fatalf("start: exit %d: %s", code, errs)
	}
	ready := filepath.Join(shared, "ready")
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		if time.Now().After(deadline) {
			got, _ := os.ReadFile(out.Name())
			t.Fatalf("the container never said it was ready; it says %q", got)
		}
	}
	// The container's tmpfs is up: neither the host's directory nor its
	// peer has it.
	for _, d := range []string{shared, peer} {
		if _, err := os.Stat(filepath.Join(d, "inner", "x")); err == nil {
			t.Errorf("the container's tmpfs reached the host at %s/inner", d)
		}
	}
	if mi, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mi), "/inner ") {
		t.Errorf("the host's mount table has the container's mount:\n%s", mi)
	}
	os.WriteFile(filepath.Join(shared, "go"), nil, 0o644)
	waitStatus(t, root, "prop", specs.StateStopped)
	got, _ := os.ReadFile(out.Name())
	// mounted: CAP_SYS_ADMIN is the container's; s-shared: its bind is
	// shared (within the container) as asked; no later-seen.
	if string(got) != "mounted\ns-shared\n" {
		t.Errorf("the container says %q, want \"mounted\\ns-shared\\n\" (its tmpfs, a shared /s, no host mount made after create)", got)
	}
}

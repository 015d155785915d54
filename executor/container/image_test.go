package container_test

import (
	"archive/tar"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/conformance"
	"github.com/moat-sandbox/moat/conformance/testenv"
)

// podmanImage builds, offline, the image the conformance runner runs in: a
// root holding only the shared libraries the test binary links (as ldd
// lists them, at the same paths) and empty mount points. The runner itself
// is bind-mounted read-only from the host at its own path. The image is
// imported with `podman import` and removed when t ends; it returns the
// podman path and the image pinned by digest.
func podmanImage(t *testing.T) (podman, image string) {
	t.Helper()
	testenv.RequireRoot(t)
	podman, err := exec.LookPath("podman")
	if err != nil {
		testenv.Skipf(t, "podman is not installed (apt-get install podman runc): %v", err)
	}
	if _, err := exec.LookPath("runc"); err != nil {
		testenv.Skipf(t, "runc is not installed (apt-get install runc): %v", err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	libs, err := sharedLibraries(self)
	if err != nil {
		t.Fatal(err)
	}
	tarball := filepath.Join(t.TempDir(), "rootfs.tar")
	if err := writeRootfs(tarball, libs); err != nil {
		t.Fatal(err)
	}
	name := "localhost/moat-container-test"
	out, err := exec.Command(podman, "import", "--quiet", tarball, name+":latest").CombinedOutput()
	if err != nil {
		t.Fatalf("podman import: %v\n%s", err, out)
	}
	id := strings.TrimSpace(string(out))
	t.Cleanup(func() { exec.Command(podman, "rmi", "--force", id).Run() })
	out, err = exec.Command(podman, "image", "inspect", "--format", "{{.Digest}}", id).Output()
	if err != nil {
		t.Fatalf("podman image inspect: %v", err)
	}
	digest := strings.TrimSpace(string(out))
	if !regexp.MustCompile(`^sha256:[0-9a-f]{64}$`).MatchString(digest) {
		t.Fatalf("podman reports the digest %q", digest)
	}
	return podman, name + "@" + digest
}

// sharedLibraries lists the files the dynamic loader maps for bin, as ldd
// prints them: "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" and
// the loader itself "/lib64/ld-linux-x86-64.so.2 (0x...)". A static binary
// needs none.
func sharedLibraries(bin string) ([]string, error) {
	out, err := exec.Command("ldd", bin).CombinedOutput()
	if err != nil {
		if bytes.Contains(out, []byte("not a dynamic executable")) {
			return nil, nil
		}
		return nil, err
	}
	var libs []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
			libs = append(libs, f[2])
		case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
			libs = append(libs, f[0])
		}
	}
	return libs, nil
}

// writeRootfs writes the image's root as a tar: each library's content (a
// symlink followed) as a regular file at the path ldd named, their parent
// directories, and the mount points /work, /tmp, /proc, /dev, /sys, /etc.
func writeRootfs(path string, libs []string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	dirs := map[string]bool{}
	addDir := func(d string) error {
		var parts []string
		for ; d != "/" && d != "."; d = filepath.Dir(d) {
			parts = append([]string{d}, parts...)
		}
		for _, p := range parts {
			if !dirs[p] {
				dirs[p] = true
				if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(p, "/") + "/", Mode: 0o755}); err != nil {
					return err
				}
			}
		}
		return nil
	}
	for _, d := range []string{"/work", "/tmp", "/proc", "/dev", "/sys", "/etc"} {
		if err := addDir(d); err != nil {
			return err
		}
	}
	for _, lib := range libs {
		b, err := os.ReadFile(lib)
		if err != nil {
			return err
		}
		if err := addDir(filepath.Dir(lib)); err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(lib, "/"), Mode: 0o755, Size: int64(len(b))}); err != nil {
			return err
		}
		if _, err := tw.Write(b); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}

// runner is a copy of the test binary under the conformance runner's name,
// in a fresh 0755 directory to bind into the container.
type runner struct{ dir, path string }

func runnerCopy(t *testing.T) runner {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, conformance.RunnerName)
	if err := os.WriteFile(path, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return runner{dir: dir, path: path}
}

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The release build is one static binary: no dynamic loader, no shared
// library (libseccomp and libc linked in), and it still compiles and loads
// seccomp filters.
func TestStaticBuild(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		if _, err := os.Stat("/usr/local/go/bin/go"); err != nil {
			t.Skip("no Go toolchain here to build with (a VM that only gets compiled tests)")
		}
	}
	script, err := filepath.Abs("../../.ci/build-static")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(script); err != nil {
		t.Skip("not in a source checkout: " + err.Error())
	}
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	out := filepath.Join(dir, "moat")
	if b, err := exec.Command("bash", script, dir).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", script, err, b)
	}
	for _, bin := range []string{out, filepath.Join(dir, initBinary)} {
		if !isStatic(bin) {
			t.Fatalf("%s has a dynamic loader or needs shared libraries", bin)
		}
	}
	if b, err := exec.Command("ldd", out).CombinedOutput(); err == nil || !strings.Contains(string(b), "not a dynamic executable") {
		t.Fatalf("ldd %s: %s (%v)", out, b, err)
	}
	v, err := exec.Command(out, "version").Output()
	if err != nil || !strings.Contains(string(v), "static true") || !strings.Contains(string(v), "libseccomp 2.") {
		t.Fatalf("moat version: %s (%v)", v, err)
	}
	// The static binary sandboxes a command under the default policy, its
	// seccomp filter compiled by the statically linked libseccomp.
	r, err := exec.Command(out, "run", "--", "/bin/sh", "-c", "grep -E '^(Seccomp|NoNewPrivs):' /proc/self/status").CombinedOutput()
	if err != nil || !strings.Contains(string(r), "Seccomp:\t2") || !strings.Contains(string(r), "NoNewPrivs:\t1") {
		t.Fatalf("static moat run: %s (%v)", r, err)
	}
}

func TestVersionReportsTheLinking(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// go test binaries with cgo are dynamically linked.
	if isStatic(self) {
		t.Fatalf("isStatic(%s) = true for a cgo test binary", self)
	}
}

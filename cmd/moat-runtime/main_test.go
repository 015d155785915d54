package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/moat-sandbox/moat/conformance"
	"github.com/moat-sandbox/moat/conformance/testenv"
	"github.com/moat-sandbox/moat/nsexec"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// TestMain makes a copy of the test binary named moat-runtime behave as
// the runtime, so engines can be pointed at it.
func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == "moat-runtime" {
		nsexec.Init()
		os.Exit(run(os.Args[1:]))
	}
	nsexec.Init()
	if os.Getenv(subreaperVar) != "" {
		os.Exit(subreaperMain())
	}
	conformance.Main(m, func() {
		if binDir != "" {
			os.RemoveAll(binDir)
		}
		if imageDir != "" {
			os.RemoveAll(imageDir)
		}
	})
}

var (
	binOnce  sync.Once
	binDir   string
	binErr   error
	imgOnce  sync.Once
	imageDir string
	imgErr   error
)

// runtimeBin is the path of the moat-runtime copy of this test binary, in
// a 0755 directory every user can reach.
func runtimeBin(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		var p string
		if p, binErr = testenv.CopySelf("moat-runtime"); binErr != nil {
			return
		}
		binDir = filepath.Dir(p)
		// moat-init next to it, as installed (sandbox.go says why), when
		// the go command is here to build it (as root: a re-run as nobody
		// has no build cache of its own, and its tests do without it;
		// TestRuntimeTools requires it).
		if goBin, err := exec.LookPath("go"); err == nil && os.Geteuid() == 0 {
			c := exec.Command(goBin, "build", "-o", filepath.Join(binDir, initBinary), "../moat-init")
			c.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := c.CombinedOutput(); err != nil {
				binErr = fmt.Errorf("build moat-init: %v: %s", err, out)
			}
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return filepath.Join(binDir, "moat-runtime")
}

// busyboxCommands are the links the test image gets.
var busyboxCommands = []string{"sh", "true", "false", "id", "cat", "echo", "sleep", "ls", "pwd", "env", "kill", "tty", "head", "tail", "seq", "touch", "hostname", "test", "stat", "grep", "ip", "su", "mount", "chown", "mkdir", "readlink", "ps", "wc"}

// testRootfs builds the offline test image's root: Debian's busybox-static
// binary and its links, in a directory every user can read (no image is
// ever downloaded).
func testRootfs(t *testing.T) string {
	t.Helper()
	imgOnce.Do(func() {
		bb, err := exec.LookPath("busybox")
		if err != nil {
			imgErr = err
			return
		}
		if out, err := exec.Command("file", "-L", bb).Output(); err == nil && !bytes.Contains(out, []byte("statically linked")) {
			imgErr = os.ErrNotExist
			return
		}
		dir, err := os.MkdirTemp("", "moat-oci-image-")
		if err != nil {
			imgErr = err
			return
		}
		imageDir = dir
		os.Chmod(dir, 0o755)
		root := filepath.Join(dir, "rootfs")
		for _, d := range []string{"bin", "etc", "proc", "dev", "sys", "tmp", "run", "work"} {
			if imgErr = os.MkdirAll(filepath.Join(root, d), 0o755); imgErr != nil {
				return
			}
		}
		in, err := os.ReadFile(bb)
		if err != nil {
			imgErr = err
			return
		}
		if imgErr = os.WriteFile(filepath.Join(root, "bin", "busybox"), in, 0o755); imgErr != nil {
			return
		}
		for _, c := range busyboxCommands {
			if imgErr = os.Symlink("busybox", filepath.Join(root, "bin", c)); imgErr != nil {
				return
			}
		}
		imgErr = os.WriteFile(filepath.Join(root, "etc", "passwd"), []byte("root:x:0:0:root:/:/bin/sh\n"), 0o644)
	})
	if imgErr != nil {
		testenv.Skipf(t, "the offline test image needs a static busybox (Debian's busybox-static): %v", imgErr)
	}
	return filepath.Join(imageDir, "rootfs")
}

// bundle writes a bundle for the test image running args: a config as
// runc spec makes it (its namespaces, masked paths, mounts), rootless
// style (no host ids), read-only root.
func bundle(t *testing.T, args ...string) (string, *specs.Spec) {
	t.Helper()
	root := testRootfs(t)
	spec := &specs.Spec{
		Version:  specs.Version,
		Root:     &specs.Root{Path: root, Readonly: true},
		Hostname: "oci",
		Process: &specs.Process{Args: args, Env: []string{"PATH=/bin", "TERM=xterm"}, Cwd: "/",
			NoNewPrivileges: true},
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts"},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"ro"}},
		},
		Linux: &specs.Linux{
			Namespaces:    []specs.LinuxNamespace{{Type: "pid"}, {Type: "network"}, {Type: "ipc"}, {Type: "uts"}, {Type: "mount"}},
			MaskedPaths:   []string{"/proc/kcore", "/proc/keys", "/sys/firmware"},
			ReadonlyPaths: []string{"/proc/sys", "/proc/sysrq-trigger"},
		},
	}
	return writeBundle(t, spec), spec
}

func writeBundle(t *testing.T, spec *specs.Spec) string {
	t.Helper()
	dir := t.TempDir()
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// rt runs the runtime copy with --root root and returns stdout, stderr
// and the exit status. Its stdio are files, not pipes: a create leaves the
// monitor holding them, and a pipe would keep the call waiting.
func rt(t *testing.T, root string, args ...string) (string, string, int) {
	t.Helper()
	return rtIO(t, root, nil, args...)
}

// rtIO is rt with the container's stdout and stderr going to out when
// not nil.
func rtIO(t *testing.T, root string, out *os.File, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(runtimeBin(t), append([]string{"--root", root}, args...)...)
	so, err := os.CreateTemp(t.TempDir(), "stdout")
	if err != nil {
		t.Fatal(err)
	}
	se, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer so.Close()
	defer se.Close()
	cmd.Stdout, cmd.Stderr = so, se
	if out != nil {
		cmd.Stdout = out
	}
	err = cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run moat-runtime %v: %v", args, err)
	}
	o, _ := os.ReadFile(so.Name())
	e, _ := os.ReadFile(se.Name())
	return string(o), string(e), code
}

// ociState runs state and decodes it.
func ociState(t *testing.T, root, id string) specs.State {
	t.Helper()
	out, errs, code := rt(t, root, "state", id)
	if code != 0 {
		t.Fatalf("state %s: exit %d: %s", id, code, errs)
	}
	var st specs.State
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("state %s: %v in %q", id, err, out)
	}
	return st
}

func contains2(s string, subs ...string) bool {
	for _, x := range subs {
		if !strings.Contains(s, x) {
			return false
		}
	}
	return true
}

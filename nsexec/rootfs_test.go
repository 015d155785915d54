//go:build linux

package nsexec

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/moat-sandbox/moat/conformance/testenv"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// rootfsVar hands the rootfs built by the root run to the nobody re-run.
const rootfsVar = "MOAT_NSEXEC_TEST_ROOTFS"

var (
	rootfsOnce sync.Once
	rootfsDir  string
	rootfsErr  error
)

// probeBinVar names a prebuilt static testdata/rootfsprobe binary to use
// instead of compiling it (the VM runner builds it on the host).
const probeBinVar = "MOAT_NSEXEC_TEST_PROBE"

// testRootfs returns a tiny rootfs: a static Go program at /bin/probe, the
// mount points, and two symlinks leaving the root (escape, relative; abs,
// absolute).
func testRootfs(t *testing.T) string {
	t.Helper()
	if d := os.Getenv(rootfsVar); d != "" {
		return d
	}
	rootfsOnce.Do(func() { rootfsDir, rootfsErr = buildRootfs() })
	if rootfsErr != nil {
		if errors.Is(rootfsErr, fs.ErrNotExist) {
			testenv.Skipf(t, "no go tool to build the static rootfs program: %v", rootfsErr)
		}
		t.Fatalf("build the test rootfs: %v", rootfsErr)
	}
	t.Setenv(rootfsVar, rootfsDir)
	return rootfsDir
}

func buildRootfs() (string, error) {
	dir, err := os.MkdirTemp("", "moat-nsexec-rootfs-")
	if err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", err
	}
	root := filepath.Join(dir, "root")
	for _, d := range []string{"bin", "proc", "dev", "tmp", "work", "src"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return "", err
		}
	}
	if err := installProbe(filepath.Join(root, "bin", "probe")); err != nil {
		return "", err
	}
	if err := os.Symlink("../../../../../../../../../../var", filepath.Join(root, "escape")); err != nil {
		return "", err
	}
	if err := os.Symlink("/src", filepath.Join(root, "abs")); err != nil {
		return "", err
	}
	return root, nil
}

// installProbe puts the static probe at dst: a copy of the prebuilt one
// named by probeBinVar, else one compiled from testdata/rootfsprobe with the
// toolchain this test binary was built by (a missing go tool is reported as
// fs.ErrNotExist, a capability the host lacks).
func installProbe(dst string) error {
	if pre := os.Getenv(probeBinVar); pre != "" {
		b, err := os.ReadFile(pre)
		if err != nil {
			return fmt.Errorf("read the prebuilt probe named by %s: %v", probeBinVar, err) // not ErrNotExist: a missing file here is a broken runner, not a missing capability
		}
		return os.WriteFile(dst, b, 0o755)
	}
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goTool); err != nil {
		return err
	}
	src, err := filepath.Abs(filepath.Join("testdata", "rootfsprobe"))
	if err != nil {
		return err
	}
	cmd := exec.Command(goTool, "build", "-o", dst, ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		return &os.PathError{Op: "go build", Path: src, Err: errorString(string(out))}
	}
	return nil
}

type errorString string

func (e errorString) Error() string { return string(e) }

func removeRootfs() {
	if rootfsDir != "" {
		os.RemoveAll(filepath.Dir(rootfsDir))
	}
}

func TestRootfs(t *testing.T) {
	root := testRootfs(t)
	asRootAndNobody(t, func(t *testing.T) {
		cfg := &Config{Rootfs: root, Args: []string{"/bin/probe"}, Workdir: workdir(t)}
		r := mustRun(t, cfg)
		if !strings.HasPrefix(r.stdout, "uid 1000 ppid 1\n") || !strings.Contains(r.stdout, "root: open /x: read-only file system") {
			t.Fatalf("got %q", r.stdout)
		}
		if b, err := os.ReadFile(filepath.Join(cfg.Workdir, "out")); err != nil || string(b) != "rootfs" {
			t.Fatalf("/work/out on the host: %q, %v", b, err)
		}
	})
}

// TestRootfsSymlinkTargetStaysInRoot: a mount target reached through a
// symlink of the image is resolved as if the root were /, as runc resolves
// it (an image's /var/run -> /run): a link climbing out with .. stops at
// the root, and an absolute one names a path of the image, never of the
// host.
func TestRootfsSymlinkTargetStaysInRoot(t *testing.T) {
	root := testRootfs(t)
	asRootAndNobody(t, func(t *testing.T) {
		mount := func(dest string) (result, error) {
			cfg := &Config{Rootfs: root, Args: []string{"/bin/probe"}, Workdir: workdir(t),
				Mounts: []specs.Mount{{Source: t.TempDir(), Destination: dest, Options: []string{"rw"}}}}
			return run(t, cfg)
		}
		// escape -> ../../../var: the image's /var, which it has not (the
		// host's /var exists).
		_, err := mount("/escape")
		if se := setupErr(t, err, StepMountTarget, unix.ENOENT); se.Path != "/escape" {
			t.Fatalf("/escape: %v", err)
		}
		// abs -> /src: the image's own /src.
		if r, err := mount("/abs"); err != nil || r.exit.Code != 0 {
			t.Fatalf("/abs, a link to the image's /src: %+v, %v", r, err)
		}
	})
}

func TestRootfsSymlinkedProcRefused(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		root := t.TempDir()
		os.Chmod(root, 0o755)
		for _, d := range []string{"dev", "tmp"} {
			if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Symlink("/", filepath.Join(root, "proc")); err != nil {
			t.Fatal(err)
		}
		_, err := run(t, &Config{Rootfs: root, Args: []string{"/bin/true"}})
		if se := setupErr(t, err, StepMountTarget, unix.ELOOP); se.Path != "/proc" {
			t.Fatalf("path %q, want /proc", se.Path)
		}
	})
}

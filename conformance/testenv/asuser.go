package testenv

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// Nobody is the unprivileged identity the suites re-run themselves as.
const (
	NobodyUID = 65534
	NobodyGID = 65534
)

// asUserVar marks a test binary that was re-run by RunAsUser, so that the
// copy runs the test body instead of re-running itself again.
const asUserVar = "MOAT_TEST_AS_USER"

var (
	copyOnce sync.Once
	copyPath string
	copyErr  error
)

// ReRun reports whether this process is the copy of the test binary that
// RunAsUser started.
func ReRun() bool { return os.Getenv(asUserVar) != "" }

// RunAsUser runs the current test again in a copy of the test binary as the
// given uid and gid, and fails t if that run fails. It returns true when the
// caller is the original process, which should then return; it returns false
// in the re-run copy (or when the process already is that user), where the
// caller goes on with the test body.
//
//	if testenv.RunAsUser(t, testenv.NobodyUID, testenv.NobodyGID) { return }
//
// Switching identity needs root; without it the test skips (see Skipf). The
// binary is copied once per process into a fresh 0755 directory, because the
// go test build directory is not reachable by other users.
func RunAsUser(t *testing.T, uid, gid int) bool {
	t.Helper()
	if os.Geteuid() == uid || ReRun() {
		return false
	}
	if os.Geteuid() != 0 {
		Skipf(t, "switching to uid %d needs root", uid)
	}
	return runCopy(t, uid, gid, &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}})
}

// runCopy runs the current test in the copy of the test binary with attr
// and judges its output; it returns true (the caller is the original).
func runCopy(t *testing.T, uid, gid int, attr *syscall.SysProcAttr) bool {
	t.Helper()
	bin, err := userCopy()
	if err != nil {
		t.Fatalf("copy the test binary for uid %d: %v", uid, err)
	}
	cmd := exec.Command(bin, "-test.run="+runPattern(t.Name()), "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), asUserVar+"=1")
	cmd.SysProcAttr = attr
	out, err := cmd.CombinedOutput()
	t.Logf("re-run as uid %d:\n%s", uid, out)
	if err != nil {
		t.Fatalf("re-run as uid %d failed: %v", uid, err)
	}
	// Match the test's own result line, not a subtest's ("--- SKIP: T/sub").
	passed := strings.Contains(string(out), "--- PASS: "+t.Name()+" (")
	skipped := strings.Contains(string(out), "--- SKIP: "+t.Name()+" (")
	if !passed && !skipped {
		t.Fatalf("re-run as uid %d did not run %s", uid, t.Name())
	}
	if skipped {
		Skipf(t, "the re-run as uid %d skipped", uid)
	}
	return true
}

// runPattern turns a (sub)test name into a -test.run pattern that matches it
// exactly, level by level.
func runPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

func userCopy() (string, error) {
	copyOnce.Do(func() {
		copyPath, copyErr = copyExecutable()
	})
	return copyPath, copyErr
}

func copyExecutable() (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find test binary: %w", err)
	}
	return CopySelf(filepath.Base(self))
}

// CopySelf copies the running test binary, as name, into a fresh 0755
// directory and returns its path: go test builds binaries in a directory
// only its user can reach, and a sandbox or another user needs a copy it
// can read (a copy, not a link, so a bind of the directory alone suffices).
// The caller removes filepath.Dir of the result when done.
func CopySelf(name string) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find test binary: %w", err)
	}
	dir, err := os.MkdirTemp("", "moat-test-bin-")
	if err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", err
	}
	dst := filepath.Join(dir, name)
	in, err := os.Open(self)
	if err != nil {
		return "", err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return "", err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return "", err
	}
	return dst, out.Close()
}

// CopySelfT is CopySelf for one test: it fails the test on error and
// removes the copy when the test ends.
func CopySelfT(t testing.TB, name string) string {
	t.Helper()
	p, err := CopySelf(name)
	if err != nil {
		t.Fatalf("copy the test binary: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(filepath.Dir(p)) })
	return p
}

// RunAsUserIn is RunAsUser with the copy born in the cgroup v2 directory
// cgroupDir (clone3 CLONE_INTO_CGROUP), as a systemd user manager's children
// are in their delegated subtree: an unprivileged process cannot move
// itself there, the common ancestor's cgroup.procs being root's
// (cgroup-v2.rst, "Delegation Containment"). An empty cgroupDir is RunAsUser.
func RunAsUserIn(t *testing.T, uid, gid int, cgroupDir string) bool {
	t.Helper()
	if cgroupDir == "" {
		return RunAsUser(t, uid, gid)
	}
	if os.Geteuid() == uid || ReRun() {
		return false
	}
	if os.Geteuid() != 0 {
		Skipf(t, "switching to uid %d needs root", uid)
	}
	fd, err := syscall.Open(cgroupDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open the cgroup %s: %v", cgroupDir, err)
	}
	defer syscall.Close(fd)
	return runCopy(t, uid, gid, &syscall.SysProcAttr{
		Credential:  &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)},
		UseCgroupFD: true,
		CgroupFD:    fd,
	})
}

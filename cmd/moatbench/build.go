package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// buildMoat builds the release binaries into dir with .ci/build-static:
// the static moat and, next to it, the small moat-init it starts, which is
// what a user installs (a plain `go build` would re-exec the whole moat as
// the sandbox init and measure something slower).
func buildMoat(dir string) (string, error) {
	cmd := exec.Command(".ci/build-static", dir)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build the release binaries with .ci/build-static (run from the module root, or pass -moat): %w", err)
	}
	return filepath.Join(dir, "moat"), nil
}

// rerunAsNobody runs this binary again as nobody (65534) on the same
// artifacts, for the rootless table.
func rerunAsNobody(cfg *config) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	// The binary may sit in a directory nobody cannot reach (go run's).
	copyPath := filepath.Join(cfg.work, "moatbench")
	if err := copyFile(self, copyPath); err != nil {
		return err
	}
	// The child writes its own artifacts (BPF file, bundles) in a directory
	// of its own.
	work := filepath.Join(cfg.work, "nobody")
	if err := os.Mkdir(work, 0o755); err != nil {
		return err
	}
	if err := os.Chown(work, 65534, 65534); err != nil {
		return err
	}
	args := []string{"-as-child", "-work", work, "-moat", cfg.moat, "-n", fmt.Sprint(cfg.n), "-tools", strings.Join(cfg.tools, ",")}
	cmd := exec.Command(copyPath, args...)
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/nonexistent"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
	return cmd.Run()
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o755)
}

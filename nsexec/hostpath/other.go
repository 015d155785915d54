//go:build !linux

package hostpath

import (
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// Elsewhere than Linux moat runs no sandbox; these keep the packages that
// open a caller's path (the ledger, policies) building, and follow links as
// open(2) does.

// Option changes how a path is resolved (ignored here).
type Option func()

// TrustOnlyRoot is ignored elsewhere than Linux.
func TrustOnlyRoot() Option { return func() {} }

// CreateDirs is ignored elsewhere than Linux.
func CreateDirs(uint32) Option { return func() {} }

// Open is open(2).
func Open(path string, flags int, mode uint32, _ ...Option) (int, string, error) {
	fd, err := unix.Open(path, flags|unix.O_CLOEXEC, mode)
	if err != nil {
		return -1, "", &os.PathError{Op: "open", Path: path, Err: err}
	}
	return fd, path, nil
}

// OpenParent opens the directory of path's last component.
func OpenParent(path string, _ ...Option) (int, string, string, error) {
	i := strings.LastIndexByte(path, '/')
	dir, name := path[:i+1], path[i+1:]
	if name == "" || name == "." || name == ".." {
		return -1, "", "", &os.PathError{Op: "open", Path: path, Err: unix.EISDIR}
	}
	if dir == "" {
		dir = "."
	}
	fd, real, err := Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	return fd, real, name, err
}

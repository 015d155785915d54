package oci

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/moat-sandbox/moat/nsexec/hostpath"
	"golang.org/x/sys/unix"
)

// inRoot resolves every path inside the root as if the root were "/": a
// symlink planted in the image can point only inside it, never at a host
// path (openat2(2) RESOLVE_IN_ROOT), and no /proc magic link is followed.
const inRoot = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// CreateTargets makes the missing mount destinations of targets in the
// root at rootfs (a directory, or an empty file for a bind of a file), as
// runc does for a writable root, so that nsexec, which never writes to a
// root, finds each one. Existing entries are left as they are; a component
// that is not a directory fails.
//
// The root itself is resolved as nsexec resolves a rootfs (nsexec/hostpath
// with TrustOnlyRoot): only root's links in directories only root can
// write are followed on the way to it, so a link planted there cannot have
// these directories made elsewhere on the host.
func CreateTargets(rootfs string, targets []Target) error {
	root, _, err := hostpath.Open(rootfs, unix.O_PATH|unix.O_DIRECTORY, 0, hostpath.TrustOnlyRoot())
	if err != nil {
		return fmt.Errorf("open the root %s: %w", rootfs, err)
	}
	defer unix.Close(root)
	for _, t := range targets {
		if err := createTarget(root, t); err != nil {
			return fmt.Errorf("create mount target %s in %s: %w", t.Path, rootfs, err)
		}
	}
	return nil
}

func createTarget(root int, t Target) error {
	fd, err := unix.Openat2(root, t.Path, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: inRoot})
	if err == nil {
		unix.Close(fd)
		return nil
	}
	if !errors.Is(err, unix.ENOENT) {
		return err
	}
	parts := strings.Split(strings.Trim(t.Path, "/"), "/")
	dir, err := unix.Dup(root)
	if err != nil {
		return err
	}
	defer func() { unix.Close(dir) }()
	for i, p := range parts {
		if i == len(parts)-1 && !t.Dir {
			fd, err := unix.Openat(dir, p, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
			if err != nil && !errors.Is(err, unix.EEXIST) {
				return err
			}
			if err == nil {
				unix.Close(fd)
			}
			return nil
		}
		if err := unix.Mkdirat(dir, p, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
			return err
		}
		// Resolved again from the root, so a symlink among the components
		// is followed as inside the container, never out of the root.
		next, err := unix.Openat2(root, strings.Join(parts[:i+1], "/"), &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: inRoot})
		if err != nil {
			return err
		}
		unix.Close(dir)
		dir = next
	}
	return nil
}

// isDir says whether a bind source is a directory (a missing or unreadable
// one counts as a file; nsexec reports it when it opens the source).
func isDir(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.IsDir()
}

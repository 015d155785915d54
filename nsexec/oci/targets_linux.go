package oci

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/moat-sandbox/moat/nsexec/hostpath"
	"github.com/moat-sandbox/moat/nsexec/internal/resolve"
	"golang.org/x/sys/unix"
)

// inRoot resolves every path inside the root as if the root were "/": a
// symlink planted in the image can point only inside it, never at a host
// path (openat2(2) RESOLVE_IN_ROOT), and no /proc magic link is followed.
const inRoot = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// CreateTargets makes the missing mount destinations of targets in the
// root at rootfs, so that nsexec, which never writes to a root, finds each
// one: the pause image of a CRI pod is the one file /pause, and CRI binds
// /etc/resolv.conf, /etc/hosts and /etc/hostname into every container.
// runc makes them in the engine's rootfs directory whether the root is
// read-only or not (before it remounts it read-only), and so does moat.
//
// What moat writes into an engine's rootfs is exactly this and no more: a
// missing directory (0755) or an empty file (0644, for a bind of a file),
// owned by the caller, at a mount destination or on the way to one;
// existing entries are left as they are, nothing is ever removed, changed
// or written into. Every path is resolved inside the root as if it were /
// (openat2 RESOLVE_IN_ROOT, as nsexec resolves the mount), so a symlink of
// the image leads at most to another place of the image, never out of it;
// nothing is created through a /proc magic link or across a mount below
// the root. A component that is not a directory fails. A root moat may not
// write (a read-only mount, another user's directory) fails naming the
// missing target: the image must have it then.
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
			return &TargetError{Path: t.Path, Root: rootfs, Err: err}
		}
	}
	return nil
}

// TargetError is a mount destination missing from the root that moat
// could not create there.
type TargetError struct {
	Path, Root string
	Err        error
}

func (e *TargetError) Error() string {
	why := ""
	switch {
	case errors.Is(e.Err, unix.EROFS):
		why = " (the root is on a read-only mount, so moat cannot make it: add it to the image)"
	case errors.Is(e.Err, unix.EACCES), errors.Is(e.Err, unix.EPERM):
		why = " (the runtime may not write the root: add it to the image, or run the engine as the root's owner)"
	case errors.Is(e.Err, unix.ENOTDIR):
		why = " (a component of it is not a directory in the image)"
	case errors.Is(e.Err, unix.EXDEV):
		why = " (it lies across a mount below the root)"
	}
	return fmt.Sprintf("the root %s lacks the mount target %s, which moat could not create: %v%s", e.Root, e.Path, e.Err, why)
}

func (e *TargetError) Unwrap() error { return e.Err }

func createTarget(root int, t Target) error {
	fd, err := resolve.Openat2(root, t.Path, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: inRoot})
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
		next, err := resolve.Openat2(root, strings.Join(parts[:i+1], "/"), &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: inRoot})
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

package nsexec

import (
	"errors"
	"log/slog"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// A caller's host paths (the workdir, every bind source, the rootfs) are
// opened by the parent once, with no symlink followed in any component
// (openat2(2) RESOLVE_NO_SYMLINKS): a link planted in the path by an
// earlier sandbox, or by anyone who can write a parent directory, must not
// redirect what is mounted or lent (issue 13, item 2). The parent's
// descriptor fixes the inode; the child reopens the path the same way in
// its own mount namespace and refuses anything but that inode. The child
// cannot clone the parent's descriptor itself: open_tree(2) refuses a
// mount of another mount namespace (fs/namespace.c __do_loopback,
// check_mnt: EINVAL), and rootless the parent may not clone in the host's.

// noSymlinks resolves a caller's host path following no symlink and no
// /proc magic link in any component.
const noSymlinks = unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// fileID is an inode: what the parent opened and the child must find.
type fileID struct {
	Dev uint64 `json:"dev"`
	Ino uint64 `json:"ino"`
}

func idOf(st *unix.Stat_t) fileID { return fileID{Dev: st.Dev, Ino: st.Ino} }

// sourceIDs are the inodes of the Config's host paths, on the wire.
type sourceIDs struct {
	Rootfs  *fileID  `json:"rootfs,omitempty"`
	Workdir *fileID  `json:"workdir,omitempty"`
	Mounts  []fileID `json:"mounts,omitempty"`
}

// openHostPath opens path (absolute) with flags, following no symlink. Its
// errors are SetupErrors of step (StepBind or StepRootfs), as the child's
// were when it resolved these paths itself; what names the path's role
// ("workdir", "") goes first in the detail.
func openHostPath(step Step, what, path string, flags uint64) (int, *unix.Stat_t, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{Flags: flags | unix.O_CLOEXEC, Resolve: noSymlinks})
	if errors.Is(err, unix.ELOOP) {
		return -1, nil, &SetupError{Step: step, Path: path, Errno: unix.ELOOP,
			Detail: join(what, symlinkIn(path)+" is a symlink, and moat follows no symlink in a caller's path"),
			Hint:   "name the real path (realpath(1) prints it) once you checked that the link points where you mean"}
	}
	if err != nil {
		errno := errnoOf(err)
		return -1, nil, &SetupError{Step: step, Path: path, Errno: errno, Detail: what, Hint: hintFor(step, errno)}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, nil, &SetupError{Step: step, Path: path, Errno: errnoOf(err), Detail: join(what, "stat")}
	}
	return fd, &st, nil
}

func join(a, b string) string {
	if a == "" {
		return b
	}
	return a + ": " + b
}

// symlinkIn names the first component of path that is a symlink (for the
// error only; the open itself never looked at names).
func symlinkIn(path string) string {
	p := "/"
	for _, part := range strings.Split(strings.Trim(path, "/"), "/") {
		p = filepath.Join(p, part)
		var st unix.Stat_t
		if unix.Lstat(p, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return p
		}
	}
	return "a component"
}

// hostPaths is what the parent holds for one sandbox's host paths.
type hostPaths struct {
	ids  sourceIDs
	lent *lease // the workdir, while the sandbox's host id uses it
}

// openHostPaths opens every host path of c once and, as root, lends the
// workdir to the sandbox's host id (lendWorkdir). The caller must call
// giveBack once the sandbox is gone, or at once when it never started.
func openHostPaths(c *Config, id Identity, root bool, o *options) (*hostPaths, error) {
	h := &hostPaths{}
	if c.Rootfs != "" {
		fd, st, err := openHostPath(StepRootfs, "", c.Rootfs, unix.O_PATH|unix.O_DIRECTORY)
		if err != nil {
			return nil, err
		}
		unix.Close(fd)
		fid := idOf(st)
		h.ids.Rootfs = &fid
	}
	for _, m := range c.Mounts {
		if m.Type == MountTmpfs {
			// Nothing of the host's: a fresh tmpfs (normalize checked it).
			h.ids.Mounts = append(h.ids.Mounts, fileID{})
			continue
		}
		fd, st, err := openHostPath(StepBind, "", m.Source, unix.O_PATH)
		if err != nil {
			return nil, err
		}
		unix.Close(fd)
		h.ids.Mounts = append(h.ids.Mounts, idOf(st))
	}
	if c.Workdir != "" {
		l, err := lendWorkdir(c.Workdir, id, root, lentDir(o), o.logger)
		if err != nil {
			return nil, err
		}
		fid := l.id
		h.ids.Workdir, h.lent = &fid, l
	}
	return h, nil
}

// giveBack ends the workdir's lease, if any.
func (h *hostPaths) giveBack(log *slog.Logger) {
	if h != nil && h.lent != nil {
		h.lent.end(log)
		h.lent = nil
	}
}

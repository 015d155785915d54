package nsexec

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/moat-sandbox/moat/nsexec/hostpath"
	"golang.org/x/sys/unix"
)

// A caller's host paths (the workdir, every bind source, the rootfs) are
// opened by the parent once, by the rule of nsexec/hostpath with
// TrustOnlyRoot: a symlink on the way is followed only if it is root's, in
// directories only root can write (/var/run -> /run, a hybrid host's
// /sys/fs/cgroup/cpu -> cpu,cpuacct). A link planted in the path by an
// earlier sandbox, or by anyone who can write a parent directory, must not
// redirect what is mounted or lent (issue 13, item 2; issue 28, item 7);
// the caller's own links are not followed either, since a rootless
// sandbox writes as the caller. The parent's descriptor fixes the inode,
// and the Config the child gets names the resolved path, which has no
// symlink in it; the child reopens that path in its own mount namespace
// following no symlink at all (openat2(2) RESOLVE_NO_SYMLINKS, noSymlinks)
// and refuses anything but that inode. The child cannot clone the
// parent's descriptor itself: open_tree(2) refuses a mount of another
// mount namespace (fs/namespace.c __do_loopback, check_mnt: EINVAL), and
// rootless the parent may not clone in the host's.

// noSymlinks resolves a path following no symlink and no /proc magic link
// in any component.
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

// openHostPath opens path (absolute) with flags by the hostpath rule,
// following root's links only, and returns the descriptor, its stat and
// the resolved path. Its errors are SetupErrors of step (StepBind or
// StepRootfs), as the child's were when it resolved these paths itself;
// what names the path's role ("workdir", "") goes first in the detail.
func openHostPath(step Step, what, path string, flags int) (int, *unix.Stat_t, string, error) {
	fd, real, err := hostpath.Open(path, flags, 0, hostpath.TrustOnlyRoot())
	var le *hostpath.LinkError
	if errors.As(err, &le) {
		return -1, nil, "", &SetupError{Step: step, Path: path, Errno: unix.ELOOP,
			Detail: join(what, fmt.Sprintf("%s is a symlink to %q that moat does not follow: %s", le.Link, le.Target, le.Reason)),
			Hint: "in a path a sandbox may have written under, moat follows only root's links in directories only root can write; " +
				"name the real path (realpath(1) prints it) once you checked that the link points where you mean"}
	}
	if err != nil {
		errno := errnoOf(err)
		return -1, nil, "", &SetupError{Step: step, Path: path, Errno: errno, Detail: what, Hint: hintFor(step, errno)}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, nil, "", &SetupError{Step: step, Path: path, Errno: errnoOf(err), Detail: join(what, "stat")}
	}
	return fd, &st, real, nil
}

func join(a, b string) string {
	if a == "" {
		return b
	}
	return a + ": " + b
}

// hostPaths is what the parent holds for one sandbox's host paths.
type hostPaths struct {
	ids    sourceIDs
	owners []owner // of each Config mount's source, as opened (zero for a tmpfs)
	lent   *lease  // the workdir, while the sandbox's host id uses it
}

// owner is a source's owner and mode as the parent opened it: what decides
// whether a read-only bind is owner-mapped (WithOwnerMappedBinds).
type owner struct {
	uid  uint32
	mode uint32 // st_mode: type and permission bits
}

// openHostPaths opens every host path of c once and, as root, lends the
// workdir to the sandbox's host id (lendWorkdir). It sets each path of c
// to the path it resolved to, which the child reopens. The caller must
// call giveBack once the sandbox is gone, or at once when it never
// started.
func openHostPaths(c *Config, id Identity, root bool, o *options) (*hostPaths, error) {
	h := &hostPaths{}
	if c.Rootfs != "" {
		fd, st, real, err := openHostPath(StepRootfs, "", c.Rootfs, unix.O_PATH|unix.O_DIRECTORY)
		if err != nil {
			return nil, err
		}
		unix.Close(fd)
		fid := idOf(st)
		h.ids.Rootfs, c.Rootfs = &fid, real
	}
	for i := range c.Mounts {
		m := &c.Mounts[i]
		if m.Type == MountTmpfs {
			// Nothing of the host's: a fresh tmpfs (normalize checked it).
			h.ids.Mounts = append(h.ids.Mounts, fileID{})
			h.owners = append(h.owners, owner{})
			continue
		}
		fd, st, real, err := openHostPath(StepBind, "", m.Source, unix.O_PATH)
		if err != nil {
			return nil, err
		}
		unix.Close(fd)
		h.ids.Mounts = append(h.ids.Mounts, idOf(st))
		h.owners = append(h.owners, owner{uid: st.Uid, mode: st.Mode})
		m.Source = real
	}
	if c.Workdir != "" {
		l, err := lendWorkdir(c.Workdir, id, root, lentDir(o), o.logger)
		if err != nil {
			return nil, err
		}
		fid := l.id
		h.ids.Workdir, h.lent, c.Workdir = &fid, l, l.path
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

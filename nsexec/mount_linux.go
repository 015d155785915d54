package nsexec

import (
	"slices"
	"strings"

	"github.com/moat-sandbox/moat/nsexec/internal/resolve"
	"golang.org/x/sys/unix"
)

// The mount tree is built with the fd-based mount API (open_tree(2),
// fsopen(2), fsmount(2), move_mount(2), mount_setattr(2); kernel 5.12), for
// three reasons:
//   - a bind source is cloned as a detached tree before anything covers it,
//     so sources under /tmp survive the staging mount on /tmp;
//   - mount_setattr applies read-only, nosuid and nodev recursively to the
//     whole cloned tree, and only ever adds flags, so the "locked flags"
//     EPERM of a MS_REMOUNT in a user namespace (peers.md 2c.6) cannot occur;
//   - every target is an fd resolved with openat2(2) beneath the new root,
//     so a symlinked target cannot redirect a mount to the host
//     (CVE-2019-16884, CVE-2021-30465 and their kin).

// Mount attribute sets.
const (
	attrRO      = unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV
	attrRW      = unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV
	attrDevNode = unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NOEXEC
	attrRdOnly  = unix.MOUNT_ATTR_RDONLY
	attrNoExec  = unix.MOUNT_ATTR_NOEXEC
)

// cloneTree returns a detached recursive copy of the mount tree at path
// (relative to dirfd, or dirfd itself when path is empty) with attr set on
// every mount of it.
func cloneTree(dirfd int, path string, attr uint64) (int, error) {
	return cloneMount(dirfd, path, attr, true)
}

// cloneMount is cloneTree, or, not recursive, a copy of the mount at path
// alone (bind(8) without r).
func cloneMount(dirfd int, path string, attr uint64, recursive bool) (int, error) {
	flags := uint(unix.OPEN_TREE_CLONE | unix.OPEN_TREE_CLOEXEC)
	if recursive {
		flags |= unix.AT_RECURSIVE
	}
	if path == "" {
		flags |= unix.AT_EMPTY_PATH
	}
	fd, err := unix.OpenTree(dirfd, path, flags)
	if err != nil {
		return -1, err
	}
	if err := setAttr(fd, attr, recursive); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// cloneSource clones the caller's host tree at path (absolute), resolved
// again in this mount namespace with no symlink followed in any component,
// and only if it is the inode the parent opened (hostpath_linux.go says
// why the child reopens it): a path swapped in between fails with ESTALE.
// recursive takes the submounts below path too (cloneMount).
func cloneSource(path string, want *fileID, attr uint64, recursive bool) (int, error) {
	if want == nil {
		return -1, unix.EPROTO // a parent of another build: mount nothing unchecked
	}
	fd, err := unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: noSymlinks})
	if err != nil {
		return -1, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return -1, err
	}
	if idOf(&st) != *want {
		return -1, unix.ESTALE
	}
	return cloneMount(fd, "", attr, recursive)
}

// cloneBind clones a Config bind's source (cloneSource) with the
// attributes spec asks, read-only on the top mount alone where topOnly
// says (bindAttrs). That top mount stays read-only for the tool: without
// CAP_SYS_ADMIN in its user namespace it can neither remount it nor
// mount_setattr it, and granted it, as root, the parent made the source's
// copy read-only on the host side (idmount_linux.go, lockAll), where the
// flag is locked (MNT_LOCK_READONLY) when the copy reaches the sandbox's
// less privileged mount namespace. TestTopOnlyReadOnly tries
// both.
func cloneBind(path string, want *fileID, spec *mountSpec, topOnly bool) (int, error) {
	tree, top := spec.bindAttrs(topOnly)
	fd, err := cloneSource(path, want, tree, spec.recursive)
	if err != nil || top == 0 {
		return fd, err
	}
	if err := setAttr(fd, top, false); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// setAttr adds attr to the mount at fd (and below it when recursive).
func setAttr(fd int, attr uint64, recursive bool) error {
	flags := uint(unix.AT_EMPTY_PATH)
	if recursive {
		flags |= unix.AT_RECURSIVE
	}
	return unix.MountSetattr(fd, "", flags, &unix.MountAttr{Attr_set: attr})
}

// newFS creates a detached mount of a fresh fstype filesystem with the given
// "key=value" (or bare flag) options. Its source, as mountinfo shows it, is
// the type's name (proc, tmpfs, devpts...), as mount(8) and runc give it,
// unless the options name another ("source=shm").
func newFS(fstype string, attr int, opts ...string) (int, error) {
	fsfd, err := unix.Fsopen(fstype, unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, err
	}
	defer unix.Close(fsfd)
	if !slices.ContainsFunc(opts, func(o string) bool { return strings.HasPrefix(o, "source=") }) {
		if err := unix.FsconfigSetString(fsfd, "source", fstype); err != nil {
			return -1, err
		}
	}
	for _, o := range opts {
		k, v, ok := strings.Cut(o, "=")
		if ok {
			err = unix.FsconfigSetString(fsfd, k, v)
		} else {
			err = unix.FsconfigSetFlag(fsfd, k)
		}
		if err != nil {
			return -1, err
		}
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return -1, err
	}
	return unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, attr)
}

// attach moves the detached mount tree onto target and closes tree.
func attach(tree, target int) error {
	defer unix.Close(tree)
	return unix.MoveMount(tree, "", target, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH)
}

// Resolution modes for a mount target.
const (
	// strictTarget refuses any symlink on the way: the fixed mount points
	// (/proc, /dev, /tmp, /work) of an untrusted rootfs.
	strictTarget = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_SYMLINKS
	// beneathTarget follows relative symlinks that stay beneath the root and
	// refuses (EXDEV) any that leaves it, absolute ones included.
	beneathTarget = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS
	// inRootTarget resolves every symlink as if the root were /, absolute
	// ones included, so none leads out of it (a ".." stops at the root):
	// a Config mount's target, as runc resolves one (securejoin), where an
	// image's /var/run -> /run must reach /run of the image, never the
	// host's.
	inRootTarget = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS
)

// openTarget resolves path (absolute inside the sandbox) beneath rootfd.
func openTarget(rootfd int, path string, scope uint64) (int, error) {
	rel := strings.TrimLeft(path, "/")
	if rel == "" {
		rel = "."
	}
	return resolve.Openat2(rootfd, rel, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: scope,
	})
}

// mountAt attaches tree at path beneath rootfd, resolving it with scope.
// The error names the failed step: the target, or the mount itself.
func mountAt(rootfd int, path string, scope uint64, tree int) error {
	tfd, err := openTarget(rootfd, path, scope)
	if err != nil {
		unix.Close(tree)
		return stepErr(StepMountTarget, path, "", err)
	}
	defer unix.Close(tfd)
	if err := attach(tree, tfd); err != nil {
		return stepErr(StepMount, path, "", err)
	}
	return nil
}

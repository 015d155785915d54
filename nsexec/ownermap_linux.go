package nsexec

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Owner-mapped read-only binds (WithOwnerMappedBinds, issue 32). As root a
// sandbox runs as a host id of its own (hostid_linux.go), so a read-only
// bind of a directory the caller made private to itself (mkdtemp's 0700,
// where an executor writes its runner) is a mount point the tool cannot
// enter, where a rootless sandbox, which runs as the caller, reads it.
// moat never changes the caller's modes to fix that: the host would see
// the directory open to every user for the sandbox's life. Instead the
// parent gives such a bind an id-mapped mount (idmount_linux.go) through a
// user namespace whose uid map has one line, the source's owner onto the
// sandbox's host uid: inside, the caller's files there are the tool's,
// with their owner bits, and nothing else changes.
//
//   - Only the owner is mapped. A file another host user owns in the tree
//     stays unmapped (overflow id) and the tool meets its "other" bits, as
//     now. Nor is the caller's gid: group bits would give the tool the
//     caller's group's reach into files other users own there, which the
//     owner bits of the caller's own files do not need (an owner never
//     meets its group bits, acl_permission_check in fs/namei.c). The
//     kernel takes no id-mapped mount with an empty gid map (EINVAL), so
//     the gid map is the sandbox's own gid onto itself: what was its
//     group's there stays so, every other gid shows as the overflow gid.
//   - Only a bind the sandbox's id could not open at all, and only the
//     caller's: a directory whose mode gives others no search, a file that
//     gives them no read. A bind the tool can open now keeps exactly what
//     it shows now: as root every system directory is the caller's, and
//     mapping /etc/ssl's owner would hand the tool /etc/ssl/private.
//   - Only read-only, with nosuid and nodev, and locked (the clone into
//     the sandbox's less privileged namespace locks them, idmount_linux.go):
//     through the mount the tool owns the caller's files, so a writable one
//     would let it write as the caller, and a source also bound writable is
//     left plain.
//   - A filesystem that cannot be id-mapped (NFS, sysfs, tmpfs before 6.3)
//     makes Start fail naming the bind: a bind the tool cannot open is not
//     what was asked for, and the fix (a mode of the caller's choosing,
//     another filesystem, running as an ordinary user) is the caller's.

// unreachable reports whether a bind source of this mode is closed to the
// sandbox's id, which is "other" to it: a directory it cannot search, a
// file it cannot read.
func unreachable(mode uint32) bool {
	if mode&unix.S_IFMT == unix.S_IFDIR {
		return mode&0o001 == 0
	}
	return mode&0o004 == 0
}

// ownerMaps returns the maps of an owner-mapped bind of a source the
// caller (this process's euid) owns with mode, for a sandbox whose host
// ids are id, or nil when the bind stays as it is.
func ownerMaps(src owner, id Identity) (uids, gids []IDMap) {
	if src.uid != uint32(os.Geteuid()) || src.uid == id.UID || !unreachable(src.mode) {
		return nil, nil
	}
	return []IDMap{{Inside: src.uid, Host: id.UID, Size: 1}}, []IDMap{{Inside: id.GID, Host: id.GID, Size: 1}}
}

// ownerMapError is the refusal of an owner-mapped bind that cannot be had.
func ownerMapError(u *idUse, err error) error {
	return &SetupError{Step: StepBind, Path: u.path, Errno: errnoOf(err),
		Detail: fmt.Sprintf("%s: the sandbox's uid cannot open this read-only bind (owner uid %d, mode %#o) but through an id-mapped mount mapping its owner, and that failed", u.what, u.owner.uid, u.owner.mode&0o7777),
		Hint: "moat never changes your files' modes: make the source readable to others yourself (chmod o+rx) if the tool may read it, " +
			"put it on a filesystem that supports id-mapped mounts (ext4, xfs, btrfs, tmpfs since Linux 6.3; not NFS), or run moat as an ordinary user, where the tool runs as you"}
}

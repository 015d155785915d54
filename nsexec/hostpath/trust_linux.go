//go:build linux

package hostpath

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// trusts reports whether uid's links and directories are followed: root's,
// and the caller's unless TrustOnlyRoot.
func (w *walker) trusts(uid uint32) bool {
	return uid == 0 || (uid == w.euid && !w.cfg.rootOnly)
}

// judgeDir says who besides root and the caller could change the entries
// of the directory at path ("" if no one), and whether it is sticky with
// others allowed to add entries (see the package doc).
func (w *walker) judgeDir(path string, st *unix.Stat_t) (taint string, shared bool) {
	sticky := st.Mode&unix.S_ISVTX != 0
	switch {
	case !w.trusts(st.Uid):
		return fmt.Sprintf("%s is owned by uid %d%s, who can change what is in it", path, st.Uid, w.notTrusted()), false
	case st.Mode&0o002 != 0 && !sticky:
		return fmt.Sprintf("%s can be written by everyone (mode %#o)", path, st.Mode&0o7777), false
	case st.Mode&0o020 != 0 && !sticky:
		return fmt.Sprintf("%s can be written by group %d (mode %#o)", path, st.Gid, st.Mode&0o7777), false
	}
	return "", sticky && st.Mode&0o022 != 0
}

// judgeLink says why the link st, found in top, is not followed; "" if it is.
func (w *walker) judgeLink(top *level, st *unix.Stat_t) string {
	switch {
	case top.taint != "":
		return top.taint
	case magic(top.fd):
		// /proc/<pid>/{root,cwd,exe,fd/N,ns/*}: the kernel jumps to the
		// process's own file (nd_jump_link), which the text readlink(2)
		// gives need not name; as openat2(2) RESOLVE_NO_MAGICLINKS, none
		// is followed.
		return "it is a /proc magic link, which names a process's open file, not a path"
	case !w.trusts(st.Uid):
		return fmt.Sprintf("its owner is uid %d%s", st.Uid, w.notTrusted())
	case top.shared && st.Nlink != 1:
		// Someone else may have added this second name: a hard link of
		// root's or the caller's symlink (fs.protected_hardlinks=0).
		return fmt.Sprintf("it has %d names, and %s is a sticky directory others can add names to", st.Nlink, top.path)
	}
	return ""
}

// notTrusted completes "uid N" in a message: whose links are followed.
func (w *walker) notTrusted() string {
	if w.cfg.rootOnly || w.euid == 0 {
		return ", not root"
	}
	return fmt.Sprintf(", neither root nor you (uid %d)", w.euid)
}

// procRootIno is the inode of procfs's root (PROC_ROOT_INO,
// fs/proc/internal.h), the only procfs directory whose links (self,
// thread-self, mounts, net) are plain ones.
const procRootIno = 1

// magic reports whether links in the directory open at dir are /proc
// magic links: it is on procfs, below its root.
func magic(dir int) bool {
	var fs unix.Statfs_t
	if unix.Fstatfs(dir, &fs) != nil || fs.Type != unix.PROC_SUPER_MAGIC {
		return false
	}
	var st unix.Stat_t
	return unix.Fstat(dir, &st) != nil || st.Ino != procRootIno
}

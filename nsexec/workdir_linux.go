package nsexec

import (
	"errors"
	"fmt"
	"log/slog"

	"golang.org/x/sys/unix"
)

// lease is a workdir held open for one sandbox.
//
// As root the sandbox runs under an unprivileged host id, which may not
// write a directory its caller made (the launcher case: an outer executor
// passes its own fresh, empty 0700 workdir). Such a directory is lent:
// chowned to the sandbox's host id for the run and given back, with the
// owner, mode and ACLs it had, once the sandbox is gone. Only an empty
// directory is lent, so the sandbox never gets more over an existing entry
// than its host id's own permissions; a non-empty directory it cannot
// write is refused with a SetupError naming the fix. A directory the host
// id can already write is used as it is. flock(2) on the directory keeps a
// second sandbox from using it while it is lent: it would see it as its
// own, and give it back to the first one's id.
//
// Rootless, the sandbox is the caller's own uid: nothing is lent or
// changed, and the tool can do what the caller could.
//
// What a lent directory had is also written to a record, locked while it
// is lent, so that a lender killed before it gave the directory back
// leaves what SweepLent (or the next lend of it) needs (lent_linux.go).
type lease struct {
	fd   int // -1 rootless: nothing held
	id   fileID
	path string // resolved: no symlink in it
	lent bool
	rec  lentRecord  // the owner, mode and ACLs it had, when lent
	held *heldRecord // its record
}

// aclXattrs are the POSIX ACLs an owner may set on its directory without
// any capability; the sandbox owns a lent directory, so they are restored.
var aclXattrs = []string{"system.posix_acl_access", "system.posix_acl_default"}

func lendWorkdir(path string, id Identity, root bool, recDir string, log *slog.Logger) (*lease, error) {
	if !root {
		fd, st, real, err := openHostPath(StepBind, "workdir", path, unix.O_PATH|unix.O_DIRECTORY)
		if err != nil {
			return nil, err
		}
		unix.Close(fd)
		return &lease{fd: -1, id: idOf(st), path: real}, nil
	}
	fd, st, real, err := openHostPath(StepBind, "workdir", path, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	l := &lease{fd: fd, id: idOf(st), path: real}
	busy := func(err error) error {
		unix.Close(fd)
		if errors.Is(err, unix.EWOULDBLOCK) {
			return &SetupError{Step: StepBind, Path: path, Errno: unix.EWOULDBLOCK,
				Detail: "workdir: in use by another sandbox it was lent to",
				Hint:   "wait for that run to end, or give each run a directory of its own"}
		}
		return fmt.Errorf("nsexec workdir %s: flock: %w", path, err)
	}
	// A killed lender's record first: its directory may still be lent to
	// a host id, which must not pass for its owner.
	rdir, err := openLockDir(recDir)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	closeRdir := func() {
		if rdir >= 0 {
			unix.Close(rdir)
			rdir = -1
		}
	}
	defer closeRdir()
	if err := reclaimStale(rdir, fd, l.id, log); err != nil {
		unix.Close(fd)
		return nil, err
	}
	st = &unix.Stat_t{}
	if err := unix.Fstat(fd, st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("nsexec workdir %s: stat: %w", path, err)
	}
	if writableBy(st, id) {
		if err := unix.Flock(fd, unix.LOCK_SH|unix.LOCK_NB); err != nil {
			return nil, busy(err)
		}
		return l, nil
	}
	empty, err := isEmptyDir(fd)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("nsexec workdir %s: list: %w", path, err)
	}
	if !empty {
		unix.Close(fd)
		return nil, &SetupError{Step: StepBind, Path: path, Errno: unix.EACCES,
			Detail: fmt.Sprintf("workdir: not empty, and the sandbox's host uid %d cannot write it (owner %d:%d, mode %#o)", id.UID, st.Uid, st.Gid, st.Mode&0o7777),
			Hint:   fmt.Sprintf("pass an empty directory (moat lends it to uid %d for the run and gives it back), or one that uid %d or gid %d may already write", id.UID, id.UID, id.GID)}
	}
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return nil, busy(err)
	}
	// The resolved path, which SweepLent reopens following no link.
	l.rec = lentRecord{Path: real, Dev: st.Dev, Ino: st.Ino, UID: st.Uid, GID: st.Gid, Mode: st.Mode & 0o7777,
		LentUID: id.UID, LentGID: id.GID}
	for _, name := range aclXattrs {
		if v, err := getXattr(fd, name); err == nil {
			if l.rec.ACLs == nil {
				l.rec.ACLs = map[string][]byte{}
			}
			l.rec.ACLs[name] = v
		}
	}
	held, err := writeRecord(rdir, recDir, &l.rec)
	rdir = -1 // writeRecord took it
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	if err := unix.Fchown(fd, int(id.UID), int(id.GID)); err != nil {
		held.drop()
		unix.Close(fd)
		return nil, fmt.Errorf("nsexec workdir %s: lend it to uid %d: %w", path, id.UID, err)
	}
	l.held = held
	l.lent = true
	return l, nil
}

// end gives a lent directory back as it was found and drops the lock.
// Called once the sandbox's every process is gone (its pid 1 was reaped,
// which the kernel holds back until the rest of its pid namespace is).
func (l *lease) end(log *slog.Logger) {
	if l.fd < 0 {
		return
	}
	if l.lent {
		giveBack(l.fd, &l.rec, log)
		l.held.drop() // after: a crash in between leaves a record to give it back by
		l.held = nil
	}
	unix.Close(l.fd) // drops the flock
	l.fd = -1
}

// writableBy reports whether id may create entries in a directory of st
// (the classic permission check; supplementary groups are dropped in the
// sandbox, and ACLs are not consulted).
func writableBy(st *unix.Stat_t, id Identity) bool {
	switch {
	case st.Uid == id.UID:
		return st.Mode&0o300 == 0o300
	case st.Gid == id.GID:
		return st.Mode&0o030 == 0o030
	}
	return st.Mode&0o003 == 0o003
}

// isEmptyDir reads the directory open at fd.
func isEmptyDir(fd int) (bool, error) {
	buf := make([]byte, 4096)
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			return false, err
		}
		if n <= 0 {
			return true, nil
		}
		if _, c, _ := unix.ParseDirent(buf[:n], -1, nil); c > 0 {
			return false, nil
		}
	}
}

func getXattr(fd int, name string) ([]byte, error) {
	n, err := unix.Fgetxattr(fd, name, nil)
	if err != nil {
		return nil, err
	}
	b := make([]byte, n)
	n, err = unix.Fgetxattr(fd, name, b)
	if err != nil {
		return nil, err
	}
	return b[:n], nil
}

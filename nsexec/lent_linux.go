package nsexec

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Records of lent workdirs (issue 14, "Nothing left behind"). A lent
// directory is given back when its sandbox is gone (lease.end); a launcher
// SIGKILLed in between cannot, and nothing else knew the owner and mode it
// had. So, before the chown, the lender writes them to a record file
// named after the directory's device and inode in the "lent" directory
// below the host-id lock directory (root's, 0700, HostIDLockDir), and
// holds an exclusive flock(2) on it until the directory is given back. As
// with host ids, a held lock means a live lender and a crash frees it. A
// free record is stale: SweepLent, or the next lend of the same directory,
// opens the recorded path with no symlink followed, checks that it is
// still that inode and still owned by the id it was lent to, gives it
// back, and removes the record.

// lentRecord is what a record file holds.
type lentRecord struct {
	Path    string            `json:"path"`
	Dev     uint64            `json:"dev"`
	Ino     uint64            `json:"ino"`
	UID     uint32            `json:"uid"` // the owner, group and mode it had
	GID     uint32            `json:"gid"`
	Mode    uint32            `json:"mode"`
	ACLs    map[string][]byte `json:"acls,omitempty"`
	LentUID uint32            `json:"lentUid"` // who it was lent to
	LentGID uint32            `json:"lentGid"`
}

// lentDirOf is the record directory of a host-id lock directory.
func lentDirOf(lockDir string) string { return filepath.Join(lockDir, "lent") }

// lentDir is the record directory o's sandboxes use.
func lentDir(o *options) string {
	if o.ids != nil {
		return lentDirOf(o.ids.dir)
	}
	return lentDirOf(defaultIDRange.dir)
}

func recordName(id fileID) string {
	return strconv.FormatUint(id.Dev, 10) + "-" + strconv.FormatUint(id.Ino, 10)
}

// heldRecord is a written record, locked while the directory is lent.
type heldRecord struct {
	dir  int // the record directory
	fd   int // the record, exclusively flocked
	name string
}

// writeRecord writes rec, locked, under its final name: created under a
// dot name, locked, then renamed, so that a record with its final name is
// always locked by a live lender or free because that lender died.
// It takes over dir, the record directory (closed on failure).
//
// Every root moat that starts sweeps this directory (SweepLent), and took
// an unlocked dot file for one whose lender died before naming it: between
// our create and our flock, a sweeper locked it (our flock failed) or
// locked, unlinked and closed it (our rename failed with ENOENT), which
// failed one soak dispatch in 10,000 (issue 22). A sweep now leaves a dot
// file younger than dotFileAge alone; should one still be taken (a clock
// step), start again under a new dot name, as executor/internal/workdir's
// markers do.
func writeRecord(dir int, dirPath string, rec *lentRecord) (*heldRecord, error) {
	b, err := json.Marshal(rec)
	if err != nil {
		unix.Close(dir)
		return nil, err
	}
	name := recordName(fileID{Dev: rec.Dev, Ino: rec.Ino})
	for range 8 {
		var rnd [6]byte
		_, _ = rand.Read(rnd[:])
		tmp := ".new-" + hex.EncodeToString(rnd[:])
		fd, err := unix.Openat(dir, tmp, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err == unix.EEXIST {
			continue
		}
		if err != nil {
			unix.Close(dir)
			return nil, fmt.Errorf("nsexec: record the lent workdir in %s: %w", dirPath, err)
		}
		fail := func(err error) (*heldRecord, error) {
			_ = unix.Unlinkat(dir, tmp, 0)
			unix.Close(fd)
			unix.Close(dir)
			return nil, fmt.Errorf("nsexec: record the lent workdir in %s: %w", dirPath, err)
		}
		if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err == unix.EWOULDBLOCK {
			unix.Close(fd) // a sweeper holds it, and removes it
			continue
		} else if err != nil {
			return fail(err)
		}
		if n, err := unix.Write(fd, b); err != nil || n != len(b) {
			return fail(fmt.Errorf("write: %d of %d bytes: %v", n, len(b), err))
		}
		err = unix.Renameat2(dir, tmp, dir, name, unix.RENAME_NOREPLACE)
		if err == unix.ENOENT {
			unix.Close(fd) // a sweeper removed the dot file before our flock
			continue
		}
		if err != nil {
			return fail(err)
		}
		return &heldRecord{dir: dir, fd: fd, name: name}, nil
	}
	unix.Close(dir)
	return nil, fmt.Errorf("nsexec: record the lent workdir in %s: 8 attempts taken by concurrent sweeps", dirPath)
}

// drop removes the record and its lock, once the directory was given back.
func (h *heldRecord) drop() {
	if h == nil {
		return
	}
	_ = unix.Unlinkat(h.dir, h.name, 0)
	unix.Close(h.fd)
	unix.Close(h.dir)
}

// giveBack restores a lent directory, open at fd, to what rec says it had.
func giveBack(fd int, rec *lentRecord, log *slog.Logger) {
	if err := unix.Fchown(fd, int(rec.UID), int(rec.GID)); err != nil {
		log.Warn("give the workdir back to its owner", "workdir", rec.Path, "uid", rec.UID, "gid", rec.GID, "err", err)
	}
	for _, name := range aclXattrs {
		var err error
		if v, ok := rec.ACLs[name]; ok {
			err = unix.Fsetxattr(fd, name, v, 0)
		} else if err = unix.Fremovexattr(fd, name); errors.Is(err, unix.ENODATA) || errors.Is(err, unix.EOPNOTSUPP) {
			err = nil
		}
		if err != nil {
			log.Warn("restore the workdir's ACL", "workdir", rec.Path, "xattr", name, "err", err)
		}
	}
	// After the ACLs: setting an access ACL rewrites the mode's group bits.
	if err := unix.Fchmod(fd, rec.Mode); err != nil {
		log.Warn("restore the workdir's mode", "workdir", rec.Path, "mode", fmt.Sprintf("%#o", rec.Mode), "err", err)
	}
}

// reclaimStale gives back the directory open at fd (id) if a stale record
// in the record directory dir says it is still lent, and removes the
// record. A record whose lock is held is a live lender's, left alone: the
// directory's own flock and mode then decide.
func reclaimStale(dir, fd int, id fileID, log *slog.Logger) error {
	name := recordName(id)
	rfd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("nsexec: open the lent-workdir record %s: %w", name, err)
	}
	defer unix.Close(rfd)
	if err := unix.Flock(rfd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return nil
	}
	rec, err := readRecord(rfd)
	if err == nil && rec.Dev == id.Dev && rec.Ino == id.Ino {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err == nil && st.Uid == rec.LentUID {
			giveBack(fd, rec, log)
			log.Info("gave back a workdir a killed run had lent", "workdir", rec.Path, "uid", rec.UID)
		}
	}
	_ = unix.Unlinkat(dir, name, 0)
	return nil
}

func readRecord(fd int) (*lentRecord, error) {
	b := make([]byte, 64<<10)
	n, err := unix.Pread(fd, b, 0)
	if err != nil {
		return nil, err
	}
	var rec lentRecord
	if err := json.Unmarshal(b[:n], &rec); err != nil {
		return nil, err
	}
	return &rec, nil
}

// SweepLent gives back every workdir that a root moat process lent to a
// sandbox and could not give back because it was killed: those whose
// record's lock is free (see the records above). It does nothing unless
// the caller is root. A recorded path is opened with no symlink followed
// and given back only when it still is the recorded inode, owned by the
// id it was lent to, and no live sandbox holds it. opts name the host-id
// lock directory (WithHostIDRange); others are ignored. It costs one
// failed open when nothing was ever lent, and one readdir of a directory
// holding a record per lent workdir otherwise.
func SweepLent(log *slog.Logger, opts ...Option) {
	if os.Geteuid() != 0 {
		return
	}
	o := newOptions(opts)
	if log == nil {
		log = o.logger
	}
	path := lentDir(&o)
	dir, err := openLockDirAt(path, false) // checks owner and mode
	if errors.Is(err, unix.ENOENT) {
		return
	}
	if err != nil {
		log.Warn("lent workdir sweep: skipped", "err", err)
		return
	}
	defer unix.Close(dir)
	buf := make([]byte, 4096)
	var names []string
	for {
		n, err := unix.ReadDirent(dir, buf)
		if err != nil || n <= 0 {
			break
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
	for _, name := range names {
		sweepRecord(dir, name, log)
	}
}

// dotFileAge is how old an unnamed record must be before a sweep takes it
// for a dead lender's; a live one is named within microseconds.
const dotFileAge = time.Minute

func sweepRecord(dir int, name string, log *slog.Logger) {
	rfd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(rfd)
	if strings.HasPrefix(name, ".") {
		// A live lender locks its dot file just after creating it; left
		// alone while young, it is never taken in between (writeRecord).
		var st unix.Stat_t
		if err := unix.Fstat(rfd, &st); err != nil || time.Since(time.Unix(st.Mtim.Unix())) < dotFileAge {
			return
		}
	}
	if err := unix.Flock(rfd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return // a live lender's
	}
	// The lock may be on a record its lender dropped (unlinked, then
	// closed, heldRecord.drop) after the open above: the name no longer
	// leads to this file, and may already be a new lender's record of the
	// same workdir. Neither is this sweep's to act on.
	var held, now unix.Stat_t
	if unix.Fstat(rfd, &held) != nil || unix.Fstatat(dir, name, &now, unix.AT_SYMLINK_NOFOLLOW) != nil ||
		held.Dev != now.Dev || held.Ino != now.Ino {
		return
	}
	if strings.HasPrefix(name, ".") {
		_ = unix.Unlinkat(dir, name, 0) // its lender died before naming it: nothing was lent
		return
	}
	rec, err := readRecord(rfd)
	if err != nil || !filepath.IsAbs(rec.Path) || recordName(fileID{Dev: rec.Dev, Ino: rec.Ino}) != name {
		log.Warn("lent workdir sweep: an unreadable record; dropped", "record", name, "err", err)
		_ = unix.Unlinkat(dir, name, 0)
		return
	}
	how := &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS}
	fd, err := unix.Openat2(unix.AT_FDCWD, rec.Path, how)
	if err != nil {
		if !errors.Is(err, unix.ENOENT) {
			log.Warn("lent workdir sweep: the workdir cannot be opened without following a symlink; its record is dropped", "workdir", rec.Path, "err", err)
		}
		_ = unix.Unlinkat(dir, name, 0)
		return
	}
	defer unix.Close(fd)
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return // a live sandbox uses it now; its lender gives it back
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err == nil && st.Dev == rec.Dev && st.Ino == rec.Ino && st.Uid == rec.LentUID {
		giveBack(fd, rec, log)
		log.Info("lent workdir sweep: gave back a workdir a killed run had lent", "workdir", rec.Path, "uid", rec.UID)
	}
	_ = unix.Unlinkat(dir, name, 0)
}

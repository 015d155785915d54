package egress

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The socket directory New creates holds a lock file, flock(2)ed for the
// proxy's life: a held lock means a live proxy, and the kernel drops it
// when the process dies, however it dies. New removes the directories of
// this user whose lock is free, so a killed `moat run` leaves nothing
// behind for long. A directory with no lock file yet is one being made,
// and is left alone for a minute.

const (
	dirPrefix = "moat-egress-"
	lockName  = "lock"
)

// lockDir creates and locks dir's lock file; the descriptor holds the lock.
// The file is locked under another name and then renamed, so a sweep never
// finds it unlocked while this proxy is still being made.
func lockDir(dir string) (int, error) {
	tmp := filepath.Join(dir, lockName+".new")
	fd, err := unix.Open(tmp, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return -1, &os.PathError{Op: "create", Path: tmp, Err: err}
	}
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		unix.Close(fd)
		return -1, &os.PathError{Op: "flock", Path: tmp, Err: err}
	}
	if err := unix.Rename(tmp, filepath.Join(dir, lockName)); err != nil {
		unix.Close(fd)
		return -1, &os.PathError{Op: "rename", Path: tmp, Err: err}
	}
	return fd, nil
}

// sweep removes the socket directories under base that this user owns and
// no live proxy holds.
func sweep(base string, log *slog.Logger) {
	entries, err := os.ReadDir(base)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), dirPrefix) || !e.IsDir() { // IsDir: a symlink is not one
			continue
		}
		dir := filepath.Join(base, e.Name())
		if err := removeIfStale(dir); err != nil {
			log.Warn("remove a stale egress socket directory", "dir", dir, "err", err)
		}
	}
}

func removeIfStale(dir string) error {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != os.Geteuid() {
		return nil // someone else's, or gone
	}
	fd, err := unix.Open(filepath.Join(dir, lockName), unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		// Being made, or its maker died before it took the lock: New takes
		// it within microseconds, so an old one is a dead maker's.
		if time.Since(time.Unix(st.Mtim.Unix())) < time.Minute {
			return nil
		}
		return os.RemoveAll(dir)
	}
	if err != nil {
		return fmt.Errorf("open the lock: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return nil // a live proxy's
	}
	// os.RemoveAll never follows a symlink planted inside.
	return os.RemoveAll(dir)
}

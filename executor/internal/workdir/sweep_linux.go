//go:build linux

package workdir

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Sweep removes the workdirs of this user's runs that died without
// removing them: those whose marker's lock is free. It reads only the
// calling user's marker directory (one open and one readdir of a
// directory that holds a marker per running workdir). A marker's workdir
// is removed with RemoveAll, and only when it is a directory (never
// through a symlink); what cannot be removed is logged and left for the
// next Sweep. It returns how many workdirs it removed.
func Sweep(log *slog.Logger) int {
	mfd, err := openMarkers(false)
	if errors.Is(err, unix.ENOENT) {
		return 0
	}
	if err != nil {
		log.Warn("workdir sweep: skipped", "err", err)
		return 0
	}
	defer unix.Close(mfd)
	names, err := readNames(mfd)
	if err != nil {
		log.Warn("workdir sweep: list the markers", "err", err)
		return 0
	}
	removed := 0
	for _, name := range names {
		fd, err := unix.Openat(mfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
			unix.Close(fd) // held: its run is alive
			continue
		}
		gone, ok := sweepOne(fd, name, log)
		if ok {
			_ = unix.Unlinkat(mfd, name, 0)
		}
		if gone {
			removed++
		}
		unix.Close(fd)
	}
	return removed
}

// sweepOne removes the workdir a dead run's marker (open at fd) names. A
// dot name is a marker its creator never named, with no workdir. ok says
// the marker may go; gone that a workdir was removed.
func sweepOne(fd int, name string, log *slog.Logger) (gone, ok bool) {
	if strings.HasPrefix(name, ".") {
		return false, true
	}
	buf := make([]byte, 4097)
	n, err := unix.Pread(fd, buf, 0)
	if err != nil || n == 0 || n == len(buf) {
		return false, true // never written: no workdir was made
	}
	path, id, found := strings.Cut(string(buf[:n]), "\x00")
	if !found {
		// A marker of a moat from before tool names could hold a
		// newline: the path, then a newline and the id.
		path, id, _ = strings.Cut(path, "\n")
	}
	if !filepath.IsAbs(path) || filepath.Clean(path) != path {
		log.Warn("workdir sweep: a marker names no workdir; dropped", "marker", name)
		return false, true
	}
	var st unix.Stat_t
	err = unix.Lstat(path, &st)
	switch {
	case errors.Is(err, unix.ENOENT):
		return false, true
	case err != nil:
		log.Warn("workdir sweep: stat a killed run's workdir", "workdir", path, "err", err)
		return false, false
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		// Not what the run made: left alone, and the marker goes.
		log.Warn("workdir sweep: a killed run's workdir is not a directory; left alone", "workdir", path)
		return false, true
	case id != "" && id != fileID(&st):
		// Another directory by now (the run died before it recorded which
		// one was its own only when id is empty).
		return false, true
	}
	if err := RemoveAll(path); err != nil {
		log.Warn("workdir sweep: remove a killed run's workdir", "workdir", path, "err", err)
		return false, false
	}
	log.Info("workdir sweep: removed a killed run's workdir", "workdir", path)
	return true, true
}

// readNames lists the directory open at fd.
func readNames(fd int) ([]string, error) {
	buf := make([]byte, 4096)
	var names []string
	for {
		n, err := unix.ReadDirent(fd, buf)
		if err != nil {
			return nil, &os.PathError{Op: "readdirent", Path: markerDir(), Err: err}
		}
		if n <= 0 {
			return names, nil
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
}

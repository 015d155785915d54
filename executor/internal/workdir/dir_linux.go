//go:build linux

package workdir

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/moat-sandbox/moat/nsexec/hostpath"
	"golang.org/x/sys/unix"
)

// markerRoot holds the users' marker directories: a tmpfs on every Linux
// system, world-writable and sticky, where making and removing a marker
// costs microseconds (a workdir base on disk costs about 0.3 ms for each
// directory made and removed on the reference host). Tests change it.
var markerRoot = "/dev/shm"

// Dir is one workdir made by Create, with its marker.
type Dir struct {
	// Path is the workdir.
	Path string

	markers int // the user's marker directory, -1 without a marker
	lock    int // the marker, exclusively flocked; -1 without one
	name    string
}

// markerDir names the calling user's marker directory.
func markerDir() string {
	return filepath.Join(markerRoot, "moat-workdirs-"+strconv.Itoa(os.Geteuid()))
}

// Create makes a fresh, empty 0700 directory in base named prefix and six
// random characters (as mkdtemp(3) does), with its marker locked until
// Remove or Release. A marker that cannot be made (the marker directory's
// name is another user's, say) is logged and the workdir made without one:
// it works the same, but Sweep cannot remove it should this process be
// killed.
//
// base is resolved once by the rule of nsexec/hostpath (a symlink on the
// way is followed only if root or the caller could have planted it; else a
// *hostpath.LinkError), the workdir made below that descriptor, and
// Dir.Path is the resolved path, with no symlink in it: the sandbox's
// setup reopens it following none.
func Create(base, prefix string, log *slog.Logger) (*Dir, error) {
	if strings.ContainsRune(prefix, '/') || strings.IndexByte(prefix, 0) >= 0 {
		// A name from a caller (a tool's) must not take the workdir out of
		// base, nor cut the path short.
		return nil, &os.PathError{Op: "mkdirtemp", Path: filepath.Join(base, prefix+"*"), Err: unix.EINVAL}
	}
	bfd, real, err := hostpath.Open(base, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, fmt.Errorf("mkdirtemp %s: %w", base, err)
	}
	defer unix.Close(bfd)
	base = real
	d := &Dir{markers: -1, lock: -1}
	if err := d.mark(); err != nil {
		if errors.Is(err, unix.ENOENT) {
			log.Debug("workdir: no marker, so a killed run's workdir will not be swept", "err", err)
		} else {
			log.Warn("workdir: no marker, so a killed run's workdir will not be swept", "err", err)
		}
	}
	for retry := range 100 {
		name := prefix + randomName()
		path := filepath.Join(base, name)
		if d.lock >= 0 {
			// Written before the directory exists: a marker names every
			// workdir that may exist.
			if err := writePath(d.lock, path, retry > 0); err != nil {
				d.Release()
				return nil, fmt.Errorf("mkdirtemp %s: write the marker: %w", base, err)
			}
		}
		err := unix.Mkdirat(bfd, name, 0o700)
		if err == unix.EEXIST {
			continue
		}
		if err != nil {
			d.Release()
			return nil, &os.PathError{Op: "mkdirtemp", Path: filepath.Join(base, prefix+"*"), Err: err}
		}
		if d.lock >= 0 {
			// And which directory it is, so that Sweep never removes
			// another one a later run made under the same name.
			var st unix.Stat_t
			if err := unix.Fstatat(bfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil {
				_, _ = unix.Pwrite(d.lock, []byte(fileID(&st)), int64(len(path)+1))
			}
		}
		d.Path = path
		return d, nil
	}
	d.Release()
	return nil, &os.PathError{Op: "mkdirtemp", Path: filepath.Join(base, prefix+"*"), Err: os.ErrExist}
}

// mark makes the marker: created and locked under a dot name, which Sweep
// takes for a creator's that died before it named it, then renamed, so a
// marker with its final name is always locked by a live owner or free
// because that owner died.
func (d *Dir) mark() error {
	mfd, err := openMarkers(true)
	if err != nil {
		return err
	}
	for range 8 {
		tmp := ".new-" + randomName()
		fd, err := unix.Openat(mfd, tmp, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err == unix.EEXIST {
			continue
		}
		if err != nil {
			unix.Close(mfd)
			return fmt.Errorf("make a marker in %s: %w", markerDir(), err)
		}
		if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
			unix.Close(fd) // a Sweep took it for a dead creator's
			continue
		}
		name := "w-" + randomName() + randomName()
		err = unix.Renameat2(mfd, tmp, mfd, name, unix.RENAME_NOREPLACE)
		if err != nil {
			_ = unix.Unlinkat(mfd, tmp, 0)
			unix.Close(fd)
			if err == unix.EEXIST || err == unix.ENOENT { // a name taken; a Sweep took the dot file
				continue
			}
			unix.Close(mfd)
			return fmt.Errorf("name a marker in %s: %w", markerDir(), err)
		}
		d.markers, d.lock, d.name = mfd, fd, name
		return nil
	}
	unix.Close(mfd)
	return fmt.Errorf("make a marker in %s: no free name", markerDir())
}

// openMarkers opens the user's marker directory, making it when create is
// set. It must be a directory of this user's, mode 0700, not a symlink.
func openMarkers(create bool) (int, error) {
	dir := markerDir()
	const flags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	fd, err := unix.Open(dir, flags, 0)
	if err == unix.ENOENT && create {
		if err := unix.Mkdir(dir, 0o700); err != nil && err != unix.EEXIST {
			return -1, fmt.Errorf("make the marker directory: %w", err)
		}
		fd, err = unix.Open(dir, flags, 0)
	}
	if err != nil {
		return -1, fmt.Errorf("open the marker directory (no symlink allowed): %w", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("stat the marker directory: %w", err)
	}
	if st.Uid != uint32(os.Geteuid()) || st.Mode&0o7777 != 0o700 {
		unix.Close(fd)
		return -1, fmt.Errorf("the marker directory %s has owner %d and mode %#o; it must be uid %d's with mode 0700 (remove it)",
			dir, st.Uid, st.Mode&0o7777, os.Geteuid())
	}
	return fd, nil
}

// fileID is a directory's device and inode, as a marker records them.
func fileID(st *unix.Stat_t) string {
	return strconv.FormatUint(st.Dev, 10) + ":" + strconv.FormatUint(st.Ino, 10)
}

// writePath makes the marker open at fd hold path; again says it held
// another one.
func writePath(fd int, path string, again bool) error {
	if again {
		if err := unix.Ftruncate(fd, 0); err != nil {
			return err
		}
	}
	// Ended by a NUL, which no path holds (a tool's name may hold a
	// newline); the directory's id follows it once it exists.
	_, err := unix.Pwrite(fd, []byte(path+"\x00"), 0)
	return err
}

// Remove removes the workdir (RemoveAll) and, once it is gone, its
// marker. A failure is logged: the marker then stays, unlocked, so a later
// Sweep tries again.
func (d *Dir) Remove(log *slog.Logger) {
	if err := RemoveAll(d.Path); err != nil {
		log.Warn("remove workdir", "workdir", d.Path, "err", err)
		d.unlock(false)
		return
	}
	d.unlock(true)
}

// Release drops the marker and leaves the workdir, which is no longer
// this Dir's (the warm pool renamed it over a dispatch's own).
func (d *Dir) Release() { d.unlock(true) }

func (d *Dir) unlock(unlink bool) {
	if d.lock < 0 {
		return
	}
	if unlink {
		_ = unix.Unlinkat(d.markers, d.name, 0)
	}
	unix.Close(d.lock)
	unix.Close(d.markers)
	d.lock, d.markers = -1, -1
}

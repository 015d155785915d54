//go:build linux

package workdir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// RemoveAll removes the directory path and everything in it. A missing
// path is not an error. Nothing below path's parent is ever reached
// through a symlink: a link a tool planted is removed, never followed.
//
// path's parent is opened as it is (it is the caller's workdir base, which
// no tool can change); every entry below it is handled relative to a
// descriptor of its own parent: unlinkat(2) first, and for a directory
// (unlink(2) says EISDIR on Linux) openat(2) with O_NOFOLLOW|O_DIRECTORY,
// its entries, then unlinkat(AT_REMOVEDIR). A directory of ours that the
// tool made unreadable or unwritable gets u+rwx back before its entries
// are read or removed: through fchmod(2) on the opened directory, or,
// when it cannot even be opened for reading (mode 0000), through its
// /proc/self/fd link of an O_PATH descriptor, which names that inode and
// no other (proc(5), /proc/pid/fd). Root is never denied and changes no
// mode.
func RemoveAll(path string) error {
	path = filepath.Clean(path)
	parent, name := filepath.Split(path)
	if name == "" || name == "." || name == ".." || name == "/" {
		return fmt.Errorf("remove workdir %q: not a directory entry", path)
	}
	if parent == "" {
		parent = "."
	}
	pfd, err := unix.Open(parent, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove workdir %s: open its parent: %w", path, err)
	}
	defer unix.Close(pfd)
	if err := removeAt(pfd, name, path); err != nil {
		return fmt.Errorf("remove workdir %s: %w", path, err)
	}
	return nil
}

// removeAt removes the entry name of the directory open at dirfd, and
// everything below it when it is a directory; path only names it in
// errors.
func removeAt(dirfd int, name, path string) error {
	switch err := unix.Unlinkat(dirfd, name, 0); err {
	case nil, unix.ENOENT:
		return nil
	case unix.EISDIR:
	default:
		return &os.PathError{Op: "unlink", Path: path, Err: err}
	}
	fd, err := openDir(dirfd, name)
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil
	case errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.ELOOP):
		// Replaced by a non-directory since the unlink: remove that.
		if err := unix.Unlinkat(dirfd, name, 0); err != nil && err != unix.ENOENT {
			return &os.PathError{Op: "unlink", Path: path, Err: err}
		}
		return nil
	case err != nil:
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	err = emptyDir(fd, path)
	unix.Close(fd)
	if err != nil {
		return err
	}
	if err := unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR); err != nil && err != unix.ENOENT {
		return &os.PathError{Op: "rmdir", Path: path, Err: err}
	}
	return nil
}

// openDir opens the directory name of dirfd for reading without following
// a symlink, and makes sure its owner may read, write and search it.
func openDir(dirfd int, name string) (int, error) {
	const flags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	fd, err := unix.Openat(dirfd, name, flags, 0)
	if err == unix.EACCES {
		// Unreadable (0000, 0300): an O_PATH descriptor needs no
		// permission on the directory itself.
		if err := chmodUnreadable(dirfd, name); err != nil {
			return -1, err
		}
		fd, err = unix.Openat(dirfd, name, flags, 0)
	}
	if err != nil {
		return -1, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if uid := os.Geteuid(); uid != 0 && st.Uid == uint32(uid) && st.Mode&0o700 != 0o700 {
		if err := unix.Fchmod(fd, st.Mode&0o7777|0o700); err != nil {
			unix.Close(fd)
			return -1, err
		}
	}
	return fd, nil
}

// chmodUnreadable gives the directory name of dirfd u+rwx through its
// O_PATH descriptor's /proc/self/fd link (fchmod(2) refuses an O_PATH
// descriptor with EBADF).
func chmodUnreadable(dirfd int, name string) error {
	pfd, err := unix.Openat(dirfd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		return err
	}
	if st.Uid != uint32(os.Geteuid()) {
		return unix.EACCES // not ours to change
	}
	return unix.Chmod("/proc/self/fd/"+strconv.Itoa(pfd), st.Mode&0o7777|0o700)
}

// emptyDir removes every entry of the directory open at fd. It reads all
// names, removes them, and reads again from the start until a read finds
// none; a round with a failure ends it with that round's first error.
func emptyDir(fd int, path string) error {
	buf := make([]byte, 8192)
	for {
		if _, err := unix.Seek(fd, 0, 0); err != nil {
			return &os.PathError{Op: "seek", Path: path, Err: err}
		}
		var names []string
		for {
			n, err := unix.ReadDirent(fd, buf)
			if err != nil {
				return &os.PathError{Op: "readdirent", Path: path, Err: err}
			}
			if n <= 0 {
				break
			}
			_, _, names = unix.ParseDirent(buf[:n], -1, names)
		}
		if len(names) == 0 {
			return nil
		}
		var first error
		for _, n := range names {
			if err := removeAt(fd, n, path+"/"+n); err != nil && first == nil {
				first = err
			}
		}
		if first != nil {
			return first
		}
	}
}

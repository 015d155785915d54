package nsexec

import (
	"errors"

	"golang.org/x/sys/unix"
)

// maxCopyUpDepth bounds how deep tmpcopyup descends.
const maxCopyUpDepth = 64

// copyUp fills the new tmpfs tree (detached, not yet attached) with a copy
// of what the directory at target in the new root holds, before the tmpfs
// covers it: runc's tmpcopyup (libcontainer/rootfs_linux.go, a tmpfs that
// starts with the image's /run or /etc). The target is resolved as the
// mount will be; a missing one has nothing to copy. The copy is made as the
// sandbox's identity (the init switched to it before the tmpfs mounts),
// which owns what it creates, and takes directories, regular files and
// symlinks, each with its mode but the setuid and setgid bits (the tmpfs
// is nosuid; no file a sandbox leaves carries them); devices, FIFOs and
// sockets are not copied. A symlink is copied as a symlink, never followed,
// and nothing outside the target's tree is read. The tmpfs's size cap
// bounds the copy (ENOSPC).
func copyUp(root int, target string, resolve uint64, tree int) error {
	src, err := openTarget(root, target, resolve)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return stepErr(StepMountTarget, target, "tmpcopyup", err)
	}
	defer unix.Close(src)
	dir, err := unix.Openat(src, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOTDIR) {
		return nil // the mount fails on its own: a tmpfs needs a directory
	}
	if err != nil {
		return stepErr(StepMount, target, "tmpcopyup: open the target", err)
	}
	dst, err := unix.Openat(tree, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(dir)
		return stepErr(StepMount, target, "tmpcopyup: open the tmpfs", err)
	}
	defer unix.Close(dst)
	if err := copyDir(dir, dst, 0); err != nil {
		return stepErr(StepMount, target, "tmpcopyup", err)
	}
	return nil
}

// copyDir copies the entries of the open directory src into dst and
// closes src.
func copyDir(src, dst, depth int) error {
	if depth > maxCopyUpDepth {
		unix.Close(src)
		return unix.ELOOP
	}
	names, err := readDirNames(src)
	if err != nil {
		unix.Close(src)
		return err
	}
	defer unix.Close(src)
	for _, name := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(src, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
		mode := st.Mode & 0o1777
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			if err := unix.Mkdirat(dst, name, 0o700); err != nil {
				return err
			}
			sub, err := unix.Openat(src, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			subDst, err := unix.Openat(dst, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				unix.Close(sub)
				return err
			}
			err = copyDir(sub, subDst, depth+1)
			if err == nil {
				err = unix.Fchmod(subDst, mode)
			}
			unix.Close(subDst)
			if err != nil {
				return err
			}
		case unix.S_IFREG:
			if err := copyFile(src, dst, name, mode); err != nil {
				return err
			}
		case unix.S_IFLNK:
			target, err := readlinkat(src, name)
			if err != nil {
				return err
			}
			if err := unix.Symlinkat(target, dst, name); err != nil {
				return err
			}
		}
	}
	return nil
}

func copyFile(src, dst int, name string, mode uint32) error {
	in, err := unix.Openat(src, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(in)
	out, err := unix.Openat(dst, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
	if err != nil {
		return err
	}
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Read(in, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			unix.Close(out)
			return err
		}
		if n == 0 {
			break
		}
		if err := writeAll(out, buf[:n]); err != nil {
			unix.Close(out)
			return err
		}
	}
	// The umask took bits from the mode at creation.
	if err := unix.Fchmod(out, mode); err != nil {
		unix.Close(out)
		return err
	}
	return unix.Close(out)
}

// readDirNames lists an open directory's entries but . and ..
func readDirNames(fd int) ([]string, error) {
	var names []string
	buf := make([]byte, 32<<10)
	for {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			return names, nil
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
}

func readlinkat(dir int, name string) (string, error) {
	b := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(dir, name, b)
	if err != nil {
		return "", err
	}
	return string(b[:n]), nil
}

package nsexec

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// ErrNotRangeLease means a descriptor given to WithSharedRange is not a
// held lease of moat's range space: not a lock file in its directory, a
// lock of some other space (a single host id's), a copy of no holder's
// lease, or a range no running sandbox holds any more.
var ErrNotRangeLease = errors.New("nsexec: not a held lease of moat's host id range space")

// A pod's containers share one id range (issue 29, items 2 and 3): the
// pause container's sandbox takes a block (WithHostRange), and every
// container that joins its namespaces is mapped onto exactly that block,
// keeping a copy of the pause container's lease descriptor for its own
// life (hostid_linux.go: a flock belongs to an open file description, so
// the block stays held until the last copy closes, whichever container
// ends first). The copy comes from the pause container's holder
// (Process.ShareLease, Adopted.ShareLease; moat-runtime passes it with
// SCM_RIGHTS), and whoever hands one in is checked, since a descriptor is
// the one thing that names a block here:
//
//   - fstat: a regular file of this user, as acquire requires of them;
//   - its name (the last component of its /proc/self/fd link, a hint
//     only) is a block's first id: aligned, in the space;
//   - that name, looked up beneath the lock directory (opened by the
//     hostpath rule, not following a symlink at the last component), is
//     the descriptor's own inode: a descriptor of another file, of a file
//     of that name elsewhere, of a single id's lock, is not the lease;
//   - the block is held, and held by this descriptor's open file
//     description: a new open of the lock file whose flock fails with
//     EWOULDBLOCK says someone holds it, and flock(LOCK_EX|LOCK_NB) on the
//     descriptor itself succeeds only if that someone is this description
//     (flock(2): a lock converts, another description's conflicts). A
//     descriptor opened anew beside a running pod's lease fails the
//     second; one of a pod that has ended fails the first.
//
// The sandbox never frees the block itself: closing its copy drops one
// reference to the pod's description, nothing more.

// sharedLease checks f (see above) against the range space r and returns
// a lease of the sandbox's own on the same description.
func (r idRange) sharedLease(f *os.File) (*idLease, error) {
	if err := r.check(); err != nil {
		return nil, err
	}
	if f == nil {
		return nil, fmt.Errorf("%w: no descriptor", ErrNotRangeLease)
	}
	sc, err := f.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotRangeLease, err)
	}
	dup := -1
	var derr error
	if err := sc.Control(func(fd uintptr) { dup, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 3) }); err != nil || derr != nil {
		return nil, fmt.Errorf("%w: the descriptor cannot be copied (%w); pass an open lease", ErrNotRangeLease, errors.Join(err, derr))
	}
	l, err := r.checkLease(dup)
	if err != nil {
		unix.Close(dup)
		return nil, err
	}
	return l, nil
}

// checkLease is sharedLease on the copy fd, which the returned lease owns.
func (r idRange) checkLease(fd int) (*idLease, error) {
	notLease := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s; pass a copy of the lease of the sandbox whose range is shared (Process.ShareLease)", ErrNotRangeLease, fmt.Sprintf(format, args...))
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, notLease("fstat: %v", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Uid != uint32(os.Geteuid()) {
		return nil, notLease("a file of mode %#o and owner %d, not a lock file of uid %d", st.Mode, st.Uid, os.Geteuid())
	}
	path, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return nil, notLease("its name: %v", err)
	}
	name := filepath.Base(path)
	id, err := strconv.ParseUint(name, 10, 32)
	size := r.blockSize()
	if err != nil || strconv.FormatUint(id, 10) != name || uint32(id) < r.first ||
		(uint32(id)-r.first)%size != 0 || (uint32(id)-r.first)/size >= r.count {
		return nil, notLease("%s names no block of the space (%d blocks of %d ids from %d)", path, r.count, size, r.first)
	}
	dir, err := openLockDirAt(r.dir, false)
	if err != nil {
		return nil, notLease("%v", err)
	}
	defer unix.Close(dir)
	var at unix.Stat_t
	if err := unix.Fstatat(dir, name, &at, unix.AT_SYMLINK_NOFOLLOW); err != nil || at.Dev != st.Dev || at.Ino != st.Ino {
		return nil, notLease("%s is not the lock file %s of the range space", path, filepath.Join(r.dir, name))
	}
	probe, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, notLease("open %s: %v", path, err)
	}
	err = unix.Flock(probe, unix.LOCK_EX|unix.LOCK_NB)
	unix.Close(probe) // drops the probe's flock, if it got one
	if err == nil {
		return nil, notLease("no running sandbox holds the range %d (its pod has ended)", id)
	}
	if err != unix.EWOULDBLOCK {
		return nil, notLease("probe the lock of %d: %v", id, err)
	}
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return nil, notLease("another descriptor holds the range %d, not this one (%v)", id, err)
	}
	return &idLease{key: heldKey{r.dir, uint32(id)}, fd: fd, size: size, shared: true}, nil
}

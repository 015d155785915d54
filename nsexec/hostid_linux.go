package nsexec

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/moat-sandbox/moat/nsexec/hostpath"
	"golang.org/x/sys/unix"
)

// Host ids of root-started sandboxes (issue 13, item 4). One shared host id
// let a setuid file left by one sandbox, or any process running as that
// id, reach every other sandbox's workdir. So each sandbox started by root
// without WithIdentity gets a host uid and gid of its own from a reserved
// range, for as long as its init runs:
//
//   - the range is HostIDFirst..HostIDFirst+HostIDCount-1
//     (2000000000..2000065535), inside the block systemd leaves unassigned
//     (1879048192..2147352575, https://systemd.io/UIDS-GIDS/), so it is
//     nobody's: not root, not a login user, not a container range;
//   - id N is held by an exclusive flock(2) on the file HostIDLockDir/N,
//     taken by the process that starts the sandbox and kept until its init
//     was reaped. The kernel drops a flock when the last descriptor of its
//     open file description closes, so a holder that crashes or is
//     SIGKILLed frees its ids with no cleanup; its sandboxes die with it
//     (their init has a parent-death SIGKILL, and the kernel kills a pid
//     namespace with its init). The descriptor is close-on-exec and never
//     reaches a sandbox.
//   - the directory is root's own, mode 0700, opened without following
//     symlinks; a directory or lock file of another owner or mode is
//     refused, never repaired.
//   - when every id is held, Start and Prepare fail with
//     ErrHostIDsExhausted.
const (
	HostIDFirst   = DefaultHostID
	HostIDCount   = 65536
	HostIDLockDir = "/run/moat/hostids"
)

// ErrHostIDsExhausted means every host id of the range is held by a
// running sandbox.
var ErrHostIDsExhausted = errors.New("nsexec: every host id of the sandbox range is held by a running sandbox")

// ErrHostRangesExhausted means every block of the range space
// (WithHostRange) is held by a running sandbox.
var ErrHostRangesExhausted = errors.New("nsexec: every host id range of the range space is held by a running sandbox")

var (
	defaultIDRange   = idRange{dir: HostIDLockDir, first: HostIDFirst, count: HostIDCount}
	defaultHostRange = idRange{dir: HostRangeLockDir, first: HostRangeFirst, count: HostRangeCount, size: HostRangeSize}
)

// Ranges of ids (WithHostRange) are allocated beside the single ids, by
// the same rule: block N of the range space is held by an exclusive flock
// on HostRangeLockDir/<its first id>, the lowest free block is taken, a
// holder that dies frees its blocks with its descriptors, and the scan is
// bounded by the block count. The two spaces are disjoint (idmap.go), and
// WithIDMaps refuses maps that reach into either (mapping_linux.go), so no
// two running sandboxes share a host id whichever allocator gave it
// (TestHostIDsNeverShared).
//
// A range must stay held while any container that uses it runs, and the
// containers of a pod share one (the pod's user namespace, which its
// containers join): a flock is held by an open file description, not a
// process, and lasts until the last descriptor of it closes, so a joining
// container keeps a copy of the pod's lock descriptor (Process.ShareLease,
// passed by SCM_RIGHTS or pidfd_getfd(2); WithSharedRange,
// sharedrange_linux.go) and the range stays held until the last of them
// has ended, whichever ends first. Opening the lock file
// anew would not do: that is another open file description, whose flock
// the pod's own excludes.

// idLease is one held host id, or one block of ids.
type idLease struct {
	key  heldKey
	fd   int
	size uint32 // ids in the block: 1 for a single id
	// shared: a copy of another sandbox's lease (WithSharedRange), not in
	// held, whose block this process never took.
	shared bool
}

// heldKey names a lock file; held lists those this process holds, which
// acquire skips without a system call (an embedder with a warm pool holds
// many; each would otherwise cost an open and a failed flock per start).
type heldKey struct {
	dir string
	id  uint32
}

var held = struct {
	sync.Mutex
	ids map[heldKey]bool
}{ids: map[heldKey]bool{}}

// release frees the id. A nil lease is a no-op.
func (l *idLease) release() {
	if l != nil && l.fd >= 0 {
		if !l.shared {
			held.Lock()
			delete(held.ids, l.key)
			held.Unlock()
		}
		unix.Close(l.fd)
		l.fd = -1
	}
}

// share returns a copy of the lease's descriptor: the lock stays held
// while it is open, whatever becomes of the lease (see above).
func (l *idLease) share() (*os.File, error) {
	if l == nil || l.fd < 0 {
		return nil, errors.New("nsexec: no host id lease to share")
	}
	fd, err := unix.FcntlInt(uintptr(l.fd), unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		return nil, fmt.Errorf("nsexec: share the host id lease: %w", err)
	}
	return os.NewFile(uintptr(fd), "moat-host-id-lease"), nil
}

// blockSize is r's ids per block.
func (r idRange) blockSize() uint32 { return max(r.size, 1) }

// check refuses a range that includes host root or runs past the last
// valid id.
func (r idRange) check() error {
	if r.first == 0 {
		return fmt.Errorf("nsexec host id range starting at 0: refusing to map host root into a sandbox")
	}
	if r.count == 0 {
		return fmt.Errorf("nsexec: host id range %s is empty", r.dir)
	}
	if uint64(r.first)+uint64(r.count)*uint64(r.blockSize()) > math.MaxUint32 {
		return fmt.Errorf("nsexec: host id range %d + %d blocks of %d runs past 4294967294", r.first, r.count, r.blockSize())
	}
	return nil
}

// acquire takes the lowest free id (or block of ids) of r. Scanning from
// the first keeps the lock files as few as the most sandboxes ever run at
// once (a random start would leave up to HostIDCount inodes in /run); a
// held one costs one failed non-blocking flock, a few microseconds.
func (r idRange) acquire() (*idLease, error) {
	if err := r.check(); err != nil {
		return nil, err
	}
	dir, err := openLockDir(r.dir)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dir)
	size := r.blockSize()
	for i := uint32(0); i < r.count; i++ {
		id := r.first + i*size
		key := heldKey{r.dir, id}
		held.Lock()
		mine := held.ids[key]
		held.Unlock()
		if mine {
			continue
		}
		name := strconv.FormatUint(uint64(id), 10)
		fd, err := unix.Openat(dir, name, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return nil, fmt.Errorf("nsexec: open host id lock %s: %w", filepath.Join(r.dir, name), err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Uid != uint32(os.Geteuid()) {
			unix.Close(fd)
			return nil, fmt.Errorf("nsexec: host id lock %s is not a regular file of uid %d; remove it", filepath.Join(r.dir, name), os.Geteuid())
		}
		err = unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			held.Lock()
			held.ids[key] = true
			held.Unlock()
			return &idLease{key: key, fd: fd, size: size}, nil
		}
		unix.Close(fd)
		if err != unix.EWOULDBLOCK {
			return nil, fmt.Errorf("nsexec: lock host id %d: %w", id, err)
		}
	}
	if size > 1 {
		return nil, fmt.Errorf("%w: all %d ranges of %d ids from %d are locked in %s; wait for a sandbox to end", ErrHostRangesExhausted,
			r.count, size, r.first, r.dir)
	}
	return nil, fmt.Errorf("%w: all %d ids %d-%d are locked in %s; wait for a sandbox to end", ErrHostIDsExhausted,
		r.count, r.first, r.first+r.count-1, r.dir)
}

// openLockDir opens (creating it, and its missing parents, 0700 if
// missing) the lock directory by the hostpath rule: a symlink on the way
// is followed only if root or the caller could have planted it (the
// parents were made with os.MkdirAll, which followed any). It must be this
// user's alone.
func openLockDir(path string) (int, error) { return openLockDirAt(path, true) }

// openLockDirAt is openLockDir, making nothing unless create is set (then
// a missing directory is ENOENT).
func openLockDirAt(path string, create bool) (int, error) {
	opts := []hostpath.Option{}
	if create {
		opts = append(opts, hostpath.CreateDirs(0o700))
	}
	fd, _, err := hostpath.Open(path, unix.O_RDONLY|unix.O_DIRECTORY, 0, opts...)
	if err != nil {
		return -1, fmt.Errorf("nsexec: open the host id lock directory %s: %w", path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("nsexec: stat the host id lock directory %s: %w", path, err)
	}
	if st.Uid != uint32(os.Geteuid()) || st.Mode&0o7777 != 0o700 {
		unix.Close(fd)
		return -1, fmt.Errorf("nsexec: the host id lock directory %s has owner %d and mode %#o; it must be uid %d's with mode 0700 (fix or remove it)",
			path, st.Uid, st.Mode&0o7777, os.Geteuid())
	}
	return fd, nil
}

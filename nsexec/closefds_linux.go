package nsexec

import "golang.org/x/sys/unix"

// closeRange closes the descriptors first..last. The init runs under the
// tool's filter by then, and a filter written for another runtime (an OCI
// config's profile, whose init never runs under it) may refuse
// close_range(2), which only came with Linux 5.9: it then closes them one
// by one, up to the soft RLIMIT_NOFILE, as close_range would have.
func closeRange(first, last uint) error {
	err := unix.CloseRange(first, last, 0)
	if err != unix.EPERM && err != unix.ENOSYS && err != unix.EACCES {
		return err
	}
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	end := last
	if lim.Cur > 0 && uint64(end) > lim.Cur-1 {
		end = uint(lim.Cur - 1)
	}
	for n := first; n <= end && n >= first; n++ {
		unix.Close(int(n))
	}
	return nil
}

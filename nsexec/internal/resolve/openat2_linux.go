// Package resolve holds the one openat2(2) wrapper nsexec and nsexec/oci
// share: a scoped lookup that rides out the kernel's EAGAIN.
package resolve

import (
	"errors"

	"golang.org/x/sys/unix"
)

// retries bounds the EAGAIN loop. The kernel fails a scoped lookup only
// when a mount or rename anywhere on the system lands while a ".." step is
// walked, so consecutive failures are rare; the bound keeps a host that
// mounts without pause from spinning a launcher forever.
const retries = 128

// Openat2 is unix.Openat2, retried while it fails with EAGAIN.
//
// With RESOLVE_BENEATH or RESOLVE_IN_ROOT the kernel cannot prove that a
// ".." component stayed beneath the root if mount_lock or rename_lock
// moved during the walk, and then refuses the lookup with EAGAIN instead
// (fs/namei.c handle_dots; openat2(2) ERRORS: "The caller may choose to
// retry"). mount_lock is global: any mount on the host, in any mount
// namespace, can race a lookup through an image's "../lib" symlink. A
// retry repeats the whole scoped walk, so it is as safe as the first try.
// The last EAGAIN is returned as it came, for errors.Is.
func Openat2(dirfd int, path string, how *unix.OpenHow) (int, error) {
	for i := 0; ; i++ {
		fd, err := unix.Openat2(dirfd, path, how)
		if !errors.Is(err, unix.EAGAIN) || i == retries {
			return fd, err
		}
	}
}

//go:build linux && cgo

package seccomp

import (
	"fmt"

	libseccomp "github.com/seccomp/libseccomp-golang"
)

// LibraryVersion is the version of the libseccomp this binary compiles
// filters with, e.g. "2.5.4".
func LibraryVersion() string {
	major, minor, micro := libseccomp.GetLibraryVersion()
	return fmt.Sprintf("%d.%d.%d", major, minor, micro)
}

//go:build linux && !cgo

package nsexec

import (
	"os"

	"golang.org/x/sys/unix"
)

// haveUserJoin: without cgo there is no code that runs before the Go
// runtime's threads, and setns(CLONE_NEWUSER) refuses a multi-threaded
// caller, so WithJoin of a user namespace is refused (userjoin_linux.go).
const haveUserJoin = false

// userJoined: an init built without cgo cannot join; one asked to by a
// launcher that could (WithInitPath naming it) fails instead of running
// on in the launcher's user namespace.
func userJoined() (asked bool, err error) {
	if _, ok := os.LookupEnv(userNSEnv); !ok {
		return false, nil
	}
	return true, &SetupError{Step: StepJoin, Errno: unix.EOPNOTSUPP,
		Detail: "this init was built without cgo, so it cannot join the pod's user namespace (setns needs a single-threaded caller)"}
}

// userNSParse: no constructor, no parser.
func userNSParse(string) ([4]uint64, bool) { return [4]uint64{}, false }

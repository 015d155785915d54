package seccomp

import (
	"errors"
	"fmt"
	"strings"
)

// ErrUnsupported is what a build without cgo (or off Linux), where
// libseccomp is not linked, cannot do: compile a profile it carries no
// program for (NotPrecompiledError wraps it). It wraps
// errors.ErrUnsupported, so one errors.Is check works across the module. A
// policy that asks for seccomp must refuse to run then: never degrade
// silently.
var ErrUnsupported = fmt.Errorf("seccomp compile needs libseccomp (a linux build with cgo): %w", errors.ErrUnsupported)

// TSyncError reports that seccomp(2) with SECCOMP_FILTER_FLAG_TSYNC could not
// synchronise one thread of the process, so the filter was installed nowhere.
type TSyncError struct {
	TID int // the thread the kernel could not synchronise
}

func (e *TSyncError) Error() string {
	return fmt.Sprintf("thread %d could not be synchronised (TSYNC)", e.TID)
}

// ProfileError reports a profile that cannot be compiled: an unknown action,
// architecture or operator, or a rule libseccomp rejects. Field names the
// place in the profile, in JSON path form (syscalls[3].args[0].op).
type ProfileError struct {
	Field string
	Err   error
}

func (e *ProfileError) Error() string { return e.Field + ": " + e.Err.Error() }
func (e *ProfileError) Unwrap() error { return e.Err }

// NotPrecompiledError is Compile's error in a build without libseccomp
// (CGO_ENABLED=0) for a profile it carries no program for. Such a build
// carries the programs of the built-in policies' profiles, compiled ahead
// by libseccomp and found by the profile's Digest; any other profile, a
// built-in one extended or edited in code included, is refused. It wraps
// ErrUnsupported.
type NotPrecompiledError struct {
	Digest   string   // the profile's Digest
	Arch     string   // the GOARCH of this build
	Policies []string // the built-in policies whose programs the build carries, sorted
}

func (e *NotPrecompiledError) Error() string {
	carries := "and it carries no precompiled program for linux/" + e.Arch
	if len(e.Policies) > 0 {
		carries = "and it carries only the built-in policies' programs (" + strings.Join(e.Policies, ", ") + "), found by their profile's exact digest"
	}
	return fmt.Sprintf("seccomp profile %s: this build has no libseccomp to compile it (built without cgo), %s; "+
		"build with cgo and libseccomp-dev installed (CGO_ENABLED=1), or use a built-in policy with its seccomp profile unchanged", e.Digest, carries)
}

func (e *NotPrecompiledError) Unwrap() error { return ErrUnsupported }

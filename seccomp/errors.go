package seccomp

import (
	"errors"
	"fmt"
)

// ErrUnsupported is returned by Compile in a build without cgo (or off
// Linux), where libseccomp is not linked. It wraps errors.ErrUnsupported, so
// one errors.Is check works across the module. A policy that asks for seccomp
// must refuse to run on such a build: never degrade silently.
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

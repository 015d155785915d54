//go:build !linux || !cgo

package seccomp

import (
	"errors"
	"fmt"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Compile, in this build without libseccomp, returns the program compiled
// ahead for profile when it is a built-in policy's, found by its Digest
// (precompiled.go); any other profile is a *NotPrecompiledError, which
// wraps ErrUnsupported (and so errors.ErrUnsupported).
func Compile(profile *specs.LinuxSeccomp) (Program, error) {
	if profile == nil {
		return nil, errors.New("compile seccomp profile: no profile")
	}
	prog, err := lookupPrecompiled(profile)
	if err != nil {
		return nil, fmt.Errorf("compile seccomp profile: %w", err)
	}
	return prog, nil
}

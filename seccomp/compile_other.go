//go:build !linux || !cgo

package seccomp

import (
	"fmt"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Compile needs libseccomp, which this build does not link. It always
// returns an error wrapping ErrUnsupported (and so errors.ErrUnsupported).
func Compile(profile *specs.LinuxSeccomp) (Program, error) {
	return nil, fmt.Errorf("compile seccomp profile: %w", ErrUnsupported)
}

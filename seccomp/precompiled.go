package seccomp

import (
	"runtime"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// The built-in policies' programs, compiled ahead by libseccomp for each
// architecture in archs, so that a build without cgo (CGO_ENABLED=0, the
// usual static Go binary) sandboxes with any built-in policy: such a build's
// Compile finds them by the profile's Digest (compile_other.go). A build
// with cgo ignores them and compiles with the host's libseccomp, the
// compiler of record. TestPrecompiled (run with cgo, as CI does) fails when
// they differ from what libseccomp compiles now; `go generate ./seccomp`
// rewrites them.
//
// The tables of every architecture build everywhere, so that the test can
// compare them all from one host; precompiledNative names this
// architecture's, and the linker leaves the others out of a program (go
// tool nm shows only precompiledAMD64 in an amd64 binary; a build with cgo
// carries none).
//
//go:generate go test -run ^TestPrecompiled$ -update-precompiled .

// precompiledSet is the programs of one architecture.
type precompiledSet struct {
	library  string // the libseccomp version that compiled them
	programs []precompiledProgram
}

// precompiledProgram is the program of one built-in profile.
type precompiledProgram struct {
	digest   string // the profile's Digest
	policies string // the built-in policies with this profile, space-separated
	prog     Program
}

// PrecompiledLibrary is the version of the libseccomp that made the
// built-in policies' programs this build carries for its architecture, or
// "" when it carries none. A build without cgo sandboxes with exactly
// those (moat version and moat doctor say so).
func PrecompiledLibrary() string {
	if precompiledNative == nil {
		return ""
	}
	return precompiledNative.library
}

// lookupPrecompiled returns a copy of the program this build carries for
// profile, or a *NotPrecompiledError. It is found by the Digest of the
// whole profile, never by a policy's name: a built-in policy extended or
// edited in code has another digest and is refused, not matched to the
// program of what it was. (Equal digests mean equal canonical JSON, which
// Compile reads to equal programs: see Digest.)
func lookupPrecompiled(profile *specs.LinuxSeccomp) (Program, error) {
	digest, err := Digest(profile)
	if err != nil {
		return nil, err
	}
	e := &NotPrecompiledError{Digest: digest, Arch: runtime.GOARCH}
	if precompiledNative == nil {
		return nil, e
	}
	for _, p := range precompiledNative.programs {
		if p.digest == digest {
			return slices.Clone(p.prog), nil
		}
		e.Policies = append(e.Policies, strings.Fields(p.policies)...)
	}
	slices.Sort(e.Policies)
	return nil, e
}

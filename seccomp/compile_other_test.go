//go:build !linux || !cgo

package seccomp_test

import (
	"errors"
	"runtime"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/moat-sandbox/moat/policies"
	"github.com/moat-sandbox/moat/seccomp"
)

// A profile that is no built-in policy's is refused, naming the fix.
func TestCompileUnsupportedWithoutCgo(t *testing.T) {
	profile := &specs.LinuxSeccomp{DefaultAction: specs.ActErrno}
	_, err := seccomp.Compile(profile)
	if !errors.Is(err, errors.ErrUnsupported) || !errors.Is(err, seccomp.ErrUnsupported) {
		t.Fatalf("want ErrUnsupported, got %v", err)
	}
	var npe *seccomp.NotPrecompiledError
	if !errors.As(err, &npe) {
		t.Fatalf("want a *NotPrecompiledError, got %T: %v", err, err)
	}
	digest, _ := seccomp.Digest(profile)
	if npe.Digest != digest || npe.Arch != runtime.GOARCH {
		t.Errorf("the error names %s for %s, want %s for %s", npe.Digest, npe.Arch, digest, runtime.GOARCH)
	}
	for _, fix := range []string{"CGO_ENABLED=1", "libseccomp-dev", "built-in policy"} {
		if !strings.Contains(err.Error(), fix) {
			t.Errorf("the error does not name the fix %q: %v", fix, err)
		}
	}
}

// Every built-in policy compiles in a build without cgo.
func TestCompileBuiltinsWithoutCgo(t *testing.T) {
	for _, name := range policies.Builtins() {
		p, err := policies.Builtin(name)
		if err != nil {
			t.Fatal(err)
		}
		if p.Seccomp == nil {
			continue
		}
		prog, err := seccomp.Compile(p.Seccomp)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(prog) < 100 {
			t.Errorf("%s: a %d-instruction program", name, len(prog))
		}
	}
}

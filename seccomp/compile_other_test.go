//go:build !linux || !cgo

package seccomp_test

import (
	"errors"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/moat-sandbox/moat/seccomp"
)

func TestCompileUnsupportedWithoutCgo(t *testing.T) {
	_, err := seccomp.Compile(&specs.LinuxSeccomp{DefaultAction: specs.ActErrno})
	if !errors.Is(err, errors.ErrUnsupported) || !errors.Is(err, seccomp.ErrUnsupported) {
		t.Fatalf("want ErrUnsupported, got %v", err)
	}
}

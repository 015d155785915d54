package seccomp_test

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/moat-sandbox/moat/conformance/testenv"
)

func lookPath(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		testenv.Skipf(t, "%s is not installed", name)
	}
	// Resolve shims (pyenv) to the real interpreter: a shim is a script
	// that would run under the filter too, which is fine, but keep the
	// test about the runtime itself.
	if real, err := filepath.EvalSymlinks(p); err == nil {
		p = real
	}
	return p
}

package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/conformance/testenv"
	"github.com/moat-sandbox/moat/seccomp"
)

// TestVersionSaysWhatFiltersRun: moat version and moat doctor name the
// libseccomp a cgo build compiles with, and in a build without cgo
// (.ci/test runs this test once with CGO_ENABLED=0) that the built-in
// policies' filters are embedded and run, where both said before that no
// policy with a filter could run.
func TestVersionSaysWhatFiltersRun(t *testing.T) {
	var out, errb bytes.Buffer
	if code := versionCmd(nil, &out, &errb); code != exitOK {
		t.Fatalf("moat version: %d %s", code, errb.String())
	}
	r := &doctorReport{}
	r.Seccomp.Actions = []string{"allow"}
	lib, embedded := seccomp.LibraryVersion(), seccomp.PrecompiledLibrary()
	switch {
	case lib != "":
		if !strings.Contains(out.String(), "libseccomp "+lib+"\n") {
			t.Errorf("moat version in a cgo build:\n%s\nwant libseccomp %s", out.String(), lib)
		}
	case embedded != "":
		if !strings.Contains(out.String(), "only the built-in policies' filters run, compiled ahead by libseccomp "+embedded) {
			t.Errorf("moat version without cgo:\n%s\nwant the embedded filters named", out.String())
		}
	default:
		testenv.Skipf(t, "no libseccomp and no embedded filters for this architecture")
	}
	rep := diagnoseSeccomp(r)
	if !rep.Usable || rep.Library != lib || rep.Embedded != "" && lib != "" || lib == "" && rep.Embedded != embedded {
		t.Errorf("doctor's seccomp %+v (library %q, embedded %q): want usable, naming what this build runs", rep, lib, embedded)
	}
}

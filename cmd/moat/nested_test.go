package main

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/conformance/testenv"
	"github.com/moat-sandbox/moat/nsexec"
)

// moat inside a moat sandbox: the outer filter refuses new namespaces,
// so the inner moat runs in mode no-userns, says so in its one warning
// line, and its tool's output and exit code come back; strict, which
// requires full mode, is refused with 125 naming both modes; moat doctor
// inside names the mode. Where the kernel's Landlock is below the rung's
// (the VM's ABI 2), the inner run is refused with 125 naming both ABIs.
func TestNestedMoatRunsInNoUserNS(t *testing.T) {
	bin := moatBin(t)
	dir := filepath.Dir(bin)
	nested := func(args ...string) result {
		return moat(t, "", append([]string{"run", "--bind", dir + ":" + dir, "--", bin}, args...)...)
	}
	r := nested("run", "--", "/bin/sh", "-c", "echo inner; exit 3")
	if abi := nsexec.LandlockABI(); abi < nsexec.NoUserNSMinABI {
		if r.code != exitSandbox || !strings.Contains(r.stderr, "Landlock ABI 3") || !strings.Contains(r.stderr, "ABI "+strconv.Itoa(abi)) {
			t.Fatalf("nested, Landlock ABI %d: exit %d, %q; want 125 naming ABI 3 and %d", abi, r.code, r.stderr, abi)
		}
		return
	}
	if r.code != 3 || strings.TrimSpace(r.stdout) != "inner" || strings.Count(r.stderr, "warning: mode no-userns") != 1 || !strings.Contains(r.stderr, "inside a moat sandbox") {
		t.Fatalf("moat run -- moat run -- sh: exit %d, stdout %q, stderr %q; want 3, inner and the one warning naming no-userns", r.code, r.stdout, r.stderr)
	}
	r = nested("run", "--policy", "strict", "--", "/bin/true")
	if r.code != exitSandbox || !strings.Contains(r.stderr, "requires mode full") || !strings.Contains(r.stderr, "no-userns") {
		t.Fatalf("strict nested: exit %d, %q; want 125 naming full and no-userns", r.code, r.stderr)
	}
	r = nested("doctor")
	if !strings.Contains(r.stdout, "mode      degraded  no-userns") {
		t.Fatalf("moat doctor inside moat does not name mode no-userns:\n%s%s", r.stdout, r.stderr)
	}
}

// Where user.max_user_namespaces is 0 (in a user namespace the test
// makes), moat run falls to no-userns by itself, with the one warning
// naming the sysctl, and doctor's mode line names the mode.
func TestMoatRunWithoutUserNS(t *testing.T) {
	if testenv.InNoUserNS(t) {
		return
	}
	r := moat(t, "", "run", "--", "/bin/sh", "-c", "echo ran; exit 4")
	if abi := nsexec.LandlockABI(); abi < nsexec.NoUserNSMinABI {
		if r.code != exitSandbox || !strings.Contains(r.stderr, "ABI "+strconv.Itoa(abi)) {
			t.Fatalf("Landlock ABI %d: exit %d, %q; want 125 naming the ABIs", abi, r.code, r.stderr)
		}
		return
	}
	if r.code != 4 || strings.TrimSpace(r.stdout) != "ran" || strings.Count(r.stderr, "warning: mode no-userns") != 1 || !strings.Contains(r.stderr, "max_user_namespaces") {
		t.Fatalf("moat run without user namespaces: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if r = moat(t, "", "doctor"); !strings.Contains(r.stdout, "mode      degraded  no-userns") {
		t.Fatalf("doctor:\n%s%s", r.stdout, r.stderr)
	}
}

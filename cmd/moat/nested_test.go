package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// moat inside a moat sandbox: the outer filter refuses new namespaces,
// so the inner moat cannot make a sandbox. It says so before it tries,
// naming the mode it would need (no-userns, not built yet), with 125;
// before, it failed at the clone, blaming the host's sysctls or
// AppArmor. moat doctor inside names that mode too, and its userns and
// mode lines agree that no sandbox starts.
func TestNestedMoatSaysTheModeItWouldNeed(t *testing.T) {
	bin := moatBin(t)
	dir := filepath.Dir(bin)
	r := moat(t, "", "run", "--bind", dir+":"+dir, "--", bin, "run", "--", "/bin/true")
	if r.code != exitSandbox || !strings.Contains(r.stderr, "mode no-userns") || !strings.Contains(r.stderr, "inside a moat sandbox") {
		t.Fatalf("moat run -- moat run -- /bin/true: exit %d, %q; want 125 naming the mode no-userns and why", r.code, r.stderr)
	}
	r = moat(t, "", "run", "--bind", dir+":"+dir, "--", bin, "doctor")
	if !strings.Contains(r.stdout, "userns    FAILED") || !strings.Contains(r.stdout, "mode      FAILED    no-userns: no sandbox starts here") {
		t.Fatalf("moat doctor inside moat does not name mode no-userns:\n%s%s", r.stdout, r.stderr)
	}
}

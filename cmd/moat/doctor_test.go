package main

import (
	"strings"
	"testing"
)

// moat doctor fits on one screen, as root and as nobody (whose cgroup
// limits are degraded here): under 30 lines of at most 100 columns, one
// line per layer with a verdict, and each problem's fix printed once.
func TestDoctorFitsOnAScreen(t *testing.T) {
	bothIdentities(t)
	r := moat(t, "", "doctor")
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	if len(lines) >= 30 {
		t.Errorf("%d lines:\n%s", len(lines), r.stdout)
	}
	for _, l := range lines {
		if len(l) > 100 {
			t.Errorf("a line of %d columns: %q", len(l), l)
		}
	}
	for _, layer := range []string{"userns ", "mode ", "seccomp ", "landlock ", "cgroups ", "policies ", "egress "} {
		n := 0
		for _, l := range lines {
			if strings.HasPrefix(l, layer) {
				n++
				if f := strings.Fields(l); len(f) < 2 || (f[1] != "ok" && f[1] != "degraded" && f[1] != "refused" && f[1] != "FAILED" && f[1] != "none") {
					t.Errorf("layer line without a verdict: %q", l)
				}
			}
		}
		if n != 1 {
			t.Errorf("%d lines for layer %q, want 1:\n%s", n, layer, r.stdout)
		}
	}
	fixes := strings.Count(r.stdout, "fix: ")
	problems := strings.Count(r.stdout, "\n  - ")
	if fixes != problems || strings.Count(r.stdout, "Delegate=yes moat") > 1 || strings.Count(r.stdout, "Delegate=yes\n") > 1 {
		t.Errorf("%d fixes for %d problems, or a fix repeated:\n%s", fixes, problems, r.stdout)
	}
	if r.code == 1 && problems == 0 {
		t.Errorf("exit 1 with no problem listed:\n%s", r.stdout)
	}
}

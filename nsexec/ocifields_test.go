//go:build linux

package nsexec

import (
	"errors"
	"fmt"
	"testing"
)

// TestExactIDsKeepRoot: an OCI config's user 0:0 stays 0:0 inside with
// ExactIDs (without it, 0:0 means the default 1000:1000), and the host side
// is still not root: a file the tool writes in /work belongs to an
// unprivileged host id (TestWorkdirReadWrite checks which).
func TestExactIDsKeepRoot(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		cfg := shell(t, "id -u; id -g; cat /proc/self/uid_map")
		cfg.ExactIDs = true
		r := mustRun(t, cfg)
		var u, g, inside, outside, count int
		if _, err := fmt.Sscan(r.stdout, &u, &g, &inside, &outside, &count); err != nil {
			t.Fatalf("output %q: %v", r.stdout, err)
		}
		if u != 0 || g != 0 || inside != 0 || count != 1 {
			t.Fatalf("ExactIDs 0:0: got %q, want uid and gid 0 mapped alone", r.stdout)
		}
		if outside == 0 {
			t.Fatalf("uid 0 inside maps to host root: %q", r.stdout)
		}
	})
}

// TestCwd: the tool starts in Config.Cwd; a relative or unclean one is a
// ConfigError before anything starts, a missing one the cwd step.
func TestCwd(t *testing.T) {
	cfg := shell(t, "pwd")
	cfg.Cwd = "/usr/bin"
	if r := mustRun(t, cfg); r.stdout != "/usr/bin\n" {
		t.Fatalf("Cwd /usr/bin: got %q", r.stdout)
	}
	for _, bad := range []string{"usr", "/usr/../etc", "/usr/"} {
		cfg := shell(t, "pwd")
		cfg.Cwd = bad
		_, err := run(t, cfg)
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != "cwd" {
			t.Fatalf("Cwd %q: got %v, want a ConfigError on cwd", bad, err)
		}
	}
	cfg = shell(t, "pwd")
	cfg.Cwd = "/no/such/dir"
	_, err := run(t, cfg)
	setupErr(t, err, StepCwd, nil)
}

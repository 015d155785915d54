//go:build linux

package nsexec

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/conformance/testenv"
)

func init() {
	helpers["nestedroot"] = helperNestedRoot
}

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

// TestRootOfARootlessEngine: a caller that is uid 0 only in a user
// namespace whose root is an ordinary host user (rootless podman's, where
// an OCI runtime runs) is rootless in all but name: it maps its own id
// instead of taking a host id from a range it can neither lock nor map.
func TestRootOfARootlessEngine(t *testing.T) {
	testenv.RequireRoot(t)
	self := testenv.CopySelfT(t, "nsexec.test")
	// An ordinary user's own user namespace, as rootless podman makes one
	// (its owner is that user, not root).
	cmd := exec.Command("setpriv", "--reuid", fmt.Sprint(testenv.NobodyUID), "--regid", fmt.Sprint(testenv.NobodyGID), "--clear-groups",
		"unshare", "--user", "--map-root-user", "--", self)
	cmd.Env = append(os.Environ(), helperVar+"=nestedroot")
	cmd.Dir = filepath.Dir(self)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	if f := strings.Fields(string(out)); len(f) != 4 || f[0] != "hostroot=false" || f[1] != "0" || f[2] != "0" || f[3] != "1" {
		t.Fatalf("inside a rootless engine's namespace: %q, want IsHostRoot false and uid 0 mapped onto the caller's own 0", out)
	}
}

// helperNestedRoot runs a sandbox from a user namespace whose uid 0 is
// nobody on the host, and prints what the sandbox's uid_map says.
func helperNestedRoot() error {
	fmt.Printf("hostroot=%v ", IsHostRoot())
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	p, err := Start(context.Background(), &Config{Args: []string{"/bin/cat", "/proc/self/uid_map"}, ExactIDs: true}, Stdio{Stdout: w})
	w.Close()
	if err != nil {
		return err
	}
	b := make([]byte, 256)
	n, _ := r.Read(b)
	if _, err := p.Wait(); err != nil {
		return err
	}
	fmt.Print(string(b[:n]))
	return nil
}

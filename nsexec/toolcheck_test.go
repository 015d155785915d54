//go:build linux

package nsexec

import (
	"context"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestToolCheck: a prepared sandbox WithToolCheck resolves the tool in its
// own root, with its identity, before Prepare returns, for both inits (the
// Go one, and the C tail's in the static pass). The names are chosen so
// that a lookup on the host would answer otherwise: sh is on the host's
// PATH but not in the test root, and /escape is a symlink that leads to
// the host's /var (a directory) only when it is resolved outside the root.
func TestToolCheck(t *testing.T) {
	root := testRootfs(t)
	env := []string{"PATH=/usr/bin:/bin"}
	for _, tail := range []bool{false, true} {
		name := "go-init"
		var opts []Option
		if tail {
			name = "tail"
		} else {
			opts = append(opts, WithoutTail())
		}
		t.Run(name, func(t *testing.T) {
			asRootAndNobody(t, func(t *testing.T) {
				for _, c := range []struct {
					name  string
					errno unix.Errno // 0: found
				}{
					{"probe", 0},
					{"/bin/probe", 0},
					{"sh", unix.ENOENT},
					{"nosuch", unix.ENOENT},
					{"/nosuch", unix.ENOENT},
					{"/escape", unix.ENOENT},
					{"/bin", unix.EISDIR},
					{"/dev/null", unix.EACCES},
				} {
					s, err := Prepare(context.Background(), &Config{Rootfs: root, Workdir: workdir(t)},
						append(opts, WithToolCheck(c.name, env))...)
					if c.errno == 0 {
						if err != nil {
							t.Fatalf("%s: prepare: %v", c.name, err)
						}
						// The request's argv is what runs, not the checked name.
						out, e := runPrepared(t, s, []string{"/bin/probe"}, nil, "")
						if e.Code != 0 || !strings.HasPrefix(out, "uid ") {
							t.Fatalf("%s: exec after the check: %q %+v", c.name, out, e)
						}
						continue
					}
					if err == nil {
						s.Close()
						t.Fatalf("%s: prepared, want %v", c.name, c.errno)
					}
					se := setupErr(t, err, StepExec, c.errno)
					if se.Path != c.name {
						t.Fatalf("%s: the error names %q", c.name, se.Path)
					}
				}
			})
		})
	}
}

// TestToolCheckIsForPrepare: Start refuses the option rather than ignore it.
func TestToolCheckIsForPrepare(t *testing.T) {
	if _, err := Start(context.Background(), &Config{Args: []string{"/bin/true"}}, Stdio{}, WithToolCheck("true", nil)); err == nil || !strings.Contains(err.Error(), "WithToolCheck") {
		t.Fatalf("got %v", err)
	}
}

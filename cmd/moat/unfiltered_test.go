package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestUnfilteredNeedsAStatement is issue 13 item 8 end to end: a policy
// with no filter, or a profile that allows everything, is refused by
// `policy check` and by `moat run` (which runs nothing) with the JSON path
// and the fix; one that states "unfiltered": true is checked with a warning
// and runs with one warning line. As root and as nobody.
func TestUnfilteredNeedsAStatement(t *testing.T) {
	bothIdentities(t)
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	write := func(name, doc string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tool := []string{"--", "/bin/sh", "-c", "echo ran"}
	for _, c := range []struct{ name, doc, path string }{
		{"bare", `{"name": "bare"}`, "seccomp: is missing"},
		{"allow-all", `{"name": "allowall", "seccomp": {"defaultAction": "SCMP_ACT_ALLOW"}}`, `seccomp.defaultAction: "SCMP_ACT_ALLOW"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := write(c.name+".json", c.doc)
			code, _, errs := runPolicy("check", p)
			if code != 1 || !strings.Contains(errs, c.path) || !strings.Contains(errs, `"unfiltered": true`) {
				t.Fatalf("check: exit %d, stderr %q; want 1 naming %s and the fix", code, errs, c.path)
			}
			r := moat(t, "", append([]string{"run", "--policy", p}, tool...)...)
			if r.code != exitUsage || strings.Contains(r.stdout, "ran") || !strings.Contains(r.stderr, c.path) {
				t.Fatalf("run: exit %d, stdout %q, stderr %q; want %d naming %s and nothing run", r.code, r.stdout, r.stderr, exitUsage, c.path)
			}
		})
	}
	t.Run("stated", func(t *testing.T) {
		p := write("open.json", `{"name": "open", "extends": "default", "unfiltered": true}`)
		code, out, errs := runPolicy("check", p)
		if code != 0 || !strings.Contains(out, "valid") || !strings.Contains(errs, "warning") || !strings.Contains(errs, "no seccomp filter") {
			t.Fatalf("check: exit %d, stdout %q, stderr %q; want valid with a warning", code, out, errs)
		}
		r := moat(t, "", append([]string{"run", "--log-format", "human", "--policy", p}, tool...)...)
		if r.code != 0 || r.stdout != "ran\n" {
			t.Fatalf("run: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		}
		var warnings []string
		for _, l := range strings.Split(r.stderr, "\n") {
			if strings.Contains(l, "no seccomp filter") {
				warnings = append(warnings, l)
			}
		}
		if len(warnings) != 1 || !strings.HasPrefix(warnings[0], "moat run: warning:") {
			t.Fatalf("run stderr %q: want exactly one warning line about the filter", r.stderr)
		}
	})
}

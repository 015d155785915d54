package main

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// A warning is one line, printed once however often the library repeats
// it; long details and the fix are named, not pasted.
func TestHumanWarningsOneLineOnce(t *testing.T) {
	var b bytes.Buffer
	l, err := cliLogger("", "moat run", &b)
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("a reason that goes on ", 10)
	for range 3 {
		l.Warn("cgroup limits are not enforced", "memory", long, "pids", long, "fix", strings.Repeat("do this ", 40))
	}
	l.Warn("remove workdir", "dir", "/tmp/x", "err", "permission denied")
	l.Warn("short", "dir", "/tmp/x", "fix", "chmod it")
	l.Info("not shown")
	want := "moat run: warning: cgroup limits are not enforced (memory, pids: `moat doctor` says why and how to fix it)\n" +
		"moat run: warning: remove workdir: permission denied (dir /tmp/x)\n" +
		"moat run: warning: short (dir: `moat doctor` says why and how to fix it)\n"
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}
	if _, err := cliLogger("yaml", "moat run", &b); err == nil {
		t.Error("--log-format yaml accepted")
	}
}

// End to end, as nobody (whose cgroup limits are degraded here) and as
// root: asked for (--log-format human) on a stderr that is no terminal,
// stderr holds each warning once, as one line under 200 columns, and the
// full record with --log-format json or text; not asked for, as another
// executor's launcher is run, it holds nothing (TestRunIsQuietAsALauncher).
func TestRunWarningsOnStderr(t *testing.T) {
	bothIdentities(t)
	r := moat(t, "", "run", "--log-format", "human", "--", "/bin/true")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	seen := map[string]bool{}
	for _, l := range lines {
		if l == "" {
			continue
		}
		if !strings.HasPrefix(l, "moat run: warning: ") || len(l) > 200 || strings.Contains(l, "level=") || seen[l] {
			t.Errorf("not one readable line, once: %q", l)
		}
		seen[l] = true
	}
	if os.Geteuid() == 0 {
		return // root has its cgroups here: nothing to warn about
	}
	if !strings.Contains(r.stderr, "limits without a cgroup here") {
		t.Fatalf("as nobody: no cgroup warning in %q", r.stderr)
	}
	r = moat(t, "", "run", "--log-format", "json", "--", "/bin/true")
	var rec map[string]any
	if err := json.Unmarshal([]byte(strings.Split(r.stderr, "\n")[0]), &rec); err != nil || rec["fix"] == nil || rec["level"] != "WARN" {
		t.Errorf("--log-format json: %v, %q", err, r.stderr)
	}
	if r = moat(t, "", "run", "--log-format", "text", "--", "/bin/true"); !strings.Contains(r.stderr, "level=WARN") || !strings.Contains(r.stderr, "fix=") {
		t.Errorf("--log-format text: %q", r.stderr)
	}
}

package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/conformance/testenv"
	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/executor/subprocess"
	"github.com/moat-sandbox/moat/ledger"
)

// The README's launcher prefix must leave a tool's ending and environment
// as the reference's subprocess executor records them for the tool alone
// (the values below: that executor, @rulvar/executor 1.248.0 bundled from
// its source, run on Node v20.20.2 on this host, with no sandbox).
func TestMoatRunAsSandboxPrefixEndsAsTheToolAlone(t *testing.T) {
	bothIdentities(t)
	moatPath := moatBin(t)
	for _, tc := range []struct {
		name, script string
		reference    string
		exitCode     *int
		signal       string
	}{
		// --inherit-env adds nothing (no PATH, no HOME), and moat run says
		// nothing on the tool's stderr (rootless, this host's cgroup
		// warnings were in front of every tail).
		{"environment and stderr", `tr '\0' ' ' < /proc/$$/environ >&2; exit 3`,
			"tool 't' exited 3: RULVAR_TOOL=t RULVAR_RUN_ID=run RULVAR_IDEMPOTENCY_KEY=key", ptr(3), ""},
		// Killed by a signal: the signal, not moat run's 137.
		{"killed by SIGKILL", `kill -9 $$`, "tool 't' exited null (signal SIGKILL)", nil, "SIGKILL"},
		{"killed by SIGSEGV", `kill -SEGV $$`, "tool 't' exited null (signal SIGSEGV)", nil, "SIGSEGV"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := &ledger.Memory{}
			p, err := subprocess.New(
				subprocess.WithCommand("/bin/sh", "-c", tc.script),
				subprocess.WithSandbox(func(workdir string, _ *executor.Request) ([]string, error) {
					return readmePrefix(t, moatPath, workdir), nil
				}),
				subprocess.WithLedger(mem))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			_, err = p.Dispatch(ctx, &executor.Request{Tool: "t", Args: json.RawMessage(`{}`), RunID: "run", SpanID: "span", IdempotencyKey: "key"})
			if err == nil || err.Error() != tc.reference {
				t.Errorf("error %v, the reference's %q", err, tc.reference)
			}
			rows := mem.Records()
			if len(rows) != 1 {
				t.Fatalf("%d rows", len(rows))
			}
			r := rows[0]
			if !sameInt(r.ExitCode, tc.exitCode) || (tc.signal == "") != (r.Signal == nil) || r.Signal != nil && *r.Signal != tc.signal {
				t.Fatalf("row exitCode %v signal %v, the reference's %v and %q", deref(r.ExitCode), deref(r.Signal), deref(tc.exitCode), tc.signal)
			}
		})
	}
}

// TestRunIsQuietAsALauncher: with its stderr a pipe and no --log-format,
// moat run writes nothing of its own there, as nobody too, whose cgroup
// limits this host degrades: the tool's stderr is all there is.
func TestRunIsQuietAsALauncher(t *testing.T) {
	bothIdentities(t)
	r := moat(t, "", "run", "--", "/bin/sh", "-c", "echo diagnostic >&2")
	if r.code != 0 || r.stderr != "diagnostic\n" {
		t.Fatalf("exit %d, stderr %q; want the tool's own line alone", r.code, r.stderr)
	}
	// Asked, the same run warns (as nobody, where there is something to say).
	if os.Geteuid() != 0 {
		if r := moat(t, "", "run", "--log-format", "human", "--", "/bin/true"); r.stderr == "" {
			t.Fatal("--log-format human: no warning, as nobody on this host")
		}
	}
}

// TestBareNamesWithoutPATHAreTheReferences: with no PATH (the reference's
// tools get none) --expose-argv looks a bare command up in /usr/bin:/bin,
// where the reference's spawn would, and #!/usr/bin/env NAME in glibc
// execvp's /bin:/usr/bin, where env inside the sandbox will.
func TestBareNamesWithoutPATHAreTheReferences(t *testing.T) {
	t.Setenv("PATH", "")
	x := newExposer("", []string{"RULVAR_TOOL=t"})
	if x.callerPath != "/usr/bin:/bin" || x.sandboxPath != "/bin:/usr/bin" {
		t.Fatalf("caller PATH %q, sandbox PATH %q; want /usr/bin:/bin and /bin:/usr/bin", x.callerPath, x.sandboxPath)
	}
	if local := testenv.LocalBinOnly(); local != "" {
		if _, _, err := x.exposeArgv([]string{local}); !isNotFound(err) {
			t.Fatalf("bare %s (in /usr/local/bin only): %v; the reference's spawn says ENOENT", local, err)
		}
	}
}

func ptr[T any](v T) *T { return &v }

func sameInt(a, b *int) bool { return a == nil && b == nil || a != nil && b != nil && *a == *b }

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// TestReadmeInstallsMoatWhereItsSnippetNamesIt: the README's install step,
// `make install`, installs bin/moat, and bin/moat-init beside it, into the
// directory of the absolute path its launcher snippet names
// (/usr/local/bin/moat), which nothing installed before.
func TestReadmeInstallsMoatWhereItsSnippetNamesIt(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`sandbox: \(\{ workdir \}\) => \['(/[^']+)'`).FindSubmatch(b)
	if m == nil || !strings.Contains(string(b), "`make install`") {
		t.Fatal("README.md has no launcher snippet with an absolute path to moat, or no `make install` step")
	}
	want := filepath.Dir(string(m[1]))
	mk, err := exec.LookPath("make")
	if err != nil {
		testenv.Skipf(t, "no make here to read the install target with: %v", err)
	}
	dest := t.TempDir()
	out, err := exec.Command(mk, "-n", "-C", "../..", "install", "DESTDIR="+dest).CombinedOutput()
	if err != nil {
		t.Fatalf("make -n install: %v\n%s", err, out)
	}
	line := regexp.MustCompile(`(?m)^install -m 0755 bin/moat bin/moat-init .*` + regexp.QuoteMeta(dest+want) + `/$`)
	if !line.Match(out) {
		t.Fatalf("make install does not put bin/moat and bin/moat-init into %s (the snippet's %s):\n%s", want, m[1], out)
	}
}

package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/conformance"
	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/executor/subprocess"
)

// readmePrefix returns the sandbox prefix of the README's launcher snippet
// (`subprocessExecutor({ sandbox: ({ workdir }) => [...] })`), with the
// workdir filled in and its absolute path of moat replaced by moatPath: the
// test runs exactly what a user copies, but for where moat is installed.
func readmePrefix(t *testing.T, moatPath, workdir string) []string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`subprocessExecutor\(\{ sandbox: \(\{ workdir \}\) => \[([^\]]*)\] \}\)`).FindSubmatch(b)
	if m == nil {
		t.Fatal("README.md has no subprocessExecutor({ sandbox: ({ workdir }) => [...] }) snippet")
	}
	var prefix []string
	for _, e := range strings.Split(string(m[1]), ", ") {
		switch {
		case e == "workdir":
			prefix = append(prefix, workdir)
		case len(e) >= 2 && e[0] == '\'' && e[len(e)-1] == '\'':
			prefix = append(prefix, e[1:len(e)-1])
		default:
			t.Fatalf("README snippet element %q is neither a quoted string nor workdir", e)
		}
	}
	if len(prefix) < 2 || !filepath.IsAbs(prefix[0]) || filepath.Base(prefix[0]) != "moat" || prefix[len(prefix)-1] != "--" {
		t.Fatalf("README prefix %q: want an absolute path to moat first and -- last", prefix)
	}
	prefix[0] = moatPath
	return prefix
}

// The README's launcher snippet, verbatim, as the sandbox prefix of the
// reference's subprocess provider passes the whole kit, isolation and
// hostile battery included, as root and as nobody. The tool is laid out as
// the reference's is (`node <mkdtemp>/runner.cjs`): an interpreter from
// the system directories, /usr/bin/env here, runs the kit's runner, which
// lies in a temporary directory of its own outside the sandbox's default
// binds and is named by the command line; the provider gives moat no PATH.
// Only --expose-argv makes the runner visible, with its directory
// read-only (checks i2 and i11), as the command line names it. (A #!
// interpreter in such a directory is bound alone: TestRunExposeArgv*.)
func TestMoatRunAsSandboxPrefix(t *testing.T) {
	bothIdentities(t)
	moatPath := moatBin(t)
	conformance.Run(t, func(t *testing.T, cfg conformance.Config) executor.Provider {
		prefix := func(workdir string, _ *executor.Request) ([]string, error) {
			return readmePrefix(t, moatPath, workdir), nil
		}
		opts := []subprocess.Option{
			subprocess.WithCommand("/usr/bin/env", append([]string{cfg.Command}, cfg.Args...)...),
			subprocess.WithSandbox(prefix),
			subprocess.WithAllowEnv(cfg.AllowEnv...),
			subprocess.WithTimeout(cfg.Timeout),
			subprocess.WithMaxOutputBytes(cfg.MaxOutputBytes),
			subprocess.WithCredentials(cfg.Credentials),
		}
		if cfg.Ledger != nil {
			opts = append(opts, subprocess.WithLedger(cfg.Ledger))
		}
		if cfg.KillGrace != nil {
			opts = append(opts, subprocess.WithKillGrace(*cfg.KillGrace))
		}
		p, err := subprocess.New(opts...)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}, conformance.WithIsolation(conformance.Isolation{Filesystem: true, Network: true, PIDs: true, Privileges: true, SetID: true, Seccomp: true}))
}

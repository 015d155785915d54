package subprocess_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/conformance/testenv"
	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/executor/subprocess"
	"github.com/moat-sandbox/moat/ledger"
)

// The reference values below were observed by running the reference's own
// subprocessExecutor (@rulvar/executor 1.248.0, o-stepper/rulvar 54c04dc7,
// bundled from its TypeScript source) on Node v20.20.2 on this host.

// TestSpawnFailureIsRecordedAfterTheIntent: a command that cannot be
// started is, as in the reference, a dispatch that was attempted: the
// intent row, then an error outcome with exitCode and signal null, the
// workdir removed, and the reference's message ("spawn <command>
// <ERRNO>", Node's text).
func TestSpawnFailureIsRecordedAfterTheIntent(t *testing.T) {
	noexec := filepath.Join(t.TempDir(), "noexec")
	if err := os.WriteFile(noexec, []byte("#!/bin/sh\necho 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, command, reference string
	}{
		{"missing", "/no/such/tool", "tool 'tool' could not be spawned: spawn /no/such/tool ENOENT"},
		{"not executable", noexec, "tool 'tool' could not be spawned: spawn " + noexec + " EACCES"},
		{"bare name not in PATH", "no-such-tool-h32", "tool 'tool' could not be spawned: spawn no-such-tool-h32 ENOENT"},
		{"a directory", "/tmp", "tool 'tool' could not be spawned: spawn /tmp EACCES"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := &ledger.Memory{}
			base := t.TempDir()
			p, err := subprocess.New(subprocess.WithCommand(tc.command), subprocess.WithWorkdirBase(base), subprocess.WithLedger(mem))
			if err != nil {
				t.Fatal(err)
			}
			_, err = dispatch(p, request("tool"))
			e := wantCode(t, err, executor.CodeSpawn)
			if e.Message != tc.reference {
				t.Errorf("message %q, the reference's %q", e.Message, tc.reference)
			}
			in, rows := mem.Intents(), mem.Records()
			if len(in) != 1 || len(rows) != 1 {
				t.Fatalf("%d intents and %d outcomes, the reference's 1 and 1", len(in), len(rows))
			}
			r := rows[0]
			if r.Outcome != ledger.OutcomeError || r.ExitCode != nil || r.Signal != nil || r.AttemptID != in[0].AttemptID {
				t.Fatalf("outcome %+v, the reference's error with exitCode and signal null, of the intent's attempt", r)
			}
			assertEmpty(t, base)
		})
	}
}

// TestBareCommandWithoutPATHSearchesUsrBinAndBin: with no PATH in the tool
// environment a bare name is searched in /usr/bin:/bin, as the
// reference's spawn (libuv, glibc's _PATH_DEFPATH) searches it: `sh` runs,
// and a name only /usr/local/bin holds (go, on the development host) is
// ENOENT, as the reference's "spawn go ENOENT".
func TestBareCommandWithoutPATHSearchesUsrBinAndBin(t *testing.T) {
	p, err := subprocess.New(subprocess.WithWorkdirBase(t.TempDir())) // the commands come from the spec
	if err != nil {
		t.Fatal(err)
	}
	ok := request("tool")
	ok.Spec = json.RawMessage(`{"command":"sh","args":["-c","echo 1"]}`)
	if res, err := dispatch(p, ok); err != nil || string(res) != "1" {
		t.Fatalf("bare sh: %s, %v; want 1", res, err)
	}
	local := testenv.LocalBinOnly()
	if local == "" {
		t.Log("no executable lies in /usr/local/bin alone on this host: only the search of /usr/bin:/bin is shown")
		return
	}
	missing := request("tool")
	missing.Spec = json.RawMessage(`{"command":"` + local + `"}`)
	_, err = dispatch(p, missing)
	e := wantCode(t, err, executor.CodeSpawn)
	if want := "tool 'tool' could not be spawned: spawn " + local + " ENOENT"; e.Message != want {
		t.Fatalf("bare %s: %q, want %q", local, e.Message, want)
	}
}

// TestToolNamesAndTagsAsTheReferenceTakesThem: names the reference's
// executor dispatches (dots, a colon, an emoji, "..", none) dispatch, each
// in a workdir that is a direct child of the base named
// rulvar-exec-<tool>-XXXXXX, and an executor tag other than subprocess
// and container is recorded as given.
func TestToolNamesAndTagsAsTheReferenceTakesThem(t *testing.T) {
	for _, tc := range []struct{ tool, tag string }{
		{"my.tool", "weird-tag"},
		{"github.create_issue", "subprocess"},
		{"gh:issue 😀", "inprocess"},
		{"..", "container"},
		{"", "subprocess"},
	} {
		t.Run(tc.tool, func(t *testing.T) {
			mem := &ledger.Memory{}
			p, base := sh(t, `printf '"%s"' "$PWD"`, subprocess.WithLedger(mem))
			req := request(tc.tool)
			req.Executor = tc.tag
			res, err := dispatch(p, req)
			if err != nil {
				t.Fatalf("tool %q, executor %q: %v; the reference dispatches it", tc.tool, tc.tag, err)
			}
			var wd string
			if err := json.Unmarshal(res, &wd); err != nil {
				t.Fatal(err)
			}
			name := regexp.MustCompile(`^rulvar-exec-` + regexp.QuoteMeta(tc.tool) + `-[A-Za-z0-9]{6}$`)
			if filepath.Dir(wd) != base || !name.MatchString(filepath.Base(wd)) {
				t.Fatalf("workdir %q, want %s/rulvar-exec-%s-XXXXXX", wd, base, tc.tool)
			}
			rows := mem.Records()
			if len(rows) != 1 || rows[0].Executor != tc.tag || rows[0].Tool != tc.tool || mem.Intents()[0].Executor != tc.tag {
				t.Fatalf("rows %+v: want tool %q and executor %q as given", rows, tc.tool, tc.tag)
			}
			assertEmpty(t, base)
		})
	}
}

// TestSpecFallbacksAsTheReference: a spec.command that is not a string
// falls back to the executor's command and keeps the spec's string args;
// a spec.args that is not an array runs with the executor's args alone.
func TestSpecFallbacksAsTheReference(t *testing.T) {
	for _, tc := range []struct {
		name, spec string
		args       []string
		reference  string
	}{
		// /bin/echo '"x"' prints "x": a JSON string.
		{"command a number", `{"command":5,"args":["\"x\"",7]}`, nil, `"x"`},
		{"command null", `{"command":null,"args":["\"x\""]}`, nil, `"x"`},
		{"args a string", `{"command":"/bin/echo","args":"x"}`, []string{`"pre"`}, `"pre"`},
		{"args an object", `{"args":{"a":1}}`, nil, `null`},
		{"spec an array", `["/bin/false"]`, []string{`"pre"`}, `"pre"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := subprocess.New(subprocess.WithCommand("/bin/echo", tc.args...), subprocess.WithWorkdirBase(t.TempDir()))
			if err != nil {
				t.Fatal(err)
			}
			req := request("t")
			req.Spec = json.RawMessage(tc.spec)
			res, err := dispatch(p, req)
			if err != nil || string(res) != tc.reference {
				t.Fatalf("spec %s: %s, %v; the reference's %s", tc.spec, res, err, tc.reference)
			}
		})
	}
}

// TestCredentialsReachTheToolInInsertionOrder: the tool's environment, in
// the order execve(2) got it, is the reference's: the allowlisted host
// variables in allowEnv's order, then the minted ones in the order the
// credentials function gave them (one that overwrites an allowlisted name
// keeps that name's place), then the three RULVAR_* variables.
func TestCredentialsReachTheToolInInsertionOrder(t *testing.T) {
	host := map[string]string{"HOME": "/host-home", "LANG": "C.UTF-8"}
	creds := func(_ context.Context, _ *executor.Request) ([]executor.Credential, error) {
		return []executor.Credential{{Name: "ZED", Value: "1"}, {Name: "ALPHA", Value: "2"}, {Name: "HOME", Value: "cred-home"}, {Name: "MID", Value: "3"}}, nil
	}
	p, _ := sh(t, `tr '\0' ' ' < /proc/$$/environ >&2; exit 3`,
		subprocess.WithAllowEnv("HOME", "LANG"), subprocess.WithCredentials(creds),
		subprocess.WithLookupEnv(func(k string) (string, bool) { v, ok := host[k]; return v, ok }))
	_, err := dispatch(p, request("t"))
	const reference = "tool 't' exited 3: HOME=cred-home LANG=C.UTF-8 ZED=1 ALPHA=2 MID=3 RULVAR_TOOL=t RULVAR_RUN_ID=run RULVAR_IDEMPOTENCY_KEY=key"
	if e := wantCode(t, err, executor.CodeExit); e.Message != reference {
		t.Fatalf("environment %q,\nthe reference's %q", strings.TrimPrefix(e.Message, "tool 't' exited 3: "), strings.TrimPrefix(reference, "tool 't' exited 3: "))
	}
}

// TestOutputCapKeepsTheExitOfAToolThatExited: a tool that writes past the
// cap and exits at once (printf 12345 under a cap of 5) fails output-cap
// with its own exit code, 0, in every run, as the reference records it
// (exitCode 0 in 5 of 5 runs; moat's SIGTERM used to beat the exit in
// most). One that stays after the cap is still stopped by SIGTERM, long
// before its timeout.
func TestOutputCapKeepsTheExitOfAToolThatExited(t *testing.T) {
	mem := &ledger.Memory{}
	p, _ := sh(t, `printf 12345`, subprocess.WithMaxOutputBytes(5), subprocess.WithLedger(mem))
	for i := range 20 {
		_, err := dispatch(p, request("cap"))
		wantCode(t, err, executor.CodeOutputCap)
		r := mem.Records()[i]
		if r.Outcome != ledger.OutcomeError || r.ExitCode == nil || *r.ExitCode != 0 || r.Signal != nil {
			t.Fatalf("run %d: outcome %s, exitCode %v, signal %v; the reference's error, 0, null", i+1, r.Outcome, deref(r.ExitCode), deref(r.Signal))
		}
	}

	mem = &ledger.Memory{}
	p, _ = sh(t, `printf 12345; exec sleep 30`, subprocess.WithMaxOutputBytes(5), subprocess.WithLedger(mem))
	_, err := dispatch(p, request("cap"))
	wantCode(t, err, executor.CodeOutputCap)
	if r := mem.Records()[0]; r.Signal == nil || *r.Signal != "SIGTERM" {
		t.Fatalf("a tool that stayed after the cap: signal %v, want SIGTERM", deref(r.Signal))
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

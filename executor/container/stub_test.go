package container_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/executor/container"
	"github.com/moat-sandbox/moat/ledger"
)

// stubCLI is a stand-in `docker` (no daemon): a shell script that records
// its argv, environment and stdin under dir, then runs body. A `kill` or
// `rm` call (the kill path) is recorded in dir/rm and does nothing else.
type stubCLI struct {
	path, dir string
}

func newStub(t *testing.T, body string) *stubCLI {
	t.Helper()
	dir := t.TempDir()
	script := "#!/bin/sh\n" +
		"out=" + dir + "\n" +
		"if [ \"$1\" = rm ] || [ \"$1\" = kill ]; then printf '%s\\n' \"$@\" >> \"$out/rm\"; exit 0; fi\n" +
		"for a in \"$@\"; do printf '%s\\n' \"$a\"; done > \"$out/argv\"\n" +
		"/usr/bin/env > \"$out/env\"\n" +
		"/bin/cat > \"$out/stdin\"\n" +
		body + "\n"
	path := filepath.Join(dir, "docker")
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return &stubCLI{path: path, dir: dir}
}

func (s *stubCLI) lines(t *testing.T, name string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.dir, name))
	if err != nil {
		t.Fatalf("the stub CLI left no %s: %v", name, err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

// hostEnv is the fake host environment every stub test looks variables up in.
var hostEnv = map[string]string{
	"PATH":        "/usr/bin:/bin",
	"HOME":        "/root",
	"DOCKER_HOST": "unix:///run/stub.sock",
	"RV_FWD":      "forwarded-value",
	"RV_LEAKED":   "must-not-leak",
}

func lookup(name string) (string, bool) { v, ok := hostEnv[name]; return v, ok }

// stubProvider builds a provider on the stub with the reference's defaults,
// a private workdir base and the fake host environment.
func stubProvider(t *testing.T, s *stubCLI, opts ...container.Option) (*container.Provider, string) {
	t.Helper()
	base := t.TempDir()
	all := append([]container.Option{
		container.WithCLI(s.path),
		container.WithImage("busybox:1.36"),
		container.WithCommand("/bin/true", "--flag"),
		container.WithWorkdirBase(base),
		container.WithLookupEnv(lookup),
	}, opts...)
	p, err := container.New(all...)
	if err != nil {
		t.Fatalf("container.New: %v", err)
	}
	return p, base
}

func request(tool string) *executor.Request {
	return &executor.Request{Executor: "container", Tool: tool, Args: json.RawMessage(`{"k":1}`), RunID: "run-1", SpanID: "span-1", IdempotencyKey: "key-1"}
}

func dispatch(p executor.Provider, req *executor.Request) (json.RawMessage, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return p.Dispatch(ctx, req)
}

func wantCode(t *testing.T, err error, code executor.Code) *executor.Error {
	t.Helper()
	var e *executor.Error
	if !errors.As(err, &e) || e.Code != code {
		t.Fatalf("err = %v (%T), want code %q", err, err, code)
	}
	return e
}

func assertEmpty(t *testing.T, base string) {
	t.Helper()
	entries, err := os.ReadDir(base)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Fatalf("workdir base not empty after the dispatch: %v", entries)
	}
}

func minted(context.Context, *executor.Request) ([]executor.Credential, error) {
	return []executor.Credential{{Name: "RV_CRED", Value: "minted-token"}}, nil
}

// The reference's argv, exactly (contract 6.2), with moat's --name.
func TestArgvIsTheReferences(t *testing.T) {
	s := newStub(t, `printf '{"ok":true}'`)
	mem := &ledger.Memory{}
	p, base := stubProvider(t, s, container.WithLedger(mem), container.WithCredentials(minted), container.WithForwardEnv("RV_FWD", "RV_UNSET"))
	res, err := dispatch(p, request("stubbed"))
	if err != nil {
		t.Fatal(err)
	}
	if string(res) != `{"ok":true}` {
		t.Fatalf("result %s", res)
	}
	rows := mem.Records()
	if len(rows) != 1 || rows[0].Executor != "container" || rows[0].Outcome != ledger.OutcomeOK {
		t.Fatalf("ledger rows %+v, want one ok row with executor container", rows)
	}
	workdir := rows[0].Workdir
	if !strings.HasPrefix(filepath.Base(workdir), "rulvar-cexec-stubbed-") || filepath.Dir(workdir) != base {
		t.Fatalf("workdir %s, want %s/rulvar-cexec-stubbed-XXXXXX", workdir, base)
	}
	want := []string{"run", "--rm", "-i", "--network", "none", "--memory", "256m", "--cpus", "1.0", "--pids-limit", "128",
		"--read-only", "--cap-drop", "ALL",
		"-e", "RULVAR_TOOL", "-e", "RULVAR_RUN_ID", "-e", "RULVAR_IDEMPOTENCY_KEY", "-e", "RV_FWD", "-e", "RV_CRED",
		"-v", workdir + ":/work", "-w", "/work", "--name", "moat-" + rows[0].AttemptID,
		"busybox:1.36", "/bin/true", "--flag"}
	if got := s.lines(t, "argv"); strings.Join(got, "\x00") != strings.Join(want, "\x00") {
		t.Fatalf("argv\n got %q\nwant %q", got, want)
	}
	if got := s.lines(t, "stdin"); got[0] != `{"tool":"stubbed","args":{"k":1},"idempotencyKey":"key-1"}` {
		t.Fatalf("stdin %q", got)
	}
	assertEmpty(t, base)
}

// The CLI's environment is daemonEnv + forwarded + minted + RULVAR_*, and
// nothing else of the host; values reach it, never argv (contract 6.3).
func TestCLIEnvironment(t *testing.T) {
	s := newStub(t, `printf '{}'`)
	p, _ := stubProvider(t, s, container.WithCredentials(minted), container.WithForwardEnv("RV_FWD"))
	if _, err := dispatch(p, request("envy")); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, kv := range s.lines(t, "env") {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	want := map[string]string{"PATH": "/usr/bin:/bin", "HOME": "/root", "DOCKER_HOST": "unix:///run/stub.sock",
		"RV_FWD": "forwarded-value", "RV_CRED": "minted-token",
		"RULVAR_TOOL": "envy", "RULVAR_RUN_ID": "run-1", "RULVAR_IDEMPOTENCY_KEY": "key-1"}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("CLI env %s = %q, want %q", k, env[k], v)
		}
	}
	delete(env, "PWD") // set by the shell itself
	delete(env, "SHLVL")
	delete(env, "_")
	for k := range env {
		if _, ok := want[k]; !ok {
			t.Errorf("unlisted variable %s reached the CLI", k)
		}
	}
	for _, a := range s.lines(t, "argv") {
		for _, v := range []string{"forwarded-value", "minted-token", "must-not-leak", "unix:///run/stub.sock"} {
			if strings.Contains(a, v) {
				t.Errorf("a value appears in argv: %q", a)
			}
		}
	}
	for _, a := range s.lines(t, "argv") {
		if a == "HOME" || a == "DOCKER_HOST" || a == "PATH" {
			t.Errorf("daemon variable %s is forwarded into the container", a)
		}
	}
}

// Options change exactly their flags; runtime, ulimits and extra args go
// just before the image.
func TestArgvOptions(t *testing.T) {
	s := newStub(t, `printf '{}'`)
	p, _ := stubProvider(t, s, container.WithNetwork("bridge"), container.WithMemory("1g"), container.WithCPUs("2"),
		container.WithPidsLimit(64), container.WithReadOnly(false), container.WithCapDrop("NET_RAW", "SYS_ADMIN"),
		container.WithWorkMount("/job"), container.WithRuntime("runc"), container.WithUlimits("nofile=1024:1024", "nproc=512:512"),
		container.WithExtraArgs("--pull=never"), container.WithImage("img@sha256:"+strings.Repeat("a", 64)))
	if _, err := dispatch(p, request("opts")); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(s.lines(t, "argv"), " ")
	for _, want := range []string{"run --rm -i --network bridge --memory 1g --cpus 2 --pids-limit 64 --cap-drop NET_RAW --cap-drop SYS_ADMIN -e RULVAR_TOOL",
		":/job -w /job --name moat-", " --runtime runc --ulimit nofile=1024:1024 --ulimit nproc=512:512 --pull=never img@sha256:" + strings.Repeat("a", 64) + " /bin/true --flag"} {
		if !strings.Contains(got, want) {
			t.Errorf("argv %q lacks %q", got, want)
		}
	}
	if strings.Contains(got, "--read-only") {
		t.Errorf("argv %q has --read-only though WithReadOnly(false)", got)
	}
}

// The hardening options add their flags after the capability drop, and a
// user namespace mounts the workdir with podman's U option (the container's
// root, a host uid of its own, must own the 0700 /work).
func TestArgvHardening(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  container.Option
		want string
	}{
		{"idmap", container.WithIDMap(2100000000, 65536), "--cap-drop ALL --security-opt no-new-privileges --uidmap 0:2100000000:65536 --gidmap 0:2100000000:65536 -e RULVAR_TOOL"},
		{"userns", container.WithUserNS("auto"), "--cap-drop ALL --security-opt no-new-privileges --userns auto -e RULVAR_TOOL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStub(t, `printf '{}'`)
			p, _ := stubProvider(t, s, container.WithNoNewPrivileges(), tc.opt)
			if _, err := dispatch(p, request("hard")); err != nil {
				t.Fatal(err)
			}
			got := strings.Join(s.lines(t, "argv"), " ")
			if !strings.Contains(got, tc.want) || !strings.Contains(got, ":/work:U -w /work") {
				t.Errorf("argv %q lacks %q or the workdir's :U", got, tc.want)
			}
		})
	}
}

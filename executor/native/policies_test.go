package native_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/cgroups"
	"github.com/moat-sandbox/moat/conformance"
	"github.com/moat-sandbox/moat/conformance/testenv"
	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/executor/native"
	"github.com/moat-sandbox/moat/policies"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// delegatedVar names, for the re-run as nobody, the cgroup subtree that the
// root half of the test delegated to it.
const delegatedVar = "MOAT_NATIVE_TEST_DELEGATED"

// batteryPolicies are the built-ins the hostile battery must hold for.
var batteryPolicies = []string{"default", "python", "shell", "strict"}

// policyProvider builds a conformance factory for one built-in policy.
func policyProvider(name string, extra ...native.Option) conformance.Factory {
	return func(t *testing.T, cfg conformance.Config) executor.Provider {
		pol, err := policies.Builtin(name)
		if err != nil {
			t.Fatal(err)
		}
		opts := append([]native.Option{
			native.WithPolicy(pol),
			native.WithCommand(cfg.Command, cfg.Args...),
			native.WithAllowEnv(cfg.AllowEnv...),
			native.WithTimeout(cfg.Timeout),
			native.WithMaxOutputBytes(cfg.MaxOutputBytes),
			native.WithCredentials(cfg.Credentials),
			native.WithBinds(specs.Mount{Source: cfg.RunnerDir, Destination: cfg.RunnerDir, Options: []string{"ro"}}),
		}, extra...)
		if cfg.Ledger != nil {
			opts = append(opts, native.WithLedger(cfg.Ledger))
		}
		if cfg.KillGrace != nil {
			opts = append(opts, native.WithKillGrace(*cfg.KillGrace))
		}
		p, err := native.New(opts...)
		if err != nil {
			t.Fatalf("native.New with policy %s: %v", name, err)
		}
		t.Cleanup(func() { p.Close() })
		return p
	}
}

// The whole kit (reference checks, isolation, hostile battery) under every
// built-in policy, as root.
func TestPolicyBattery(t *testing.T) {
	testenv.RequireRoot(t)
	for _, name := range batteryPolicies {
		t.Run(name, func(t *testing.T) { conformance.Run(t, policyProvider(name), everything) })
	}
}

// The same rootless. strict requires enforced cgroup limits, so the root
// half delegates a cgroup subtree to nobody first, as an administrator (or
// systemd's Delegate=) would.
func TestPolicyBatteryAsNobody(t *testing.T) {
	if runAsDelegatedNobody(t) {
		return
	}
	for _, name := range batteryPolicies {
		t.Run(name, func(t *testing.T) {
			conformance.Run(t, policyProvider(name, cgroupOptions(t)...), everything)
		})
	}
}

// runAsDelegatedNobody re-runs the current test as nobody with a cgroup
// subtree delegated to it (see delegateToNobody) and returns true in the
// original process; in the re-run it returns false and the body goes on.
func runAsDelegatedNobody(t *testing.T) bool {
	runner := ""
	if !testenv.ReRun() && os.Geteuid() == 0 {
		var parent string
		parent, runner = delegateToNobody(t)
		t.Setenv(delegatedVar, parent)
	}
	return testenv.RunAsUserIn(t, testenv.NobodyUID, testenv.NobodyGID, runner)
}

// cgroupOptions gives the re-run as nobody the subtree the root half
// delegated; as root the provider finds its own.
func cgroupOptions(t *testing.T) []native.Option {
	parent := os.Getenv(delegatedVar)
	if os.Geteuid() == 0 || parent == "" {
		return nil
	}
	m, err := cgroups.New(cgroups.WithParent(parent))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return []native.Option{native.WithCgroups(m)}
}

// A policy that requires limits this host cannot enforce is refused, typed,
// before anything runs (nobody without delegation).
func TestRequiredLimitsRefuseWithoutDelegation(t *testing.T) {
	if testenv.RunAsUser(t, testenv.NobodyUID, testenv.NobodyGID) {
		return
	}
	pol, err := policies.Builtin("strict")
	if err != nil {
		t.Fatal(err)
	}
	_, err = native.New(native.WithPolicy(pol), native.WithoutCgroups())
	var re *cgroups.RequiredError
	if executor.CodeOf(err) != executor.CodeConfig || !errors.As(err, &re) || !strings.Contains(err.Error(), "requires limits this host cannot enforce") {
		t.Fatalf("err = %v, want a config error carrying *cgroups.RequiredError", err)
	}
}

// delegateToNobody delegates, as root, a cgroup subtree to nobody and
// returns the parent its moat should create leaves under (for
// cgroups.WithParent) and, on cgroup v2, the group nobody's process must be
// born in ("" on v1). On v1 a group below this process's cgroup in each
// hierarchy is chowned with its files, as an administrator would (only in
// the hierarchies of controllers, when given; v1 alone); on v2 a group
// below the root is, with a runner group for the process, as systemd's
// Delegate= does. Everything is removed at the end.
func delegateToNobody(t *testing.T, controllers ...string) (parent, runner string) {
	t.Helper()
	h, err := cgroups.Detect()
	if err != nil {
		t.Fatal(err)
	}
	name := "moat-native-test-" + strings.ReplaceAll(t.Name(), "/", "-")
	chown := func(dir string, files ...string) {
		for _, f := range append([]string{""}, files...) {
			if err := os.Chown(filepath.Join(dir, f), testenv.NobodyUID, testenv.NobodyGID); err != nil {
				t.Fatal(err)
			}
		}
	}
	mkdir := func(dir string) {
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			t.Fatal(err)
		}
		t.Cleanup(func() { removeCgroupTree(dir) })
	}
	if len(controllers) == 0 {
		controllers = []string{"memory", "pids", "cpu"}
	} else if h.Layout == cgroups.Unified {
		t.Fatal("delegateToNobody: a choice of controllers is for cgroup v1 hierarchies")
	}
	if h.Layout == cgroups.Unified {
		deleg := filepath.Join(h.Unified, name)
		runner = filepath.Join(deleg, "runner")
		mkdir(deleg)
		mkdir(runner)
		for _, d := range []string{deleg, runner} {
			chown(d, "cgroup.procs", "cgroup.subtree_control", "cgroup.threads")
		}
		return "/" + name + "/moat", runner
	}
	for _, c := range controllers {
		self, ok := h.Self[c]
		if !ok {
			continue
		}
		dir := filepath.Join(self, name)
		mkdir(dir)
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var files []string
		for _, e := range ents {
			files = append(files, e.Name())
		}
		chown(dir, files...)
	}
	return name + "/moat", ""
}

// removeCgroupTree removes a cgroup directory and its child groups, deepest
// first (cgroupfs directories are removed with rmdir, never unlink).
func removeCgroupTree(dir string) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.IsDir() {
			removeCgroupTree(filepath.Join(dir, e.Name()))
		}
	}
	os.Remove(dir)
}

// Ordinary programs of each runtime must work under the policies made for
// them: the other half of a filter's job.
func TestOrdinaryProgramsWork(t *testing.T) {
	// The body runs as nobody in a re-run copy first, then here as well
	// (as root when the suite runs as root).
	_ = testenv.RunAsUser(t, testenv.NobodyUID, testenv.NobodyGID)
	cases := []struct {
		policy, name string
		argv         []string
	}{
		{"shell", "pipeline", []string{"/bin/sh", "-c", `cat >/dev/null; printf 'a\nb\nc\n' | sort -r | head -n 1 | tr -d '\n' | sed 's/.*/{"top":"&"}/'`}},
		{"shell", "subshells and files", []string{"/bin/sh", "-c", `cat >/dev/null; mkdir -p /tmp/d && (echo x > /tmp/d/f) && n=$(ls /tmp/d | wc -l) && echo "{\"n\":$n}"`}},
		{"python", "threads and subprocess", []string{"python3", "-c", `
import json, subprocess, sys, threading
sys.stdin.read()
out = []
ts = [threading.Thread(target=lambda i=i: out.append(i)) for i in range(4)]
[t.start() for t in ts]; [t.join() for t in ts]
echo = subprocess.run(["/bin/echo", "hi"], capture_output=True, text=True).stdout.strip()
print(json.dumps({"threads": len(out), "echo": echo}))`}},
		{"python", "loopback unreachable with network none", []string{"python3", "-c", loopbackProbe}},
		{"python+loopback", "loopback sockets with network loopback", []string{"python3", "-c", loopbackProbe}},
		{"default", "static binary", nil},
	}
	if node, err := exec.LookPath("node"); err == nil {
		cases = append(cases, struct {
			policy, name string
			argv         []string
		}{"node", "fs and child process", []string{node, "-e", `
const fs=require('fs'),cp=require('child_process');
fs.readFileSync(0); fs.writeFileSync('/work/n.txt','x');
console.log(JSON.stringify({read: fs.readFileSync('/work/n.txt','utf8'), echo: cp.execFileSync('/bin/echo',['hi']).toString().trim()}))`}})
	}
	for _, tc := range cases {
		t.Run(tc.policy+" "+tc.name, func(t *testing.T) {
			argv := tc.argv
			if argv == nil {
				argv = []string{staticBinary(t)}
			}
			base, loopback := strings.CutSuffix(tc.policy, "+loopback")
			pol, err := policies.Builtin(base)
			if err != nil {
				t.Fatal(err)
			}
			if loopback {
				pol.Network = policies.NetworkLoopback
			}
			opts := []native.Option{native.WithPolicy(pol), native.WithCommand(argv[0], argv[1:]...), native.WithAllowEnv("PATH")}
			if strings.HasPrefix(argv[0], "/tmp/") {
				opts = append(opts, native.WithBinds(specs.Mount{Source: filepath.Dir(argv[0]), Destination: filepath.Dir(argv[0]), Options: []string{"ro"}}))
			}
			p, err := native.New(opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			res, err := p.Dispatch(ctx, &executor.Request{Tool: "ordinary", Args: json.RawMessage(`{}`), RunID: "r", SpanID: "s", IdempotencyKey: "k"})
			if err != nil {
				t.Fatalf("%s under policy %s failed: %v", tc.name, tc.policy, err)
			}
			t.Logf("result: %s", res)
			if strings.Contains(tc.name, "loopback") {
				want := `{"echo": "ping"}`
				if pol.Network == policies.NetworkNone {
					want = `{"echo": "unreachable"}`
				}
				if string(res) != want {
					t.Fatalf("network %s: %s, want %s", pol.Network, res, want)
				}
			}
		})
	}
}

// loopbackProbe serves one echo over TCP on 127.0.0.1 and talks to it:
// with lo up it echoes, with network none the connection cannot be made.
const loopbackProbe = `
import json, socket, sys, threading
sys.stdin.read()
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen()
def serve():
    c, _ = srv.accept(); c.sendall(c.recv(16)); c.close()
threading.Thread(target=serve, daemon=True).start()
try:
    cl = socket.create_connection(srv.getsockname(), timeout=2); cl.sendall(b"ping")
    print(json.dumps({"echo": cl.recv(16).decode()}))
except OSError:
    print(json.dumps({"echo": "unreachable"}))`

// staticBinary builds a static Go program (no libc, no cgo) into a 0755
// directory under /tmp, or skips when no Go toolchain is at hand (a VM that
// only received compiled test binaries).
func staticBinary(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no Go toolchain here to build a static binary (the VM gets compiled tests only)")
	}
	dir, err := os.MkdirTemp("", "moat-static-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	src := filepath.Join(dir, "main.go")
	os.WriteFile(src, []byte("package main\nimport (\"fmt\";\"io\";\"os\")\nfunc main(){io.ReadAll(os.Stdin);fmt.Print(`{\"static\":true}`)}\n"), 0o644)
	out := filepath.Join(dir, "static")
	cmd := exec.Command(goBin, "build", "-o", out, src)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GO111MODULE=off", "GOCACHE="+filepath.Join(dir, "cache"), "HOME="+dir)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build a static Go binary: %v\n%s", err, b)
	}
	return out
}

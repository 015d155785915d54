package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/moat-sandbox/moat/cgroups"
	"github.com/moat-sandbox/moat/conformance"
	"github.com/moat-sandbox/moat/conformance/testenv"
	"github.com/moat-sandbox/moat/executor/native"
	"github.com/moat-sandbox/moat/nsexec"
	"github.com/moat-sandbox/moat/policies"
)

// The end-to-end tests run moat as a user would: as a separate program.
// That program is this test binary, copied under the name "moat" into a
// 0755 directory: TestMain turns such a copy into the CLI. It needs no Go
// toolchain, so the same tests run in a VM that only gets test binaries.
func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == "moat" {
		nsexec.Init()
		exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	conformance.Main(m, func() {
		if moatDir != "" {
			os.RemoveAll(moatDir)
		}
	})
}

var (
	moatOnce sync.Once
	moatDir  string
	moatErr  error
)

// moatBin returns the path of the CLI copy of this test binary.
func moatBin(t *testing.T) string {
	t.Helper()
	moatOnce.Do(func() {
		var p string
		if p, moatErr = testenv.CopySelf("moat"); moatErr == nil {
			moatDir = filepath.Dir(p)
		}
	})
	if moatErr != nil {
		t.Fatalf("prepare the moat binary: %v", moatErr)
	}
	return filepath.Join(moatDir, "moat")
}

// result is what one moat invocation did.
type result struct {
	code           int
	stdout, stderr string
}

func moat(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	return moatIn(t, os.TempDir(), stdin, args...)
}

// moatIn is moat run from the directory dir.
func moatIn(t *testing.T, dir, stdin string, args ...string) result {
	t.Helper()
	cmd := exec.Command(moatBin(t), args...)
	cmd.Dir = dir
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	return exitResult(t, cmd.Run(), args, &out, &errb)
}

// exitResult is what a finished moat run gave: its exit status (a failure
// to run it at all fails t) and its output.
func exitResult(t *testing.T, err error, args []string, out, errb *bytes.Buffer) result {
	t.Helper()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = waitStatus(ee)
	} else if err != nil {
		t.Fatalf("run moat %v: %v", args, err)
	}
	return result{code, out.String(), errb.String()}
}

// coreDumped is waitStatus's value for a process that dumped core, which
// moat never may: its core would hold the launcher's memory.
const coreDumped = -1000

// waitStatus is how a moat process ended in runStatus's terms: its exit
// code, or signalStatus(N) when it died of signal N (as `moat run` does
// when signal N ended its command), or coreDumped.
func waitStatus(ee *exec.ExitError) int {
	ws, ok := ee.Sys().(syscall.WaitStatus)
	switch {
	case !ok:
		return ee.ExitCode()
	case ws.Signaled() && ws.CoreDump():
		return coreDumped
	case ws.Signaled():
		return signalStatus(ws.Signal())
	}
	return ws.ExitStatus()
}

// bothIdentities runs body as nobody (in a re-run copy) and then as the
// current user.
func bothIdentities(t *testing.T) {
	_ = testenv.RunAsUser(t, testenv.NobodyUID, testenv.NobodyGID)
}

func TestRunExitStatusTable(t *testing.T) {
	bothIdentities(t)
	notExec := filepath.Join(moatDirFor(t), "not-executable")
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{"success", []string{"run", "--", "/bin/sh", "-c", "id -u; echo hi > /work/x; cat /work/x"}, 0, "1000\nhi\n", ""},
		{"python", []string{"run", "--policy", "python", "--", "python3", "-c", "print(6*7)"}, 0, "42\n", ""},
		{"the tool's own status", []string{"run", "--", "/bin/sh", "-c", "exit 7"}, 7, "", ""},
		{"killed by a signal", []string{"run", "--", "python3", "-c", "import ctypes; ctypes.string_at(0)"}, signalStatus(syscall.SIGSEGV), "", ""},
		{"kill -9 $$", []string{"run", "--", "/bin/sh", "-c", "kill -9 $$"}, signalStatus(syscall.SIGKILL), "", ""},
		{"kill -TERM $$", []string{"run", "--", "/bin/sh", "-c", "kill -TERM $$"}, signalStatus(syscall.SIGTERM), "", ""},
		{"abort", []string{"run", "--policy", "python", "--", "python3", "-c", "import os; os.abort()"}, signalStatus(syscall.SIGABRT), "", ""},
		{"timeout", []string{"run", "--timeout", "300ms", "--", "/bin/sleep", "30"}, 124, "", "exceeded"},
		{"setup failure", []string{"run", "--rootfs", "/nonexistent-rootfs", "--", "/bin/true"}, 125, "", "rootfs /nonexistent-rootfs"},
		{"not executable", []string{"run", "--bind", notExec + ":/x", "--", "/x"}, 126, "", "exec /x"},
		{"not found", []string{"run", "--", "/no/such/tool"}, 127, "", "/no/such/tool"},
		{"bad flag", []string{"run", "--bogus", "--", "/bin/true"}, 64, "", "flag provided but not defined"},
		{"missing command", []string{"run"}, 64, "", "missing the command"},
		{"missing policy", []string{"run", "--policy", "no-such-policy", "--", "/bin/true"}, 64, "", "no-such-policy"},
		{"bad limit", []string{"run", "--memory", "12 parsecs", "--", "/bin/true"}, 64, "", `--memory "12 parsecs"`},
		{"negative timeout", []string{"run", "--timeout", "-5s", "--", "/bin/true"}, 64, "", "--timeout -5s"},
		{"infinite cpus", []string{"run", "--cpus", "+Inf", "--", "/bin/true"}, 64, "", "--cpus +Inf"},
		{"env without a name", []string{"run", "--env", "=x", "--", "/bin/true"}, 64, "", `--env "=x"`},
		{"bind over the root", []string{"run", "--bind", "/tmp:/", "--", "/bin/true"}, 64, "", `--bind "/tmp:/"`},
		{"bad bind", []string{"run", "--bind", "nocolon", "--", "/bin/true"}, 64, "", "SRC:DST"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := moat(t, "", tc.args...)
			if r.code != tc.code || (tc.stdout != "" && r.stdout != tc.stdout) || !strings.Contains(r.stderr, tc.stderr) {
				t.Fatalf("moat %v: exit %d, stdout %q, stderr %q; want exit %d, stdout %q, stderr containing %q",
					tc.args, r.code, r.stdout, r.stderr, tc.code, tc.stdout, tc.stderr)
			}
		})
	}
}

// moatDirFor makes a 0755 directory holding a file that is not executable.
func moatDirFor(t *testing.T) string {
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	if err := os.WriteFile(filepath.Join(dir, "not-executable"), []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestRunPassesStdioAndEnvironment(t *testing.T) {
	bothIdentities(t)
	t.Setenv("MOAT_CLI_HOST_SECRET", "leak")
	t.Setenv("MOAT_CLI_PASSED", "passed")
	r := moat(t, "from stdin", "run", "--env", "MOAT_CLI_PASSED", "--env", "X=1", "--", "/bin/sh", "-c", "cat; echo; env | sort")
	want := "from stdin\nHOME=/work\nMOAT_CLI_PASSED=passed\nPATH=/usr/local/bin:/usr/bin:/bin\nPWD=/work\nX=1\n"
	if r.code != 0 || r.stdout != want {
		t.Fatalf("exit %d, stdout %q, want %q (stderr %q)", r.code, r.stdout, want, r.stderr)
	}
	r = moat(t, "", "run", "--inherit-env", "--", "/bin/sh", "-c", "echo $MOAT_CLI_HOST_SECRET")
	if r.code != 0 || r.stdout != "leak\n" {
		t.Fatalf("--inherit-env: exit %d, stdout %q", r.code, r.stdout)
	}
}

func TestHelpForEveryCommand(t *testing.T) {
	for _, c := range []string{"run", "dispatch", "doctor", "demo", "policy", "ledger", "version"} {
		r := moat(t, "", c, "--help")
		if c == "version" || c == "demo" {
			continue // they take no flags; --help is a usage error there
		}
		if r.code != 0 || !strings.Contains(r.stdout+r.stderr, "usage") {
			t.Errorf("moat %s --help: exit %d, output %q", c, r.code, r.stdout+r.stderr)
		}
	}
	if r := moat(t, ""); r.code != 64 || !strings.Contains(r.stderr, "Commands:") {
		t.Errorf("moat without a command: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := moat(t, "", "frobnicate"); r.code != 64 || !strings.Contains(r.stderr, `unknown command "frobnicate"`) {
		t.Errorf("unknown command: exit %d, stderr %q", r.code, r.stderr)
	}
}

// stubCLI writes a docker-compatible CLI stand-in that runs the tool's
// command itself (the last argument after the image), so `moat dispatch
// --executor container` can be driven without a daemon.
func stubCLI(t *testing.T) string {
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	path := filepath.Join(dir, "docker")
	script := "#!/bin/sh\n# drop everything up to the image name (moat-stub-image), then run the command\nwhile [ $# -gt 0 ] && [ \"$1\" != moat-stub-image ]; do shift; done\nshift\nexec \"$@\"\n"
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestDispatchEveryProvider(t *testing.T) {
	bothIdentities(t)
	tool := `import json,sys; m=json.load(sys.stdin); print(json.dumps({"n": m["args"]["a"]*m["args"]["b"], "tool": m["tool"]}))`
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"native", []string{"--executor", "native", "--policy", "python"}},
		{"subprocess", []string{"--executor", "subprocess"}},
		{"container", []string{"--executor", "container", "--image", "moat-stub-image", "--container-cli", stubCLI(t)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ledgerPath := filepath.Join(t.TempDir(), "effects.jsonl")
			args := append(append([]string{"dispatch", "--tool", "mul", "--args", `{"a":6,"b":7}`, "--ledger", ledgerPath}, tc.args...), "--", "python3", "-c", tool)
			r := moat(t, "", args...)
			if r.code != 0 || strings.TrimSpace(r.stdout) != `{"n": 42, "tool": "mul"}` {
				t.Fatalf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
			}
			scan := moat(t, "", "ledger", "scan", "--json", ledgerPath)
			var sc struct {
				Status string
				Counts struct{ Intents, Outcomes, OrphanedIntents int }
			}
			if err := json.Unmarshal([]byte(scan.stdout), &sc); err != nil || scan.code != 0 || sc.Status != "clean" || sc.Counts.Intents != 1 || sc.Counts.Outcomes != 1 {
				t.Fatalf("ledger scan: exit %d, %s %s", scan.code, scan.stdout, scan.stderr)
			}
			r = moat(t, "", "dispatch", "--json", "--tool", "bad", "--executor", tc.name, "--image", "moat-stub-image", "--container-cli", stubCLI(t), "--", "/bin/sh", "-c", "echo oops >&2; exit 3")
			var got struct {
				OK    bool
				Error struct{ Code, Message string }
			}
			if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || r.code != 1 || got.OK || got.Error.Code != "exit" || !strings.Contains(got.Error.Message, "oops") {
				t.Fatalf("failing tool: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
			}
		})
	}
	r := moat(t, "", "dispatch", "--tool", "x", "--executor", "teleport", "--", "/bin/true")
	if r.code != 64 || !strings.Contains(r.stderr, "native, subprocess or container") {
		t.Fatalf("unknown executor: exit %d, stderr %q", r.code, r.stderr)
	}
	r = moat(t, "", "dispatch", "--tool", "x", "--args", "{not json", "--", "/bin/true")
	if r.code != 64 || !strings.Contains(r.stderr, "not valid JSON") {
		t.Fatalf("bad args: exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestDoctorJSONMatchesTheHost(t *testing.T) {
	bothIdentities(t)
	r := moat(t, "", "doctor", "--json")
	var rep doctorReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("doctor --json is not JSON: %v\n%s\n%s", err, r.stdout, r.stderr)
	}
	h, err := cgroups.Detect()
	if err != nil {
		t.Fatal(err)
	}
	if rep.Cgroups.Layout != h.Layout.String() {
		t.Errorf("doctor reports cgroup layout %q, the host is %q", rep.Cgroups.Layout, h.Layout)
	}
	if !rep.UserNS.Works || rep.User.UID != os.Geteuid() || !rep.Seccomp.Usable {
		t.Errorf("doctor: userns works %v, uid %d (want %d), seccomp usable %v", rep.UserNS.Works, rep.User.UID, os.Geteuid(), rep.Seccomp.Usable)
	}
	pv, err := native.New(native.WithSystemdBus(userBus())) // what the CLI passes
	if err != nil {
		t.Fatal(err)
	}
	defer pv.Close()
	// Where the limits come from, and for none why.
	if src := pv.Cgroups().Source; src == "" || rep.Cgroups.Source != string(src) || rep.Cgroups.SourceDetail == "" {
		t.Errorf("doctor says the cgroup came from %q (%s), the provider says %q", rep.Cgroups.Source, rep.Cgroups.SourceDetail, src)
	}
	wantDefault := "full"
	if pv.Cgroups().Degraded() {
		wantDefault = "degraded"
	}
	var got string
	for _, p := range rep.Policies {
		if p.Name == "default" {
			got = p.Status
		}
	}
	if got != wantDefault {
		t.Errorf("doctor says the default policy runs %q, the cgroup posture says %q", got, wantDefault)
	}
	if (wantDefault == "full") != (r.code == 0) {
		t.Errorf("doctor exit %d with the default policy %s", r.code, got)
	}
	if rep.Posture == nil || rep.Fingerprint == "" {
		t.Errorf("doctor did not report the native posture")
	}
	fmt.Fprint(io.Discard, r.stderr)
}

// TestRunKeepsTheSeccompProgram: as root, moat run stores its policy's
// compiled filter where MOAT_SECCOMP_STORE says (or not at all with "off");
// rootless it keeps none (a sandbox there is the caller's uid and could
// forge one). A run whose read-write bind reaches the store, and whose tool
// overwrites and swaps what it can there (issue 13 item 1), decides nothing
// for the next run: that one still runs under the filter.
func TestRunKeepsTheSeccompProgram(t *testing.T) {
	bothIdentities(t)
	top := t.TempDir()
	os.Chmod(top, 0o777)
	store := filepath.Join(top, "store")
	programs := func() []string {
		files, _ := filepath.Glob(filepath.Join(store, "*.bpf"))
		return files
	}
	t.Setenv(storeVar, "off")
	if r := moat(t, "", "run", "--", "/bin/true"); r.code != 0 || len(programs()) != 0 {
		t.Fatalf("with the store off: %+v, stored %v", r, programs())
	}
	t.Setenv(storeVar, store)
	want := 1
	if os.Geteuid() != 0 {
		want = 0
	}
	if r := moat(t, "", "run", "--", "/bin/true"); r.code != 0 || len(programs()) != want {
		t.Fatalf("first run: %+v, stored %v, want %d programs", r, programs(), want)
	}
	poison := `for f in /x/store/*; do printf forged > "$f"; done 2>/dev/null; ` +
		`mv /x/store /x/old; mkdir -m 700 /x/store; cp -p /x/old/* /x/store/ 2>/dev/null; chmod 500 /x/store; true`
	if r := moat(t, "", "run", "--bind", top+":/x:rw", "--", "/bin/sh", "-c", poison); r.code != 0 {
		t.Fatalf("the poisoning run: %+v", r)
	}
	r := moat(t, "", "run", "--", "/bin/sh", "-c", "unshare -Ur id -u 2>/dev/null || echo denied")
	if r.code != 0 || r.stdout != "denied\n" {
		t.Fatalf("the run after a poisoned store: %+v, want the filter to deny unshare", r)
	}
}

// TestRunReportsAnOOMKill: moat run whose command was killed at its memory
// limit dies of SIGKILL, as the command did, and the message names the
// command and the limit.
func TestRunReportsAnOOMKill(t *testing.T) {
	testenv.RequireRoot(t) // the limit needs a cgroup this user can create
	r := moat(t, "", "run", "--memory", "32M", "--", "python3", "-c", "b = bytearray(256 << 20)")
	if r.code != signalStatus(syscall.SIGKILL) || !strings.Contains(r.stderr, "tool 'python3' was killed by the kernel at its memory limit of 33554432 bytes") {
		t.Fatalf("got %+v, want death by SIGKILL and the OOM message", r)
	}
}

// TestRunRefusesAnExplicitLimitItCannotEnforce: a limit typed on the command
// line is a requirement. Where no cgroup can hold it (nobody on a host
// without delegation), moat run stops with 125 and one line naming the
// limit, why and the fix, and runs nothing; --allow-degraded accepts running
// without it. The policy's own defaults still only warn.
func TestRunRefusesAnExplicitLimitItCannotEnforce(t *testing.T) {
	if testenv.RunAsUser(t, testenv.NobodyUID, testenv.NobodyGID) {
		return
	}
	requireNoMemoryLimit(t)
	marker := filepath.Join(t.TempDir(), "ran")
	os.Chmod(filepath.Dir(marker), 0o777)
	r := moat(t, "", "run", "--bind", filepath.Dir(marker)+":/m:rw", "--memory", "64M", "--", "/bin/sh", "-c", "touch /m/ran")
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	if r.code != 125 || len(lines) != 1 || !strings.Contains(lines[0], "memory limit (memory 64M) cannot be enforced") ||
		!strings.Contains(lines[0], "fix: ") || !strings.Contains(lines[0], "--allow-degraded") {
		t.Fatalf("moat run --memory 64M as uid %d: %+v; want exit 125 and one line naming the memory limit, why and the fix", os.Geteuid(), r)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the command ran although its memory limit was refused")
	}
	r = moat(t, "", "run", "--pids", "10", "--cpus", "0.5", "--", "/bin/true")
	if r.code != 125 || !strings.Contains(r.stderr, "the pids limit (pids 10)") || !strings.Contains(r.stderr, "the cpu limit (cpus 0.5)") {
		t.Fatalf("moat run --pids 10 --cpus 0.5: %+v; want 125 naming both limits", r)
	}
	r = moat(t, "", "run", "--allow-degraded", "--memory", "64M", "--", "/bin/sh", "-c", "echo ok")
	if r.code != 0 || r.stdout != "ok\n" {
		t.Fatalf("moat run --allow-degraded --memory 64M: %+v; want it to run", r)
	}
	r = moat(t, "", "run", "--", "/bin/sh", "-c", "echo ok")
	if r.code != 0 || r.stdout != "ok\n" {
		t.Fatalf("moat run with the default policy's limits: %+v; want it to run degraded", r)
	}
}

// requireNoMemoryLimit skips plainly where this user can enforce a memory
// limit (a delegated cgroup): the refusal tests need a host without one.
func requireNoMemoryLimit(t *testing.T) {
	t.Helper()
	pv, err := native.New(native.WithPolicy(&policies.Policy{Unfiltered: true}))
	if err != nil {
		t.Fatal(err)
	}
	posture := pv.Cgroups()
	pv.Close()
	if posture.Memory.Enforced {
		t.Skip("not this layout: this user can enforce a memory limit here (a delegated cgroup); the refusal needs a host without one")
	}
}

// TestDispatchRefusesAnExplicitLimitItCannotEnforce: moat dispatch treats a
// limit given with --memory, --pids, --cpus or a policy's limits.required
// as moat run does. Where no cgroup can hold it (nobody on a host without
// delegation) it stops with 125 and one line per limit naming it, why and the
// fix, runs nothing and writes nothing to the ledger; with --allow-degraded it
// runs. The limit flags belong to the native provider alone.
func TestDispatchRefusesAnExplicitLimitItCannotEnforce(t *testing.T) {
	if testenv.RunAsUser(t, testenv.NobodyUID, testenv.NobodyGID) {
		return
	}
	requireNoMemoryLimit(t)
	dir := t.TempDir()
	ledgerPath := filepath.Join(dir, "effects.jsonl")
	tool := []string{"--", "/bin/sh", "-c", "cat >/dev/null; echo 42"}
	dispatch := func(args ...string) result {
		return moat(t, "", append(append([]string{"dispatch", "--tool", "t", "--ledger", ledgerPath}, args...), tool...)...)
	}
	rows := func() int {
		b, err := os.ReadFile(ledgerPath)
		if os.IsNotExist(err) {
			return 0
		}
		if err != nil {
			t.Fatal(err)
		}
		return strings.Count(string(b), "\n")
	}

	r := dispatch("--memory", "64M")
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	if r.code != 125 || len(lines) != 1 || !strings.HasPrefix(lines[0], "moat dispatch: the memory limit (memory 64M) cannot be enforced") ||
		!strings.Contains(lines[0], "fix: ") || !strings.Contains(lines[0], "--allow-degraded") || r.stdout != "" {
		t.Fatalf("moat dispatch --memory 64M as uid %d: %+v; want exit 125 and one line naming the memory limit, why and the fix", os.Geteuid(), r)
	}
	if n := rows(); n != 0 {
		t.Fatalf("the refused dispatch wrote %d ledger rows", n)
	}
	r = dispatch("--json", "--pids", "10", "--cpus", "0.5")
	var got struct {
		OK    bool
		Error struct{ Code, Message string }
	}
	if r.code != 125 || !strings.Contains(r.stderr, "the pids limit (pids 10)") || !strings.Contains(r.stderr, "the cpu limit (cpus 0.5)") ||
		json.Unmarshal([]byte(r.stdout), &got) != nil || got.OK || got.Error.Code != "config" {
		t.Fatalf("moat dispatch --json --pids 10 --cpus 0.5: %+v; want 125 naming both limits and a config error on stdout", r)
	}
	// A policy's limits.required (the built-in strict one's), with no flag.
	if r = dispatch("--policy", "strict"); r.code != 125 || !strings.Contains(r.stderr, "moat dispatch: the memory limit (memory ") {
		t.Fatalf("moat dispatch --policy strict: %+v; want 125 naming the memory limit it requires", r)
	}
	if n := rows(); n != 0 {
		t.Fatalf("the refused dispatches wrote %d ledger rows", n)
	}
	if r = dispatch("--allow-degraded", "--memory", "64M"); r.code != 0 || strings.TrimSpace(r.stdout) != "42" {
		t.Fatalf("moat dispatch --allow-degraded --memory 64M: %+v; want it to run", r)
	}
	if n := rows(); n != 2 {
		t.Fatalf("the dispatch that ran wrote %d ledger rows, want an intent and an outcome", n)
	}
	r = moat(t, "", "dispatch", "--tool", "t", "--executor", "subprocess", "--memory", "64M", "--", "/bin/true")
	if r.code != 64 || !strings.Contains(r.stderr, "apply to --executor native only") {
		t.Fatalf("moat dispatch --executor subprocess --memory 64M: %+v; want a usage error", r)
	}
}

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/conformance/testenv"
	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/executor/native"
	"github.com/moat-sandbox/moat/policies"
	"golang.org/x/sys/unix"
)

// forkMany forks up to 300 sleeping children, stops at the first failure
// and prints how many it started.
const forkMany = `import os, time
n = 0
for i in range(300):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    n += 1
print(n)`

// Issue 28 item 6: rootless on a host with no delegated cgroup the default
// policy's limits vanished: the warning spoke of rlimits, yet the tool
// allocated 600 MiB and forked 300 processes under a policy of 256 MiB and
// 128 pids. As nobody there, RLIMIT_DATA and RLIMIT_NPROC now stand in: the
// allocation fails, the forks stop short of 128, what the built-in
// policies serve (python3, node, a Go program) runs, and the warning says
// per limit what holds. As root, whose cgroups hold the limits here,
// nothing of that: no rlimit, no warning.
func TestRunRootlessLimitsStandIn(t *testing.T) {
	bothIdentities(t)
	limits := func(args ...string) map[string]string {
		t.Helper()
		r := moat(t, "", append(append([]string{"run"}, args...), "--", "/bin/cat", "/proc/self/limits")...)
		if r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		return procLimits(r.stdout)
	}
	if cgroupHoldsDefault(t) {
		got := limits()
		for name, res := range map[string]int{"Max data size": unix.RLIMIT_DATA, "Max processes": unix.RLIMIT_NPROC} {
			var own unix.Rlimit
			unix.Getrlimit(res, &own)
			if want := rlimitText(own.Cur) + " " + rlimitText(own.Max); got[name] != want {
				t.Errorf("%s in the sandbox %q, want the launcher's %q: no stand-in where the cgroup holds the limit", name, got[name], want)
			}
		}
		if r := moat(t, "", "run", "--log-format", "human", "--", "/bin/true"); strings.Contains(r.stderr, "limits without a cgroup") {
			t.Errorf("a warning although the cgroup holds every limit: %s", r.stderr)
		}
		return
	}
	requireNprocPerUserNS(t)
	got := limits()
	if got["Max data size"] != "268435456 268435456" || got["Max processes"] != "128 128" {
		t.Errorf("sandbox limits: data %q, processes %q; want RLIMIT_DATA 256 MiB and RLIMIT_NPROC 128", got["Max data size"], got["Max processes"])
	}
	r := moat(t, "", "run", "--log-format", "human", "--", "python3", "-c", forkMany)
	if n, err := strconv.Atoi(strings.TrimSpace(r.stdout)); r.code != 0 || err != nil || n <= 0 || n >= 128 {
		t.Errorf("300 forks under 128 pids: exit %d, started %q; want fewer than 128\n%s", r.code, r.stdout, r.stderr)
	}
	// Per sandbox, not per uid: while one sandbox holds its 128, another
	// of the same uid still forks its own.
	holder := exec.Command(moatBin(t), "run", "--", "python3", "-c", forkMany+"\nimport sys; sys.stdout.flush(); sys.stdin.read()")
	in, err := holder.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	held, _ := bufio.NewReader(out).ReadString('\n')
	other := moat(t, "", "run", "--", "python3", "-c", forkMany)
	in.Close()
	holder.Wait()
	n1, _ := strconv.Atoi(strings.TrimSpace(held))
	if n2, _ := strconv.Atoi(strings.TrimSpace(other.stdout)); n1 <= 0 || n1 >= 128 || n2 < 100 || n2 >= 128 {
		t.Errorf("two sandboxes of one uid at once started %q and %q, want each close to 128 on its own", held, other.stdout)
	}
	const want = "moat run: warning: limits without a cgroup here: memory 256M as RLIMIT_DATA per process, pids 128 as RLIMIT_NPROC, cpu 1 not enforced"
	if !strings.Contains(r.stderr, want) {
		t.Errorf("stderr %q, want the line %q", r.stderr, want)
	}
	if r := moat(t, "", "run", "--", "python3", "-c", "b = bytearray(600 << 20); print(len(b))"); r.code != 1 || !strings.Contains(r.stderr, "MemoryError") {
		t.Errorf("600 MiB under 256 MiB: exit %d, stdout %q, stderr %q; want a MemoryError", r.code, r.stdout, r.stderr)
	}
	// moat doctor says the same, per limit.
	var rep doctorReport
	if err := json.Unmarshal([]byte(moat(t, "", "doctor", "--json").stdout), &rep); err != nil {
		t.Fatal(err)
	}
	var states []string
	for _, p := range rep.Policies {
		if p.Name == "default" {
			for _, l := range p.Limits {
				states = append(states, l.String())
			}
		}
	}
	if got := strings.Join(states, ", "); got != "memory 256M as RLIMIT_DATA per process, pids 128 as RLIMIT_NPROC, cpu 1 not enforced" {
		t.Errorf("doctor --json: the default policy's limits %q", got)
	}
	// What the built-in policies are for runs under them, the default's
	// 256 MiB for node and a Go program too.
	for _, c := range []struct {
		name string
		args []string
		out  string
	}{
		{"python", []string{"--policy", "python", "--", "python3", "-c", "import json, sqlite3; b = bytearray(200 << 20); print(json.dumps(len(b)))"}, "209715200\n"},
		{"node", []string{"--policy", "node", "--", "node", "-e", "const b = Buffer.alloc(200 << 20, 1); console.log(b.length)"}, "209715200\n"},
		{"node under default", []string{"--", "node", "-e", "console.log([1, 2, 3].map(x => x * 2).join(' '))"}, "2 4 6\n"},
		{"shell", []string{"--policy", "shell", "--", "/bin/sh", "-c", "for i in 1 2 3; do echo $i | tr 1-3 a-c; done | sort | tr -d '\\n'"}, "abc"},
		{"a Go program", []string{"--expose-argv", "--", moatBin(t), "version"}, ""},
	} {
		r := moat(t, "", append([]string{"run"}, c.args...)...)
		if r.code != 0 || (c.out != "" && r.stdout != c.out) || (c.out == "" && !strings.HasPrefix(r.stdout, "moat")) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q", c.name, r.code, r.stdout, r.stderr)
		}
	}
}

// cgroupHoldsDefault reports whether the default policy's limits are all
// held by a cgroup for this user here.
func cgroupHoldsDefault(t *testing.T) bool {
	t.Helper()
	pol, err := policies.Builtin("default")
	if err != nil {
		t.Fatal(err)
	}
	p, err := native.New(native.WithPolicy(pol), native.WithSystemdBus(userBus()))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, s := range p.Limits() {
		if s.State != executor.LimitEnforced {
			return false
		}
	}
	return true
}

// requireNprocPerUserNS skips (a failure under MOAT_REQUIRE_ALL) on a
// kernel where RLIMIT_NPROC cannot stand in for the pids limit.
func requireNprocPerUserNS(t *testing.T) {
	t.Helper()
	p, err := native.New(native.WithoutCgroups())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, s := range p.Limits() {
		if s.Name == "pids" && s.State != executor.LimitRlimit {
			testenv.Skipf(t, "RLIMIT_NPROC does not stand in for pids here: %s", s.Reason)
		}
	}
}

// procLimits parses /proc/PID/limits: "Max processes" -> "128 128".
func procLimits(s string) map[string]string {
	out := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		line := sc.Text()
		if len(line) < 26 || strings.HasPrefix(line, "Limit") {
			continue
		}
		f := strings.Fields(line[26:])
		if len(f) >= 2 {
			out[strings.TrimSpace(line[:26])] = f[0] + " " + f[1]
		}
	}
	return out
}

// rlimitText is a limit as /proc/PID/limits writes it.
func rlimitText(v uint64) string {
	if v == unix.RLIM_INFINITY {
		return "unlimited"
	}
	return fmt.Sprint(v)
}

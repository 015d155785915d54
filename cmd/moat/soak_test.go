package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/conformance/testenv"
)

// TestSoakMoatRun (issue 22): MOAT_SOAK_RUNS invocations of `moat run`
// (default 40; `make soak` runs 2,000), two at a time, with mixed outcomes
// each checked against the exit status table; then nothing may be left: no
// process of a run, no mount naming its directories, no cgroup leaf named
// after a run's pid, no workdir and no workdir marker, and no descriptor or
// goroutine more in this process. As nobody (without cgroup limits: this
// host delegates none) and as root.
func TestSoakMoatRun(t *testing.T) {
	bothIdentities(t)
	n := testenv.SoakCount(t, "MOAT_SOAK_RUNS", 40)
	root := os.Geteuid() == 0
	base := t.TempDir()
	mark := fmt.Sprintf("%d%d", os.Getpid(), time.Now().UnixNano()%1000000)
	env := append(os.Environ(), "TMPDIR="+base)
	var parents []string
	if root {
		parents = moatParents(t)
	}
	bin := moatBin(t)
	if r := moat(t, "", "run", "--", "/bin/true"); r.code != 0 { // warm-up: the store, the copy
		t.Fatalf("warm-up run: %+v", r)
	}
	before := testenv.Snapshot(t)

	type mode struct {
		name  string
		args  []string
		code  int
		limit bool // needs cgroup limits
	}
	sleep := "exec sleep 3600." + mark
	modes := []mode{
		{"ok", []string{"--", "/bin/sh", "-c", "echo $0", "N"}, 0, false},
		{"ok", []string{"--", "/bin/sh", "-c", "echo $0", "N"}, 0, false},
		{"exit", []string{"--", "/bin/sh", "-c", "exit 7"}, 7, false},
		{"ok", []string{"--", "/bin/sh", "-c", "echo $0", "N"}, 0, false},
		{"signal", []string{"--", "/bin/sh", "-c", "kill -TERM $$"}, signalStatus(syscall.SIGTERM), false},
		{"ok", []string{"--", "/bin/sh", "-c", "echo $0", "N"}, 0, false},
		{"oom", []string{"--memory", "32M", "--", "python3", "-c", "b = bytearray(1 << 30)"}, signalStatus(syscall.SIGKILL), true},
		{"ok", []string{"--", "/bin/sh", "-c", "echo $0", "N"}, 0, false},
		// dash gives up with status 2 when fork(2) fails (EAGAIN at the pids
		// limit); without the limit the loop would end and exit 3.
		{"pids", []string{"--pids", "16", "--", "/bin/sh", "-c", "i=0; while [ $i -lt 64 ]; do sleep 30 & i=$((i+1)); done 2>/dev/null; exit 3"}, 2, true},
		{"ok", []string{"--", "/bin/sh", "-c", "echo $0", "N"}, 0, false},
		{"ok", []string{"--", "/bin/sh", "-c", "echo $0", "N"}, 0, false},
		{"ok", []string{"--", "/bin/sh", "-c", "echo $0", "N"}, 0, false},
		{"exit", []string{"--", "/bin/sh", "-c", "exit 7"}, 7, false},
		{"ok", []string{"--", "/bin/sh", "-c", "echo $0", "N"}, 0, false},
		{"ok", []string{"--", "/bin/sh", "-c", "echo $0", "N"}, 0, false},
		{"ok", []string{"--", "/bin/sh", "-c", "echo $0", "N"}, 0, false},
		{"ok", []string{"--", "/bin/sh", "-c", "echo $0", "N"}, 0, false},
		{"ok", []string{"--", "/bin/sh", "-c", "echo $0", "N"}, 0, false},
		{"ok", []string{"--", "/bin/sh", "-c", "echo $0", "N"}, 0, false},
		{"timeout", []string{"--timeout", "200ms", "--", "/bin/sh", "-c", sleep}, exitTimeout, false},
	}

	var mu sync.Mutex
	counts := map[string]int{}
	var pids []int
	var failures []string
	elapsed := testenv.Spread(n, 2, func(i int) {
		m := modes[i%len(modes)]
		if m.limit && !root {
			m = modes[0]
		}
		args := append([]string{"run"}, m.args...)
		want := ""
		if m.name == "ok" {
			args[len(args)-1] = strconv.Itoa(i)
			want = strconv.Itoa(i) + "\n"
		}
		cmd := exec.Command(bin, args...)
		cmd.Env, cmd.Dir = env, base
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = waitStatus(ee)
		} else if err != nil {
			code = -1
		}
		mu.Lock()
		counts[m.name]++
		if cmd.Process != nil {
			pids = append(pids, cmd.Process.Pid)
		}
		if (code != m.code || out.String() != want) && len(failures) < 20 {
			failures = append(failures, fmt.Sprintf("run %d (%s): exit %d, stdout %q, stderr %q; want exit %d, stdout %q",
				i, m.name, code, out.String(), errb.String(), m.code, want))
		}
		mu.Unlock()
	})
	for _, f := range failures {
		t.Error(f)
	}

	testenv.CheckLeaks(t, before, base)
	if left := processesWith("3600." + mark); len(left) > 0 {
		t.Errorf("processes of the runs remain: %v", left)
	}
	if ents, _ := os.ReadDir(base); len(ents) > 0 {
		t.Errorf("%d entries left in the workdir base %s", len(ents), base)
	}
	shm := fmt.Sprintf("/dev/shm/moat-workdirs-%d", os.Geteuid())
	if ms, _ := os.ReadDir(shm); len(ms) > 0 {
		for _, m := range ms {
			if b, _ := os.ReadFile(shm + "/" + m.Name()); strings.HasPrefix(string(b), base) {
				t.Errorf("a workdir marker of a run is left: %s", b)
			}
		}
	}
	if root {
		if left := leavesOf(parents, pids); len(left) > 0 {
			t.Errorf("cgroup leaves of the runs remain: %v", left)
		}
	}
	t.Logf("soak as uid %d (cgroup limits %v): %d moat runs in %v, %.0f/s, 2 at a time; outcomes %v; leaks: %s",
		os.Geteuid(), root, n, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds(), counts,
		map[bool]string{true: "none", false: "see errors"}[!t.Failed()])
}

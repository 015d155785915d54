package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/cgroups"
	"github.com/moat-sandbox/moat/conformance/testenv"
	"golang.org/x/sys/unix"
)

// TestRunRootlessLimitsFromSystemdScope: `moat run` as an ordinary user,
// started where a login shell's processes are on a systemd host (a cgroup
// that offers no controller), with no systemd-run wrapper, enforces its
// limits through the Delegate=yes scope it gets from the user's systemd
// manager (rootlessLimits says which). Here that group is one below the
// test's own, in the user manager's tree; TestRunInLoginSession is the
// root-owned session scope itself. It needs a systemd user manager (the
// Vagrant VM's user pass) and skips plainly elsewhere.
func TestRunRootlessLimitsFromSystemdScope(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("not this layout: runs as an unprivileged user with a systemd user manager")
	}
	h, err := cgroups.Detect()
	if err != nil || h.Layout != cgroups.Unified {
		t.Skipf("not this layout: needs pure cgroup v2 (%v)", err)
	}
	if userBus() == "" {
		t.Skip("not this layout: no systemd user bus ($DBUS_SESSION_BUS_ADDRESS, $XDG_RUNTIME_DIR/bus)")
	}
	// A group below this test's own whose parent enables no controller:
	// the test runner's delegated scope cannot help what runs there.
	base := filepath.Join(h.SelfUnified, fmt.Sprintf("moat-test-nodeleg-%d", os.Getpid()))
	dir := filepath.Join(base, "h")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Skipf("not this layout: cannot make a group below this test's cgroup %s: %v", h.SelfUnified, err)
	}
	t.Cleanup(func() { unix.Rmdir(dir); unix.Rmdir(base) })
	rootlessLimits(t, func(cmd *exec.Cmd) error { return testenv.StartIn(dir, cmd) })
	if procs, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs")); len(procs) != 0 {
		t.Errorf("processes left in %s: %s", dir, procs)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		for _, e := range ents {
			if e.IsDir() {
				t.Errorf("left in %s: %s", dir, e.Name())
			}
		}
	}
}

// forkBomb forks up to 200 sleeping children and prints how many it got.
const forkBomb = "import os, time\nn = 0\ntry:\n    while n < 200:\n        if os.fork() == 0:\n            time.sleep(5)\n            os._exit(0)\n        n += 1\nexcept OSError:\n    pass\nprint(n, flush=True)\nos._exit(0)\n"

// sessionScope matches the scope logind gives a login session.
var sessionScope = regexp.MustCompile(`^session-[0-9a-z]+\.scope$`)

// TestRunInLoginSession: `moat run` as an ordinary user in a real login
// session (an ssh login: sshd and pam_systemd put its processes in a
// session-N.scope of the system manager, owned by root and delegated to
// nobody), with no wrapper of any kind. The user's manager cannot move a
// process out of a group it does not own: it has the system manager do it
// (AttachProcessesToUnit), as for podman's and crun's scopes; this is the
// test that this path works for moat's (rootlessLimits says what it
// checks). The Vagrant VM's login pass runs it over ssh; it skips plainly
// outside a session scope.
func TestRunInLoginSession(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("not this layout: runs as an ordinary user in a login session")
	}
	h, err := cgroups.Detect()
	if err != nil || h.Layout != cgroups.Unified {
		t.Skipf("not this layout: needs pure cgroup v2 (%v)", err)
	}
	if !sessionScope.MatchString(filepath.Base(h.SelfUnified)) {
		t.Skipf("not this layout: %s is not a login session's scope (vagrant-test.sh's login pass runs this over ssh)", h.SelfUnified)
	}
	if unix.Access(filepath.Join(h.SelfUnified, "cgroup.procs"), unix.W_OK) == nil {
		t.Fatalf("the session scope %s is writable by uid %d: not the undelegated case this test is for", h.SelfUnified, os.Geteuid())
	}
	if userBus() == "" {
		t.Fatal("a login session with no systemd user bus ($DBUS_SESSION_BUS_ADDRESS, $XDG_RUNTIME_DIR/bus): pam_systemd did not run")
	}
	t.Logf("in %s, bus %s", h.SelfUnified, userBus())
	rootlessLimits(t, func(cmd *exec.Cmd) error { return cmd.Start() })
	// Nothing of moat stays in the session scope: no process but this
	// test's own (and the ssh session's), no group below it.
	if ents, _ := os.ReadDir(h.SelfUnified); len(ents) != 0 {
		for _, e := range ents {
			if e.IsDir() {
				t.Errorf("left in %s: %s", h.SelfUnified, e.Name())
			}
		}
	}
}

// rootlessLimits runs moat, each process started by start with no
// wrapper, and checks that --memory (an OOM kill, reported as such: moat
// run dies of SIGKILL, moat dispatch says error code oom), --pids (a fork
// bomb stops) and --cpus are enforced through a scope moat got from the
// user's systemd manager, that two runs at once each get one, that no
// scope is left once they exit, and that moat doctor says where the limits
// come from.
func rootlessLimits(t *testing.T, start func(*exec.Cmd) error) {
	var (
		mu   sync.Mutex
		pids []int
	)
	run := func(t *testing.T, args ...string) result {
		t.Helper()
		cmd := exec.Command(moatBin(t), args...)
		cmd.Dir = os.TempDir()
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := start(cmd); err != nil {
			t.Fatalf("start moat: %v", err)
		}
		mu.Lock()
		pids = append(pids, cmd.Process.Pid)
		mu.Unlock()
		return exitResult(t, cmd.Wait(), args, &out, &errb)
	}

	t.Run("doctor", func(t *testing.T) {
		r := run(t, "doctor", "--json")
		var rep doctorReport
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
			t.Fatalf("moat doctor --json: %v\n%+v", err, r)
		}
		if rep.Cgroups.Source != string(cgroups.SourceSystemdScope) || !strings.Contains(rep.Cgroups.SourceDetail, ".scope") {
			t.Fatalf("doctor: cgroups %+v, want source systemd-scope", rep.Cgroups)
		}
	})
	t.Run("memory", func(t *testing.T) {
		r := run(t, "run", "--memory", "64M", "--", "python3", "-c", "b = bytearray(256 << 20)")
		if r.code != signalStatus(syscall.SIGKILL) || !strings.Contains(r.stderr, "killed by the kernel at its memory limit of 67108864 bytes") {
			t.Fatalf("moat run --memory 64M allocating 256 MiB: %+v; want death by SIGKILL and the OOM message", r)
		}
		r = run(t, "dispatch", "--json", "--tool", "hog", "--memory", "64M", "--", "python3", "-c", "b = bytearray(256 << 20)")
		var got struct {
			OK    bool
			Error struct{ Code, Message string }
		}
		if r.code != 1 || json.Unmarshal([]byte(r.stdout), &got) != nil || got.OK || got.Error.Code != "oom" {
			t.Fatalf("moat dispatch --memory 64M allocating 256 MiB: %+v; want exit 1 and error code oom", r)
		}
	})
	t.Run("pids", func(t *testing.T) {
		r := run(t, "run", "--pids", "16", "--", "python3", "-c", forkBomb)
		n, err := strconv.Atoi(strings.TrimSpace(r.stdout))
		if r.code != 0 || err != nil || n >= 16 {
			t.Fatalf("fork bomb under --pids 16: %+v; want it stopped below 16 children", r)
		}
	})
	t.Run("cpu", func(t *testing.T) {
		// The CPU is counted over the spin alone: python's start-up, slow
		// under the VM's TCG and throttled too, would otherwise add to it.
		spin := "import time\nc = time.process_time()\nt = time.time()\nwhile time.time() - t < 2: pass\nprint(time.process_time() - c)\n"
		r := run(t, "run", "--cpus", "0.2", "--", "python3", "-c", spin)
		cpu, err := strconv.ParseFloat(strings.TrimSpace(r.stdout), 64)
		if r.code != 0 || err != nil || cpu > 0.9 {
			t.Fatalf("2 s of spinning under --cpus 0.2: %+v (%.2f s of CPU); want at most about 0.4 s of CPU", r, cpu)
		}
	})
	t.Run("two-at-once", func(t *testing.T) {
		var wg sync.WaitGroup
		rs := make([]result, 2)
		for i := range rs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rs[i] = run(t, "run", "--memory", "64M", "--pids", "16", "--", "/bin/sh", "-c", "sleep 1; echo ok")
			}()
		}
		wg.Wait()
		for _, r := range rs {
			if r.code != 0 || r.stdout != "ok\n" {
				t.Fatalf("two runs at once: %+v", rs)
			}
		}
	})
	t.Run("no-scope-left", func(t *testing.T) {
		deadline := time.Now().Add(10 * time.Second)
		for {
			out, err := exec.Command("systemctl", "--user", "list-units", "--all", "--plain", "--no-legend", "moat-*.scope").CombinedOutput()
			if err != nil {
				t.Fatalf("systemctl --user list-units: %v: %s", err, out)
			}
			var left []string
			for _, line := range strings.Split(string(out), "\n") {
				for _, pid := range pids {
					if strings.HasPrefix(strings.TrimSpace(line), "moat-"+strconv.Itoa(pid)+"-") {
						left = append(left, line)
					}
				}
			}
			if len(left) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("scopes left 10 s after their moat exited: %v", left)
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
}

// TestRunGivesBackADelegatedGroup: moat run started alone in a delegated
// group (a service's or a scope's own) moves itself into a leaf there and
// turns controllers on to enforce its limits; when it exits the group is as
// it was (no controller on, nothing below, a process can be started in it
// again), so a second moat run in the reused group works as the first did.
// It needs a systemd user manager (the Vagrant VM's user pass) and skips
// plainly elsewhere.
func TestRunGivesBackADelegatedGroup(t *testing.T) {
	if testenv.InDelegatedScope(t) {
		return
	}
	group := testenv.DelegatedGroup(t)
	for _, run := range []string{"first", "second"} {
		args := []string{"run", "--pids", "16", "--memory", "64M", "--", "python3", "-c", forkBomb}
		cmd := exec.Command(moatBin(t), args...)
		cmd.Dir = os.TempDir()
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := testenv.StartIn(group, cmd); err != nil {
			t.Fatalf("start the %s moat run in %s: %v", run, group, err)
		}
		r := exitResult(t, cmd.Wait(), args, &out, &errb)
		n, err := strconv.Atoi(strings.TrimSpace(r.stdout))
		if r.code != 0 || err != nil || n >= 16 {
			t.Fatalf("the %s moat run in %s, a fork bomb under --pids 16: %+v; want it stopped below 16 children", run, group, r)
		}
		testenv.CheckGivenBack(t, group)
	}
}

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/cgroups"
	"golang.org/x/sys/unix"
)

// TestRunRootlessLimitsFromSystemdScope: `moat run` as an ordinary user,
// started where a login shell's processes are on a systemd host (a cgroup
// that offers no controller), with no systemd-run wrapper, enforces
// --memory (an OOM kill, reported as such: executor code oom, exit 137),
// --pids (a fork bomb stops) and --cpus through the Delegate=yes scope it
// gets from the user's systemd manager; two runs at once each get one; no
// scope is left once they exit; moat doctor says where the limits come
// from. It needs a systemd user manager (the Vagrant VM's user pass) and
// skips plainly elsewhere.
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
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
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
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
		if err := cmd.Start(); err != nil {
			t.Fatalf("start moat in %s: %v", dir, err)
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
		if r.code != 128+int(syscall.SIGKILL) || !strings.Contains(r.stderr, "killed by the kernel at its memory limit of 67108864 bytes") {
			t.Fatalf("moat run --memory 64M allocating 256 MiB: %+v; want 137 and the OOM message", r)
		}
	})
	t.Run("pids", func(t *testing.T) {
		bomb := "import os, time\nn = 0\ntry:\n    while n < 200:\n        if os.fork() == 0:\n            time.sleep(5)\n            os._exit(0)\n        n += 1\nexcept OSError:\n    pass\nprint(n, flush=True)\nos._exit(0)\n"
		r := run(t, "run", "--pids", "16", "--", "python3", "-c", bomb)
		n, err := strconv.Atoi(strings.TrimSpace(r.stdout))
		if r.code != 0 || err != nil || n >= 16 {
			t.Fatalf("fork bomb under --pids 16: %+v; want it stopped below 16 children", r)
		}
	})
	t.Run("cpu", func(t *testing.T) {
		spin := "import time\nt = time.time()\nwhile time.time() - t < 2: pass\nprint(time.process_time())\n"
		r := run(t, "run", "--cpus", "0.2", "--", "python3", "-c", spin)
		cpu, err := strconv.ParseFloat(strings.TrimSpace(r.stdout), 64)
		if r.code != 0 || err != nil || cpu > 0.9 {
			t.Fatalf("2 s of spinning under --cpus 0.2: %+v; want at most about 0.4 s of CPU", r)
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
	})
}

package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/conformance/testenv"
)

// startMoat starts moat with args and returns once the tool printed its
// first line ("up"), with the rest of stdout still to read.
func startMoat(t *testing.T, args ...string) (*exec.Cmd, *bufio.Reader, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(moatBin(t), args...)
	cmd.Dir = os.TempDir()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(out)
	line, err := r.ReadString('\n')
	if err != nil || line != "up\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("the tool did not come up: %q %v; stderr %s", line, err, errb.String())
	}
	return cmd, r, &errb
}

func exitCode(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if ee, ok := err.(*exec.ExitError); ok {
			return waitStatus(ee)
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(15 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("moat did not end within 15s (the policy timeout is 30s)")
		return -1
	}
}

// TestRunSignalsAsOutside: a signal sent to `moat run` reaches the tool as
// it would reach the tool run directly: one without a handler ends at once,
// and moat run with it, by the same signal; one with a handler gets it and
// ends as it chooses.
func TestRunSignalsAsOutside(t *testing.T) {
	bothIdentities(t)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT} {
		t.Run("no handler "+sig.String(), func(t *testing.T) {
			cmd, _, errb := startMoat(t, "run", "--", "/bin/sh", "-c", "echo up; exec sleep 100")
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			if code := exitCode(t, cmd); code != signalStatus(sig) {
				t.Fatalf("moat run ended with status %d after %v, want death by that signal (%d); stderr %s", code, sig, signalStatus(sig), errb)
			}
		})
	}
	t.Run("handler", func(t *testing.T) {
		cmd, r, errb := startMoat(t, "run", "--", "/bin/sh", "-c", `trap 'echo got TERM; exit 5' TERM; echo up; while :; do sleep 0.05; done`)
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		rest, _ := r.ReadString(0)
		if code := exitCode(t, cmd); code != 5 || rest != "got TERM\n" {
			t.Fatalf("moat run exited %d with %q, want the tool's handler to run and exit 5; stderr %s", code, rest, errb)
		}
	})
}

// escapee is a tool that tries to outlive its sandbox: it clears its own
// parent-death signal (which, as pid 1, was all that tied the sandbox to
// its launcher before moat had an init of its own), and a grandchild in a
// session of its own does the same and sleeps under a marker argument;
// then the tool says up and waits.
const escapee = `import ctypes, os, sys, time
marker = sys.argv[1]
ctypes.CDLL(None).prctl(1, 0, 0, 0, 0)  # PR_SET_PDEATHSIG, 0
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        ctypes.CDLL(None).prctl(1, 0, 0, 0, 0)  # PR_SET_PDEATHSIG, 0
        os.execv("/bin/sleep", ["sleep", marker])
    os._exit(0)
time.sleep(0.2)
print("up", flush=True)
time.sleep(1000)
`

// processesWith lists the host pids whose command line holds marker.
func processesWith(marker string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte(marker)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestRunDiesWithItsLauncher: when `moat run` is SIGKILLed, as an outer
// executor does after its grace, nothing of the sandbox survives, not even
// a double-forked grandchild in its own session that cleared its
// parent-death signal; with and without a cgroup.
func TestRunDiesWithItsLauncher(t *testing.T) {
	bothIdentities(t)
	variants := [][]string{{"run", "--policy", "python"}}
	if os.Geteuid() == 0 && !testenv.ReRun() {
		variants = append(variants, []string{"run", "--policy", "python", "--memory", "256M"})
	}
	for i, v := range variants {
		t.Run(strings.Join(v[1:], " "), func(t *testing.T) {
			marker := fmt.Sprintf("%d.%d%d", 4000+i, os.Getpid(), time.Now().UnixNano()%1000)
			cmd, _, errb := startMoat(t, append(v, "--", "python3", "-c", escapee, marker)...)
			if len(processesWith(marker)) == 0 {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("the escapee is not running; stderr %s", errb)
			}
			if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			cmd.Wait()
			start := time.Now()
			for len(processesWith(marker)) > 0 {
				if time.Since(start) > 10*time.Second {
					for _, pid := range processesWith(marker) {
						syscall.Kill(pid, syscall.SIGKILL)
					}
					t.Fatalf("the escapee outlived the killed moat run by 10s")
				}
				time.Sleep(10 * time.Millisecond)
			}
			t.Logf("the escapee was gone %v after the launcher's SIGKILL", time.Since(start))
		})
	}
}

package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The subreaper harness stands for an engine's shim (containerd's runc shim,
// conmon): a copy of the test binary that makes itself a child subreaper
// (PR_SET_CHILD_SUBREAPER), runs one runtime command, and then reaps every
// descendant that is reparented to it, as the shim does, printing each
// status: the test then checks that the pid the runtime gave is among them
// with the container's (or the exec'd process's) status.

const (
	subreaperVar = "MOAT_RT_SUBREAPER"      // set: the binary is the harness
	subreaperKil = "MOAT_RT_SUBREAPER_KILL" // a duration: SIGKILL the command after it
)

// reaped is one line of the harness's output: the command's own end
// (Cmd), then each descendant it reaped.
type reaped struct {
	Cmd    bool `json:"cmd,omitempty"`
	Pid    int  `json:"pid"`
	Code   int  `json:"code"`   // exit status, or -1 when a signal killed it
	Signal int  `json:"signal"` // the signal that killed it
}

// subreaperMain is the harness: argv is the command.
func subreaperMain() int {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "harness:", err)
		return 2
	}
	cmd := exec.Command(os.Args[1], os.Args[2:]...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "harness:", err)
		return 2
	}
	if d, err := time.ParseDuration(os.Getenv(subreaperKil)); err == nil {
		time.AfterFunc(d, func() { cmd.Process.Kill() })
	}
	err := cmd.Wait()
	out := json.NewEncoder(os.Stdout)
	first := reaped{Cmd: true, Pid: cmd.Process.Pid}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		ws := ee.Sys().(syscall.WaitStatus)
		first.Code, first.Signal = ws.ExitStatus(), int(ws.Signal())
		if !ws.Signaled() {
			first.Signal = 0
		}
	}
	out.Encode(first)
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0 // ECHILD: nothing of the command is left
		}
		r := reaped{Pid: pid, Code: ws.ExitStatus()}
		if ws.Signaled() {
			r.Code, r.Signal = -1, int(ws.Signal())
		}
		out.Encode(r)
	}
}

// harness is a running subreaper harness.
type harness struct {
	t     *testing.T
	cmd   *exec.Cmd
	lines chan reaped
	done  chan struct{}
	seen  []reaped
}

// startHarness runs args (the runtime binary and its arguments) under a
// subreaper harness; kill, if not zero, SIGKILLs the command after it.
func startHarness(t *testing.T, kill time.Duration, args ...string) *harness {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c := exec.Command(self, args...)
	c.Env = append(os.Environ(), subreaperVar+"=1")
	if kill > 0 {
		c.Env = append(c.Env, subreaperKil+"="+kill.String())
	}
	c.Stderr = os.Stderr
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, cmd: c, lines: make(chan reaped, 64), done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var r reaped
			if json.Unmarshal(sc.Bytes(), &r) == nil {
				h.lines <- r
			}
		}
		io.Copy(io.Discard, out)
		c.Wait()
		close(h.lines)
		close(h.done)
	}()
	t.Cleanup(func() {
		select {
		case <-h.done:
		case <-time.After(30 * time.Second):
			c.Process.Kill()
			<-h.done
		}
	})
	return h
}

// command waits for the command's own end.
func (h *harness) command() reaped {
	h.t.Helper()
	r := h.next(func(r reaped) bool { return r.Cmd })
	if r == nil {
		h.t.Fatal("the harness's command did not end")
	}
	return *r
}

// reap waits for the harness to reap pid and returns its status.
func (h *harness) reap(pid int) reaped {
	h.t.Helper()
	r := h.next(func(r reaped) bool { return !r.Cmd && r.Pid == pid })
	if r == nil {
		h.t.Fatalf("the subreaper never reaped pid %d (it reaped %+v)", pid, h.seen)
	}
	return *r
}

func (h *harness) next(match func(reaped) bool) *reaped {
	for _, r := range h.seen {
		if match(r) {
			return &r
		}
	}
	deadline := time.After(30 * time.Second)
	for {
		select {
		case r, ok := <-h.lines:
			if !ok {
				return nil
			}
			h.seen = append(h.seen, r)
			if match(r) {
				return &r
			}
		case <-deadline:
			return nil
		}
	}
}

// finished waits for the harness to have reaped everything (ECHILD) and
// says whether it did in time.
func (h *harness) finished(limit time.Duration) bool {
	select {
	case <-h.done:
		return true
	case <-time.After(limit):
		return false
	}
}

// readPid reads a pid file.
func readPid(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(string(b))
	if err != nil {
		t.Fatalf("pid file %q: %v", b, err)
	}
	return pid
}

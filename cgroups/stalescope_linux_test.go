package cgroups

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"
)

// deadScopeChildVar marks the re-run of TestStopDeadScopes that plays a
// moat process with a sandbox running in its scope; its value is the bus.
const deadScopeChildVar = "MOAT_CGROUPS_TEST_DEAD_SCOPE_CHILD"

// TestStopDeadScopes: the scope of a moat that was killed while its sandbox
// ran is stopped by the next moat, and the sandbox's process ends; the scope
// of a moat that still runs is not touched, nor are units that only look
// like moat's (a name in a similar pattern, or moat's name with another
// description: any program of the user may name a unit so); once that
// second moat is killed too, its scope goes the same way. It needs a systemd
// user manager (the Vagrant VM's user pass) and skips plainly elsewhere.
func TestStopDeadScopes(t *testing.T) {
	if bus := os.Getenv(deadScopeChildVar); bus != "" {
		deadScopeChild(t, bus)
		return
	}
	bus := requireUserManager(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := dialUserBus(ctx, bus)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	log := slog.New(slog.DiscardHandler)

	a, b := startScopedMoat(t, bus), startScopedMoat(t, bus)
	a.kill(t)
	// Units another program of the user made, each holding a process of
	// ours, with an owner that is gone.
	gone := owner{pid: a.owner.pid, start: a.owner.start + 1}
	forged := []struct{ name, desc string }{
		{fmt.Sprintf("moat-%d-%d-x.scope", gone.pid, gone.start), scopeDescription(gone.pid)},
		{fmt.Sprintf("moat-0%d-%d.scope", gone.pid, gone.start), scopeDescription(gone.pid)},
		{fmt.Sprintf("moat-%d-%d.scope", gone.pid, gone.start), "a unit of another program"},
	}
	var held []*exec.Cmd
	for _, f := range forged {
		cmd := exec.Command("sleep", "120")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		held = append(held, cmd)
		// Killed at the end, it empties its unit, which systemd then drops.
		t.Cleanup(func() {
			cmd.Process.Kill()
			cmd.Wait()
		})
		props := []sd.Property{sd.PropDescription(f.desc), sd.PropPids(uint32(cmd.Process.Pid)),
			{Name: "CollectMode", Value: dbus.MakeVariant("inactive-or-failed")}}
		done := make(chan string, 1)
		if _, err := conn.StartTransientUnitContext(ctx, f.name, "fail", props, done); err != nil {
			t.Fatalf("start the unit %s: %v", f.name, err)
		}
		if r := <-done; r != "done" {
			t.Fatalf("start the unit %s: %s", f.name, r)
		}
	}

	stopDeadScopes(ctx, conn, log)

	if active(t, ctx, conn, a.scope) {
		t.Errorf("the scope %s of the killed moat %d is still active", a.scope, a.owner.pid)
	}
	a.sandboxEnds(t)
	if !active(t, ctx, conn, b.scope) || !b.sandbox.alive() {
		t.Fatalf("the scope %s of the live moat %d was touched (its sandbox alive: %v)", b.scope, b.owner.pid, b.sandbox.alive())
	}
	for i, f := range forged {
		if !active(t, ctx, conn, f.name) || held[i].Process.Signal(unix.Signal(0)) != nil {
			t.Errorf("the unit %s (%q), not moat's, was stopped", f.name, f.desc)
		}
	}

	b.kill(t)
	stopDeadScopes(ctx, conn, log)
	if active(t, ctx, conn, b.scope) {
		t.Errorf("the scope %s of the moat %d, killed in turn, is still active", b.scope, b.owner.pid)
	}
	b.sandboxEnds(t)
}

// scopedMoat is a moat process in a scope of its own with a sandbox
// running below it.
type scopedMoat struct {
	cmd     *exec.Cmd
	owner   owner
	scope   string
	sandbox owner
	stderr  bytes.Buffer
}

// startScopedMoat starts a re-run of this test as a moat process that gets
// a scope from the user's systemd manager and starts a sandbox process in
// a leaf there, and waits until it says so.
func startScopedMoat(t *testing.T, bus string) *scopedMoat {
	t.Helper()
	m := &scopedMoat{cmd: exec.Command(os.Args[0], "-test.run", "^TestStopDeadScopes$", "-test.v", "-test.count=1")}
	m.cmd.Env = append(os.Environ(), deadScopeChildVar+"="+bus)
	m.cmd.Stderr = &m.stderr
	out, err := m.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.kill(t) })
	var log strings.Builder
	for sc := bufio.NewScanner(out); sc.Scan(); {
		log.WriteString(sc.Text() + "\n")
		if _, err := fmt.Sscanf(sc.Text(), "READY %s %d %d", &m.scope, &m.sandbox.pid, &m.sandbox.start); err == nil {
			go func() {
				for sc.Scan() {
				}
			}()
			if m.owner.start, err = startTime(m.cmd.Process.Pid); err != nil {
				t.Fatal(err)
			}
			m.owner.pid = m.cmd.Process.Pid
			return m
		}
	}
	m.cmd.Wait()
	t.Fatalf("the moat process gave up before its sandbox ran:\n%s%s", log.String(), m.stderr.String())
	return nil
}

// kill kills the moat process outright (SIGKILL: it cleans nothing up).
func (m *scopedMoat) kill(t *testing.T) {
	if m.cmd.ProcessState == nil {
		m.cmd.Process.Kill()
		m.cmd.Wait()
	}
}

// sandboxEnds waits for the sandbox process, an orphan reparented to this
// test process (a child subreaper, see TestMain), to end.
func (m *scopedMoat) sandboxEnds(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		pid, err := unix.Wait4(m.sandbox.pid, nil, unix.WNOHANG, nil)
		if pid == m.sandbox.pid || err == unix.ECHILD && !m.sandbox.alive() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sandbox process %d of the moat %d still runs 10 s after its scope %s was stopped (%v)", m.sandbox.pid, m.owner.pid, m.scope, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// active reports whether the user's manager has the unit active.
func active(t *testing.T, ctx context.Context, conn *sd.Conn, name string) bool {
	t.Helper()
	us, err := conn.ListUnitsByNamesContext(ctx, []string{name})
	if err != nil {
		t.Fatalf("look the unit %s up: %v", name, err)
	}
	return len(us) == 1 && us[0].ActiveState == "active"
}

// deadScopeChild is the moat process: a scope, a leaf, a sandbox in it,
// then it waits to be killed.
func deadScopeChild(t *testing.T, bus string) {
	m, err := New(WithSystemdBus(bus))
	if err != nil {
		t.Fatal(err)
	}
	if p := m.Posture(); p.Source != SourceSystemdScope {
		t.Fatalf("Source = %q (%s), want %q", p.Source, p.SourceDetail, SourceSystemdScope)
	}
	leaf, err := m.Create("sandbox", limitsOf(64<<20, 20, 0))
	if err != nil {
		t.Fatal(err)
	}
	s := startIn(t, leaf, helper(t, "sleep", "120s"))
	start, err := startTime(s.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	scope := filepath.Base(filepath.Dir(mustDetect(t).SelfUnified))
	fmt.Printf("READY %s %d %d\n", scope, s.cmd.Process.Pid, start)
	time.Sleep(2 * time.Minute) // the parent kills this process
}

// TestParseScopeNameIsExact: only startScope's exact form names an owner; a
// unit named in a similar pattern (what another program of the user could
// choose) names none, so it is never stopped as moat's.
func TestParseScopeNameIsExact(t *testing.T) {
	if o, ok := parseScopeName("moat-123-456.scope"); !ok || o != (owner{pid: 123, start: 456}) {
		t.Fatalf("moat-123-456.scope = %+v, %v", o, ok)
	}
	for _, name := range []string{
		"moat-123-456-x.scope", "moat-0123-456.scope", "moat-123-0456.scope", "moat-+123-456.scope",
		"moat-123-+456.scope", "moat--1-456.scope", "moat-0-456.scope", "moat-123.scope", "moat-123-456.service",
		"xmoat-123-456.scope", "moat-123-456.scope.scope", "moat-123-18446744073709551616.scope",
	} {
		if o, ok := parseScopeName(name); ok {
			t.Errorf("%s parsed as moat's scope of %+v", name, o)
		}
	}
}

package main

import (
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// TestRuncWording: the errors engines parse carry runc's words (see
// wording.go): containerd's runc shim reads a kill's "container not
// running" as a process already finished and "does not exist" as no such
// container, ignores a delete's "does not exist", and retries
// StopPodSandbox on anything else; CRI-O reads "container not running" as
// not found. kill --all of a stopped container succeeds, as runc's does.
func TestRuncWording(t *testing.T) {
	root := t.TempDir()
	b, _ := bundle(t, "/bin/true")
	if _, errs, code := rt(t, root, "run", "--detach", "--bundle", b, "stopped"); code != 0 {
		t.Fatalf("run: exit %d: %s", code, errs)
	}
	waitStatus(t, root, "stopped", specs.StateStopped)
	sleeping, _ := bundle(t, "/bin/sleep", "100")
	if _, errs, code := rt(t, root, "run", "--detach", "--bundle", sleeping, "running"); code != 0 {
		t.Fatalf("run: exit %d: %s", code, errs)
	}
	defer rt(t, root, "delete", "--force", "running")
	waitStatus(t, root, "running", specs.StateRunning)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"kill", "missing", "KILL"}, 1, "does not exist"},
		{[]string{"kill", "stopped", "KILL"}, 1, "container not running"},
		{[]string{"kill", "--all", "stopped", "KILL"}, 0, ""},
		{[]string{"delete", "missing"}, 1, "does not exist"},
		{[]string{"delete", "--force", "missing"}, 0, ""},
		{[]string{"delete", "running"}, 1, "cannot delete container running that is not stopped: running"},
		{[]string{"state", "missing"}, 1, "does not exist"},
		{[]string{"start", "missing"}, 1, "does not exist"},
		{[]string{"start", "stopped"}, 1, "cannot start a container that has stopped"},
		{[]string{"start", "running"}, 1, "cannot start an already running container"},
		{[]string{"exec", "missing", "/bin/true"}, 1, "does not exist"},
		{[]string{"exec", "stopped", "/bin/true"}, 1, "cannot exec in a stopped container"},
		{[]string{"create", "--bundle", b, "running"}, 1, "container with given ID already exists"},
	} {
		_, errs, code := rt(t, root, c.args...)
		if code != c.code || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", c.args, code, errs, c.code, c.want)
		}
	}
	if _, errs, code := rt(t, root, "delete", "stopped"); code != 0 {
		t.Fatalf("delete: exit %d: %s", code, errs)
	}
}

package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// inScopeVar marks the re-run of a test that InDelegatedScope started.
const inScopeVar = "MOAT_TEST_IN_DELEGATED_SCOPE"

// InDelegatedScope re-runs the current test alone in a fresh transient scope
// of the user's systemd manager with Delegate=yes (`systemd-run --user
// --scope -p Delegate=yes`) and fails t if that run fails. Like RunAsUser it
// returns true in the original process, which then returns, and false in the
// re-run, where the test body goes on. Where there is no such manager (root,
// no systemd-run, no user bus, not pure cgroup v2) the test skips as "not
// this layout": only the Vagrant VM's user pass has one.
func InDelegatedScope(t *testing.T) bool {
	t.Helper()
	if os.Getenv(inScopeVar) != "" {
		return false
	}
	if os.Geteuid() == 0 {
		t.Skip("not this layout: runs as an unprivileged user with a systemd user manager")
	}
	if _, err := exec.LookPath("systemd-run"); err != nil {
		t.Skip("not this layout: no systemd-run")
	}
	if fi, err := os.Stat(filepath.Join(os.Getenv("XDG_RUNTIME_DIR"), "bus")); os.Getenv("XDG_RUNTIME_DIR") == "" || err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Skip("not this layout: no systemd user bus at $XDG_RUNTIME_DIR/bus")
	}
	var st unix.Statfs_t
	if unix.Statfs("/sys/fs/cgroup", &st) != nil || st.Type != unix.CGROUP2_SUPER_MAGIC {
		t.Skip("not this layout: /sys/fs/cgroup is not a pure cgroup v2 mount")
	}
	cmd := exec.Command("systemd-run", "--user", "--scope", "-p", "Delegate=yes", "--quiet", "--",
		os.Args[0], "-test.run="+runPattern(t.Name()), "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), inScopeVar+"=1")
	out, err := cmd.CombinedOutput()
	t.Logf("re-run in a Delegate=yes scope:\n%s", out)
	if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()+" (") {
		t.Fatalf("the re-run in a Delegate=yes scope did not pass: %v", err)
	}
	return true
}

// DelegatedGroup, in InDelegatedScope's re-run, makes a group below the
// scope that is delegated the way a service's or a scope's own group is:
// writable by this user, its parent offering memory, pids and cpu to it,
// and no process in it. To turn those on in the scope (which must then hold
// no process: the no-internal-process rule, cgroup-v2.rst) this process
// first moves into a leaf "runner" of the scope. The group is removed at the
// end.
func DelegatedGroup(t *testing.T) string {
	t.Helper()
	if os.Getenv(inScopeVar) == "" {
		t.Fatal("DelegatedGroup outside InDelegatedScope's re-run")
	}
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	rel, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "0::")
	if !ok {
		t.Fatalf("/proc/self/cgroup is not a cgroup2-only one: %q", b)
	}
	scope := filepath.Join("/sys/fs/cgroup", rel)
	runner := filepath.Join(scope, "runner")
	for _, step := range []struct{ dir, file, value string }{
		{runner, "", ""},
		{runner, "cgroup.procs", strconv.Itoa(os.Getpid())},
		{scope, "cgroup.subtree_control", "+memory +pids +cpu"},
		{filepath.Join(scope, "d"), "", ""},
	} {
		if step.file == "" {
			err = os.Mkdir(step.dir, 0o755)
		} else {
			err = os.WriteFile(filepath.Join(step.dir, step.file), []byte(step.value), 0)
		}
		if err != nil {
			t.Fatalf("make a delegated group in the scope %s: %v", scope, err)
		}
	}
	group := filepath.Join(scope, "d")
	t.Cleanup(func() {
		if err := unix.Rmdir(group); err != nil {
			t.Errorf("remove %s: %v", group, err)
		}
	})
	return group
}

// CheckGivenBack fails t unless group is as the service manager that
// delegated it left it: no controller on for children, no directory below,
// and a process can be started in it.
func CheckGivenBack(t *testing.T, group string) {
	t.Helper()
	if b, err := os.ReadFile(filepath.Join(group, "cgroup.subtree_control")); err != nil || len(strings.TrimSpace(string(b))) != 0 {
		t.Fatalf("%s/cgroup.subtree_control = %q (%v), want it empty again", group, b, err)
	}
	ents, err := os.ReadDir(group)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.IsDir() {
			t.Errorf("left in %s: %s", group, e.Name())
		}
	}
	cmd := exec.Command("/bin/true")
	if err := StartIn(group, cmd); err != nil {
		t.Fatalf("start a process in %s after moat: %v", group, err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
}

// StartIn starts cmd in the cgroup2 group dir from its first instruction
// (clone3 with CLONE_INTO_CGROUP, clone(2)): as a service manager starts a
// unit's process in the unit's group.
func StartIn(dir string, cmd *exec.Cmd) error {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, fd
	return cmd.Start()
}

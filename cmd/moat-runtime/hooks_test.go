package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/conformance/testenv"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// The hooks of the runtime namespace (hooks.go): the engine's programs,
// run on the host by create, start and delete.

// recordHook is a hook (the host's /bin/sh, every command by its path:
// the hook may have no PATH) that writes, in dir, its stdin to KIND.state,
// its environment as execve gave it to KIND.env, its namespaces to
// KIND.ns, its uid to KIND.uid and the descriptors a program it runs
// inherits to KIND.fds, and appends KIND to order.
func recordHook(dir, kind string, env ...string) specs.Hook {
	script := fmt.Sprintf(`/bin/cat > %[1]s/%[2]s.state && /bin/cp /proc/$$/environ %[1]s/%[2]s.env && `+
		`for n in %[3]s; do /bin/readlink /proc/$$/ns/$n; done > %[1]s/%[2]s.ns && /usr/bin/id -u > %[1]s/%[2]s.uid && /bin/ls /proc/self/fd > %[1]s/%[2]s.fds && echo %[2]s >> %[1]s/order`,
		dir, kind, strings.Join(namespaces, " "))
	return specs.Hook{Path: "/bin/sh", Args: []string{"sh", "-c", script}, Env: env}
}

// shHook is a hook running script with the host's /bin/sh.
func shHook(script string) specs.Hook {
	return specs.Hook{Path: "/bin/sh", Args: []string{"sh", "-c", script}, Env: []string{"PATH=/usr/bin:/bin"}}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func hookSaw(t *testing.T, dir, kind string) specs.State {
	t.Helper()
	var st specs.State
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(dir, kind+".state"))), &st); err != nil {
		t.Fatalf("the %s hook's stdin: %v", kind, err)
	}
	return st
}

// TestHooksRunOnTheHost: each hook of the runtime namespace runs at its
// point of the lifecycle, in order, on the host (its namespaces are the
// runtime's, none of the container's init's), as the runtime's user, with
// the state on stdin (id, the init's pid, status, bundle, annotations)
// and exactly its env: none of the runtime's environment (a variable set
// for it here), nothing at all for a hook that gives none; and it holds
// no descriptor but its stdio (create holds the sandbox's sync socket,
// its pidfd and the handoff socket when the create hooks run).
func TestHooksRunOnTheHost(t *testing.T) { testHooksRunOnTheHost(t) }

// TestHooksRunOnTheHostAsNobody is TestHooksRunOnTheHost run by nobody.
func TestHooksRunOnTheHostAsNobody(t *testing.T) { asNobody(t, testHooksRunOnTheHost) }

func testHooksRunOnTheHost(t *testing.T) {
	root, out := t.TempDir(), t.TempDir()
	_, spec := bundle(t, "/bin/sleep", "1")
	spec.Annotations = map[string]string{"org.example.hook": "seen"}
	env := func(kind string) []string { return []string{"MOAT_HOOK=" + kind, "PATH=/nowhere"} }
	spec.Hooks = &specs.Hooks{
		Prestart:      []specs.Hook{recordHook(out, "prestart", env("prestart")...)},
		CreateRuntime: []specs.Hook{recordHook(out, "createRuntime")}, // no env at all
		Poststart:     []specs.Hook{recordHook(out, "poststart", env("poststart")...)},
		Poststop:      []specs.Hook{recordHook(out, "poststop", env("poststop")...)},
	}
	b := writeBundle(t, spec)
	t.Setenv("MOAT_LEAK", "the runtime's own environment")
	// A descriptor the engine leaked to the runtime (not close-on-exec),
	// which exec.Cmd would pass on to a hook.
	leak, err := unix.Open(os.DevNull, unix.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(leak)
	if _, errs, code := rt(t, root, "create", "--bundle", b, "h1"); code != 0 {
		t.Fatalf("create: exit %d: %s", code, errs)
	}
	defer rt(t, root, "delete", "--force", "h1")
	st := ociState(t, root, "h1")
	if mons := monitorsOf("h1"); len(mons) != 1 { // what TestFailedCreateHookLeavesNothing finds none of
		t.Fatalf("the container's monitors: %v", mons)
	}
	if got := readFile(t, filepath.Join(out, "order")); got != "prestart\ncreateRuntime\n" {
		t.Fatalf("after create the hooks that ran are %q", got)
	}
	host, initNS := nsOf(t, os.Getpid()), nsOf(t, st.Pid)
	for _, kind := range []string{"prestart", "createRuntime"} {
		saw := hookSaw(t, out, kind)
		if saw.ID != "h1" || saw.Pid != st.Pid || saw.Status != specs.StateCreated || saw.Bundle != b || saw.Annotations["org.example.hook"] != "seen" {
			t.Errorf("the %s hook read %+v, the container is %+v", kind, saw, st)
		}
		lines := strings.Fields(readFile(t, filepath.Join(out, kind+".ns")))
		if len(lines) != len(namespaces) {
			t.Fatalf("the %s hook's namespaces: %q", kind, lines)
		}
		for i, ns := range namespaces {
			if lines[i] != host[ns] || lines[i] == initNS[ns] {
				t.Errorf("the %s hook's %s namespace is %s: the runtime's is %s, the container's %s", kind, ns, lines[i], host[ns], initNS[ns])
			}
		}
	}
	if _, errs, code := rt(t, root, "start", "h1"); code != 0 {
		t.Fatalf("start: exit %d: %s", code, errs)
	}
	if got := readFile(t, filepath.Join(out, "order")); got != "prestart\ncreateRuntime\npoststart\n" {
		t.Fatalf("when start returned the hooks that ran are %q", got)
	}
	if saw := hookSaw(t, out, "poststart"); saw.ID != "h1" || saw.Pid != st.Pid || saw.Status != specs.StateRunning {
		t.Errorf("the poststart hook read %+v", saw)
	}
	waitStatus(t, root, "h1", specs.StateStopped)
	if got := readFile(t, filepath.Join(out, "order")); strings.Contains(got, "poststop") {
		t.Fatalf("the poststop hook ran before delete: %q", got)
	}
	if _, errs, code := rt(t, root, "delete", "h1"); code != 0 {
		t.Fatalf("delete: exit %d: %s", code, errs)
	}
	if got := readFile(t, filepath.Join(out, "order")); got != "prestart\ncreateRuntime\npoststart\npoststop\n" {
		t.Fatalf("when delete returned the hooks that ran are %q", got)
	}
	if _, err := os.Stat(filepath.Join(root, "h1")); err == nil {
		t.Error("the state directory is still there after delete")
	}
	if saw := hookSaw(t, out, "poststop"); saw.ID != "h1" || saw.Status != specs.StateStopped || saw.Bundle != b {
		t.Errorf("the poststop hook read %+v", saw)
	}
	uid := strconv.Itoa(os.Geteuid()) + "\n"
	for _, kind := range []string{"prestart", "createRuntime", "poststart", "poststop"} {
		var want []string
		if kind != "createRuntime" {
			want = env(kind)
		}
		got := strings.Split(strings.TrimSuffix(readFile(t, filepath.Join(out, kind+".env")), "\x00"), "\x00")
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("the %s hook's environment is %q, want exactly %q", kind, got, want)
		}
		// ls lists its own directory's too.
		if got := readFile(t, filepath.Join(out, kind+".fds")); got != "0\n1\n2\n3\n" {
			t.Errorf("the %s hook's ls holds descriptors %q, want its stdio and its directory alone", kind, got)
		}
		if got := readFile(t, filepath.Join(out, kind+".uid")); got != uid {
			t.Errorf("the %s hook ran as uid %q, the runtime's is %q", kind, got, uid)
		}
	}
}

// TestFailedCreateHookLeavesNothing: a prestart or createRuntime hook that
// fails (a non-zero exit, its timeout, a path that does not exist) fails
// create with an error naming the kind, index and path; the hooks after it
// do not run, the poststop hooks do (the lifecycle goes on at the
// container's destruction), and nothing of the container is left: no
// state directory, no cgroup leaf, no init, no monitor, and a hook killed
// at its timeout takes what it started with it.
func TestFailedCreateHookLeavesNothing(t *testing.T) {
	testenv.RequireRoot(t) // the bundle's pids limit makes a cgroup leaf
	cases := []struct {
		name  string
		hooks func(out string) *specs.Hooks
		want  []string
	}{
		{"exit", func(out string) *specs.Hooks {
			return &specs.Hooks{Prestart: []specs.Hook{recordHook(out, "prestart"), shHook("echo no network for you >&2; exit 3")},
				CreateRuntime: []specs.Hook{recordHook(out, "createRuntime")}}
		}, []string{"prestart hook #1 (/bin/sh)", "exit status 3", "no network for you"}},
		{"timeout", func(out string) *specs.Hooks {
			slow := shHook(fmt.Sprintf("echo $$ > %[1]s/hook.pid; sleep 30 & echo $! > %[1]s/child.pid; wait", out))
			slow.Timeout = new(1)
			return &specs.Hooks{Prestart: []specs.Hook{recordHook(out, "prestart")}, CreateRuntime: []specs.Hook{slow, recordHook(out, "createRuntime")}}
		}, []string{"createRuntime hook #0 (/bin/sh)", "killed at its timeout of 1 s"}},
		{"missing", func(out string) *specs.Hooks {
			return &specs.Hooks{Prestart: []specs.Hook{recordHook(out, "prestart"), {Path: "/nonexistent/moat-hook"}},
				CreateRuntime: []specs.Hook{recordHook(out, "createRuntime")}}
		}, []string{"prestart hook #1 (/nonexistent/moat-hook)", "no such file or directory"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root, out := t.TempDir(), t.TempDir()
			_, spec := bundle(t, "/bin/sleep", "100")
			limit := int64(64)
			spec.Linux.Resources = &specs.LinuxResources{Pids: &specs.LinuxPids{Limit: &limit}}
			spec.Hooks = c.hooks(out)
			spec.Hooks.Poststop = []specs.Hook{recordHook(out, "poststop")}
			b := writeBundle(t, spec)
			id := fmt.Sprintf("hf%d-%s", os.Getpid(), c.name)
			t0 := time.Now()
			_, errs, code := rt(t, root, "create", "--bundle", b, id)
			took := time.Since(t0)
			if code == 0 {
				rt(t, root, "delete", "--force", id)
				t.Fatal("create succeeded with a failing hook")
			}
			if !contains2(errs, c.want...) {
				t.Errorf("create: exit %d: %s, want %q", code, errs, c.want)
			}
			if took > 15*time.Second {
				t.Errorf("create took %v", took)
			}
			if got := readFile(t, filepath.Join(out, "order")); got != "prestart\npoststop\n" {
				t.Errorf("the hooks that ran are %q, want the first prestart, then poststop", got)
			}
			if saw := hookSaw(t, out, "poststop"); saw.ID != id || saw.Status != specs.StateStopped {
				t.Errorf("the poststop hook read %+v", saw)
			}
			init := hookSaw(t, out, "prestart").Pid
			if init <= 0 || !gone(init, 5*time.Second) {
				t.Errorf("the container's init %d outlived its failed create", init)
			}
			for _, f := range []string{"hook.pid", "child.pid"} {
				if b, err := os.ReadFile(filepath.Join(out, f)); err == nil {
					if pid, _ := strconv.Atoi(strings.TrimSpace(string(b))); pid <= 0 || !gone(pid, 5*time.Second) {
						t.Errorf("%s %q outlived its hook's timeout", f, b)
					}
				} else if c.name == "timeout" {
					t.Errorf("the slow hook did not start: %v", err)
				}
			}
			if entries, _ := os.ReadDir(root); len(entries) != 0 {
				t.Errorf("a failed create left state: %v", entries)
			}
			if leaves := leavesOf(id); len(leaves) > 0 {
				t.Errorf("a failed create left cgroup leaves %v", leaves)
			}
			if mons := monitorsOf(id); len(mons) > 0 {
				t.Errorf("a failed create left its monitor, pids %v", mons)
			}
			if _, errs, code := rt(t, root, "state", id); code == 0 || !strings.Contains(errs, "does not exist") {
				t.Errorf("state after a failed create: exit %d: %s", code, errs)
			}
		})
	}
}

// monitorsOf lists the pids of container id's monitors (their command
// line ends "__monitor ID").
func monitorsOf(id string) []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.HasSuffix(string(b), "\x00"+monitorCommand+"\x00"+id+"\x00") {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestFailedPoststartOrPoststop: a poststart hook that fails fails start,
// naming it, the hooks after it do not run, and the container is killed
// (stopped, for delete: runtime-spec 1.1 and later); a poststop hook that
// fails is a warning, the hooks after it still run and delete succeeds.
func TestFailedPoststartOrPoststop(t *testing.T) {
	root, out := t.TempDir(), t.TempDir()
	_, spec := bundle(t, "/bin/sleep", "100")
	spec.Hooks = &specs.Hooks{
		Poststart: []specs.Hook{shHook("echo engine says no >&2; exit 4"), recordHook(out, "poststart")},
		Poststop:  []specs.Hook{shHook("exit 5"), recordHook(out, "poststop")},
	}
	b := writeBundle(t, spec)
	if _, errs, code := rt(t, root, "create", "--bundle", b, "h2"); code != 0 {
		t.Fatalf("create: exit %d: %s", code, errs)
	}
	defer rt(t, root, "delete", "--force", "h2")
	st := ociState(t, root, "h2")
	_, errs, code := rt(t, root, "start", "h2")
	if code == 0 || !contains2(errs, "poststart hook #0 (/bin/sh)", "exit status 4", "engine says no", "killed") {
		t.Fatalf("start with a failing poststart hook: exit %d: %s", code, errs)
	}
	if !gone(st.Pid, 5*time.Second) {
		t.Fatal("the container's init outlived its failed poststart hook")
	}
	if got := ociState(t, root, "h2"); got.Status != specs.StateStopped {
		t.Fatalf("after a failed poststart hook the container is %s", got.Status)
	}
	if _, err := os.Stat(filepath.Join(out, "order")); err == nil {
		t.Fatalf("a hook ran after the failed poststart hook: %s", readFile(t, filepath.Join(out, "order")))
	}
	_, errs, code = rt(t, root, "delete", "h2")
	if code != 0 || !contains2(errs, "warning", "poststop hook #0 (/bin/sh)", "exit status 5") {
		t.Fatalf("delete with a failing poststop hook: exit %d: %s", code, errs)
	}
	if got := readFile(t, filepath.Join(out, "order")); got != "poststop\n" {
		t.Fatalf("after the failed poststop hook the hooks that ran are %q", got)
	}
	if _, err := os.Stat(filepath.Join(root, "h2")); err == nil {
		t.Error("the state directory is still there after delete")
	}
}

// TestHooksOfRun: run is create, start and, at the container's end,
// delete: every hook runs, the poststop hook once the state is gone.
func TestHooksOfRun(t *testing.T) {
	root, out := t.TempDir(), t.TempDir()
	_, spec := bundle(t, "/bin/true")
	spec.Hooks = &specs.Hooks{
		CreateRuntime: []specs.Hook{recordHook(out, "createRuntime")},
		Poststart:     []specs.Hook{recordHook(out, "poststart")},
		Poststop:      []specs.Hook{shHook(fmt.Sprintf("test -e %s/r1 || echo poststop >> %s/order", root, out))},
	}
	b := writeBundle(t, spec)
	if _, errs, code := rt(t, root, "run", "--bundle", b, "r1"); code != 0 {
		t.Fatalf("run: exit %d: %s", code, errs)
	}
	if got := readFile(t, filepath.Join(out, "order")); got != "createRuntime\npoststart\npoststop\n" {
		t.Fatalf("the hooks of run that ran are %q", got)
	}
}

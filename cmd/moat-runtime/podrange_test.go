package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/conformance/testenv"
	"github.com/moat-sandbox/moat/nsexec"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// shmTool builds testdata/shm static into a 0755 directory of its own.
func shmTool(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		testenv.Skipf(t, "the shm tool is built from source and needs the go command")
	}
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	bin := filepath.Join(dir, "shm")
	build := exec.Command(goBin, "build", "-o", bin, "./testdata/shm")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the shm tool: %v\n%s", err, out)
	}
	return bin
}

// execOut runs argv in container id and returns its output, failing the
// test on a non-zero exit.
func execOut(t *testing.T, root, id string, argv ...string) string {
	t.Helper()
	out, errs, code := rt(t, root, append([]string{"exec", id}, argv...)...)
	if code != 0 {
		t.Fatalf("exec %v in %s: exit %d: %s%s", argv, id, code, out, errs)
	}
	return out
}

// TestPodIsOneIDRange (issue 29, item 3): a container that joins the ipc
// and uts namespaces of another moat container (a pod's pause container)
// is mapped onto the pause container's id range, so uid 0 is one user in
// the pod: the uid maps are the same, and a SysV shared memory segment of
// mode 0600 that one container's root made is usable by the other's, both
// ways (with a range each, the app's root is a stranger to the pause's
// segment), and it is in the pause container's user namespace. With the
// pause container deleted while the app runs, the range stays the app's:
// a new unrelated container gets another. A container joining the ipc namespace of a process that is no moat
// container keeps a range of its own.
func TestPodIsOneIDRange(t *testing.T) {
	testenv.RequireRoot(t)
	if !nsexec.IsHostRoot() {
		testenv.Skipf(t, "needs root of the initial user namespace, where moat allocates ranges")
	}
	tool := shmTool(t)
	root := t.TempDir()
	withTool := func(spec *specs.Spec) *specs.Spec {
		spec.Mounts = append(spec.Mounts, specs.Mount{Destination: "/shm", Type: "bind", Source: tool, Options: []string{"rbind", "ro"}})
		return spec
	}
	pause := running(t, root, "pause", withTool(sleeper(t)))
	app := withTool(sleeper(t))
	for i := range app.Linux.Namespaces {
		switch n := &app.Linux.Namespaces[i]; n.Type {
		case specs.IPCNamespace:
			n.Path = fmt.Sprintf("/proc/%d/ns/ipc", pause)
		case specs.UTSNamespace:
			n.Path = fmt.Sprintf("/proc/%d/ns/uts", pause)
		}
	}
	app.Hostname = ""
	running(t, root, "app", app)

	podMap := execOut(t, root, "pause", "cat", "/proc/self/uid_map")
	if got := execOut(t, root, "app", "cat", "/proc/self/uid_map"); got != podMap {
		t.Fatalf("the app's uid map %q, the pause's %q: want one range for the pod", got, podMap)
	}
	if got := execOut(t, root, "app", "cat", "/proc/self/gid_map"); got != execOut(t, root, "pause", "cat", "/proc/self/gid_map") {
		t.Fatalf("the app's gid map %q differs from the pause's", got)
	}
	if f := strings.Fields(podMap); len(f) != 3 || f[0] != "0" || f[1] == "0" || f[2] != "65536" {
		t.Fatalf("the pod's uid map %q, want 0 onto a block of 65536 that is not host root", podMap)
	}
	// One user namespace too (item 2), where the build can join one; a
	// build without cgo keeps one per container on the pod's range.
	podUser, appUser := execOut(t, root, "pause", "readlink", "/proc/self/ns/user"), execOut(t, root, "app", "readlink", "/proc/self/ns/user")
	if joined := appUser == podUser; joined != nsexec.UserJoinSupported() {
		t.Fatalf("the app's user namespace %q, the pause's %q: joined %v, want %v (a build with cgo joins)", appUser, podUser, joined, nsexec.UserJoinSupported())
	}
	// 0600 segments: the pause's root makes one the app's root uses, and
	// the other way round.
	if got := execOut(t, root, "pause", "/shm", "create", "4242"); got != "\x00\x00\x00\x00\n" {
		t.Fatalf("the pause's new segment reads %q", got)
	}
	if out, errs, code := rt(t, root, "exec", "app", "/shm", "use", "4242"); code != 0 || out != "made\n" {
		t.Fatalf("the app's root on the pause's 0600 segment: exit %d, %q %s; want it read and written", code, out, errs)
	}
	execOut(t, root, "app", "/shm", "create", "4343")
	if out, errs, code := rt(t, root, "exec", "pause", "/shm", "use", "4343"); code != 0 || out != "made\n" {
		t.Fatalf("the pause's root on the app's 0600 segment: exit %d, %q %s", code, out, errs)
	}

	if _, errs, code := rt(t, root, "delete", "--force", "pause"); code != 0 {
		t.Fatalf("delete the pause container: exit %d: %s", code, errs)
	}
	if got := execOut(t, root, "app", "cat", "/proc/self/uid_map"); got != podMap {
		t.Fatalf("after the pause was deleted the app maps %q, want the pod's %q still", got, podMap)
	}
	running(t, root, "other", sleeper(t))
	if got := execOut(t, root, "other", "cat", "/proc/self/uid_map"); got == podMap {
		t.Fatalf("a new container got the pod's range %q while the pod's app still runs", got)
	}

	// Namespaces of two moat containers (two pods) are refused: the
	// container could be only one of theirs.
	appPid := waitStatus(t, root, "app", specs.StateRunning).Pid
	otherPid := waitStatus(t, root, "other", specs.StateRunning).Pid
	both := sleeper(t)
	both.Hostname = ""
	both.Linux.Namespaces[2].Path = fmt.Sprintf("/proc/%d/ns/ipc", appPid)
	both.Linux.Namespaces[3].Path = fmt.Sprintf("/proc/%d/ns/uts", otherPid)
	if _, errs, code := rt(t, root, "run", "--detach", "--bundle", writeBundle(t, both), "both"); code == 0 || !strings.Contains(errs, "two moat containers") {
		rt(t, root, "delete", "--force", "both")
		t.Fatalf("a config joining two pods' namespaces: exit %d: %s", code, errs)
	}

	// A namespace of no moat container: the container keeps its own range.
	ipc := exec.Command("unshare", "--user", "--map-root-user", "--ipc", "sleep", "100")
	if err := ipc.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { ipc.Process.Kill(); ipc.Wait() }()
	waitNS(t, ipc.Process.Pid, "ipc")
	stranger := sleeper(t)
	stranger.Linux.Namespaces[2].Path = fmt.Sprintf("/proc/%d/ns/ipc", ipc.Process.Pid)
	running(t, root, "stranger", stranger)
	if got := execOut(t, root, "stranger", "cat", "/proc/self/uid_map"); got == podMap || got == execOut(t, root, "other", "cat", "/proc/self/uid_map") {
		t.Fatalf("a container joining a namespace of no moat container maps %q, want a range of its own", got)
	}
}

// waitNS waits until process pid has left this process's namespace of
// type name (unshare has run).
func waitNS(t *testing.T, pid int, name string) {
	t.Helper()
	own, _ := os.Readlink("/proc/self/ns/" + name)
	for i := 0; ; i++ {
		if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, name)); l != "" && l != own {
			return
		}
		if i > 500 {
			t.Fatalf("unshare --%s did not start", name)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A pod whose pause container has maps of its own (a config's
// uidMappings) holds no range of moat's: a container joining it without
// maps gets a block of its own, and one with its own maps keeps them as
// given (the engine chose them; hostUsers: false pods come so).
func TestPodOfOwnMapsKeepsThem(t *testing.T) {
	testenv.RequireRoot(t)
	if !nsexec.IsHostRoot() {
		testenv.Skipf(t, "needs root of the initial user namespace, where moat allocates ranges")
	}
	root := t.TempDir()
	own := []specs.LinuxIDMapping{{ContainerID: 0, HostID: 300000, Size: 65536}}
	pause := sleeper(t)
	pause.Linux.UIDMappings, pause.Linux.GIDMappings = own, own
	pause.Linux.Namespaces = append(pause.Linux.Namespaces, specs.LinuxNamespace{Type: specs.UserNamespace})
	pid := running(t, root, "pause", pause)
	join := func(spec *specs.Spec) *specs.Spec {
		spec.Linux.Namespaces[2].Path = fmt.Sprintf("/proc/%d/ns/ipc", pid)
		return spec
	}
	running(t, root, "plain", join(sleeper(t)))
	if f := strings.Fields(execOut(t, root, "plain", "cat", "/proc/self/uid_map")); len(f) != 3 || f[1] == "300000" || f[1] == "0" || f[2] != "65536" {
		t.Fatalf("a container without maps joining a pod of its own maps maps %v, want a block of moat's", f)
	}
	mapped := join(sleeper(t))
	mapped.Linux.UIDMappings, mapped.Linux.GIDMappings = own, own
	mapped.Linux.Namespaces = append(mapped.Linux.Namespaces, specs.LinuxNamespace{Type: specs.UserNamespace})
	running(t, root, "mapped", mapped)
	if f := strings.Fields(execOut(t, root, "mapped", "cat", "/proc/self/uid_map")); len(f) != 3 || f[1] != "300000" {
		t.Fatalf("a container with maps of its own maps %v, want them as given", f)
	}
}

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/conformance/testenv"
	"github.com/moat-sandbox/moat/nsexec"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// The config freedoms of issue 29 (items 4 and 5, and D3's joins without
// the user namespace) through the runtime's command line, as engines use
// it.

// bareRoot is a root like the pause image's (upstream's is /pause alone):
// busybox and a few links, none of the mount targets an engine binds, in a
// directory of its own that the current user owns.
func bareRoot(t *testing.T) string {
	t.Helper()
	src := testRootfs(t)
	root := filepath.Join(t.TempDir(), "rootfs")
	if err := os.MkdirAll(filepath.Join(root, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(src, "bin", "busybox"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "bin", "busybox"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range busyboxCommands {
		os.Symlink("busybox", filepath.Join(root, "bin", c))
	}
	os.Chmod(filepath.Dir(root), 0o755)
	os.Chmod(root, 0o755)
	return root
}

// tree lists every path below root with its type and size, to compare a
// root before and after a run.
func tree(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		if err != nil || p == root {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		out[rel] = fmt.Sprintf("%v %d", info.Mode(), info.Size())
		return nil
	})
	return out
}

// criSpec is a bundle of root shaped as containerd's CRI makes a pod
// sandbox's (trimmed): its mounts, a read-only root, the pod's
// resolv.conf, hosts and hostname bound in.
func criSpec(t *testing.T, root string, readonly bool, args ...string) *specs.Spec {
	t.Helper()
	files := t.TempDir()
	os.Chmod(files, 0o755)
	for name, content := range map[string]string{"resolv.conf": "nameserver 10.0.0.53\n", "hosts": "127.0.0.1 localhost\n", "hostname": "pod\n"} {
		if err := os.WriteFile(filepath.Join(files, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return &specs.Spec{
		Version:  specs.Version,
		Root:     &specs.Root{Path: root, Readonly: readonly},
		Hostname: "pod",
		Process:  &specs.Process{Args: args, Env: []string{"PATH=/bin"}, Cwd: "/", NoNewPrivileges: true},
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}},
			{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
			{Destination: "/dev/shm", Type: "bind", Source: files, Options: []string{"rbind", "ro", "nosuid", "nodev", "noexec"}},
			{Destination: "/etc/resolv.conf", Type: "bind", Source: filepath.Join(files, "resolv.conf"), Options: []string{"rbind", "ro", "nosuid", "nodev", "noexec"}},
			{Destination: "/etc/hosts", Type: "bind", Source: filepath.Join(files, "hosts"), Options: []string{"rbind", "rprivate", "rw"}},
			{Destination: "/etc/hostname", Type: "bind", Source: filepath.Join(files, "hostname"), Options: []string{"rbind", "rprivate", "rw"}},
			{Destination: "/run", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=755", "tmpcopyup"}},
			{Destination: "/run/secrets/token", Type: "bind", Source: filepath.Join(files, "hostname"), Options: []string{"rbind", "ro"}},
		},
		Linux: &specs.Linux{
			Namespaces:    []specs.LinuxNamespace{{Type: "pid"}, {Type: "network"}, {Type: "ipc"}, {Type: "uts"}, {Type: "mount"}},
			MaskedPaths:   []string{"/proc/acpi", "/proc/kcore", "/sys/firmware", "/etc/hostname"},
			ReadonlyPaths: []string{"/proc/bus", "/proc/sys"},
		},
	}
}

// TestBareRootGetsItsTargets (issue 29 item 4, CRI's first blocker): a
// root without /proc, /dev, /tmp, /sys or /etc runs, read-only, with the
// engine's files bound in; moat made exactly the missing mount targets in
// it, empty, and changed nothing else.
func TestBareRootGetsItsTargets(t *testing.T) { testBareRoot(t) }

// TestBareRootGetsItsTargetsAsNobody is TestBareRootGetsItsTargets run by
// nobody, on a root of its own.
func TestBareRootGetsItsTargetsAsNobody(t *testing.T) { asNobody(t, testBareRoot) }

func testBareRoot(t *testing.T) {
	root := bareRoot(t)
	before := tree(t, root)
	spec := criSpec(t, root, true, "/bin/sh", "-c", "cat /etc/resolv.conf; touch /x 2>&1; cat /etc/hostname | wc -c; cat /run/secrets/token")
	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	if _, errs, code := rtIO(t, t.TempDir(), out, "run", "--bundle", writeBundle(t, spec), "bare1"); code != 0 {
		t.Fatalf("run on a bare root: exit %d: %s", code, errs)
	}
	got, _ := os.ReadFile(out.Name())
	if !contains2(string(got), "nameserver 10.0.0.53", "Read-only file system", "\n0\n", "pod\n") {
		t.Fatalf("inside: %q, want the bound resolv.conf, a read-only root, a masked /etc/hostname and the token below the tmpfs /run", got)
	}
	checkOnlyTargets(t, root, before)
}

// checkOnlyTargets checks that what a run made in root, beside what was
// there before, is exactly the mount targets of criSpec, each an empty
// directory or file, and that nothing that was there changed.
func checkOnlyTargets(t *testing.T, root string, before map[string]string) {
	t.Helper()
	after := tree(t, root)
	var added []string
	for p, v := range after {
		old, ok := before[p]
		switch {
		case !ok:
			added = append(added, p)
			if !strings.HasPrefix(v, "d") && !strings.HasSuffix(v, " 0") {
				t.Errorf("%s was made in the root with content: %s", p, v)
			}
		case old != v:
			t.Errorf("%s changed in the root: %s, was %s", p, v, old)
		}
	}
	for p := range before {
		if _, ok := after[p]; !ok {
			t.Errorf("%s was removed from the root", p)
		}
	}
	sort.Strings(added)
	if got, want := strings.Join(added, " "), "dev etc etc/hostname etc/hosts etc/resolv.conf proc run sys tmp"; got != want {
		t.Fatalf("made in the root: %q, want the missing mount targets alone, %q", got, want)
	}
}

// TestTargetsInARootMoatMayNotWrite: a root moat may not write (here one
// of mode 0555, for a runtime run by nobody) and that lacks a mount target
// fails create, naming the target and why, with nothing made in it.
func TestTargetsInARootMoatMayNotWrite(t *testing.T) {
	asNobody(t, func(t *testing.T) {
		root := bareRoot(t)
		os.Chmod(root, 0o555)
		t.Cleanup(func() { os.Chmod(root, 0o755) })
		before := tree(t, root)
		spec := criSpec(t, root, true, "/bin/true")
		_, errs, code := rt(t, t.TempDir(), "create", "--bundle", writeBundle(t, spec), "ro1")
		if code == 0 || !contains2(errs, "lacks the mount target /proc", "may not write the root") {
			t.Fatalf("create on a root moat may not write: exit %d: %s", code, errs)
		}
		if after := tree(t, root); len(after) != len(before) {
			t.Fatalf("something was made in the root: %v", after)
		}
	})
}

// TestWritableRoot: root.readonly false gives the engine's root read-write
// (rootless, where the image belongs to the caller, the container's root
// writes it); root.readonly true keeps it read-only.
func TestWritableRoot(t *testing.T) { asNobody(t, testWritableRoot) }

// TestWritableRootAsRoot is TestWritableRoot as root, where the root,
// host root's, is id-mapped onto the container's range (on a filesystem
// that allows it, as /tmp's here), so the container's root writes it as
// runc's does: the id-mapped copy was once made read-only whatever
// root.readonly said.
func TestWritableRootAsRoot(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireIDMappedMounts(t, t.TempDir())
	testWritableRoot(t)

	// Hostile: the writable root is still nosuid and nodev, flags the
	// container's root cannot clear even granted CAP_SYS_ADMIN and
	// CAP_MKNOD with no filter (the parent's copy has them, locked in
	// the container's mount namespace), nor make a device node there.
	spec := criSpec(t, bareRoot(t), false, "/bin/sh", "-c",
		"mount -t tmpfs none /tmp && echo granted; mount -o remount,bind,suid / 2>/dev/null && echo suid; mount -o remount,bind,dev / 2>/dev/null && echo dev; "+
			"mknod /blk b 8 0 2>/dev/null && echo mknod; touch /x && echo written")
	caps := []string{"CAP_SYS_ADMIN", "CAP_MKNOD", "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER"}
	spec.Process.Capabilities = &specs.LinuxCapabilities{Bounding: caps, Effective: caps, Permitted: caps}
	spec.Linux.Seccomp = &specs.LinuxSeccomp{DefaultAction: specs.ActAllow}
	out, _ := os.CreateTemp(t.TempDir(), "out")
	if _, errs, code := rtIO(t, t.TempDir(), out, "run", "--bundle", writeBundle(t, spec), "wcaps"); code != 0 {
		t.Fatalf("granted CAP_SYS_ADMIN: exit %d: %s", code, errs)
	}
	// "granted": CAP_SYS_ADMIN is the container's, a tmpfs of its own mounts.
	if got, _ := os.ReadFile(out.Name()); string(got) != "granted\nwritten\n" {
		t.Errorf("granted CAP_SYS_ADMIN and CAP_MKNOD, the writable root's container says %q, want only \"granted\" and \"written\"", got)
	}
}

func testWritableRoot(t *testing.T) {
	root := bareRoot(t)
	for ro, want := range map[bool]string{true: "Read-only file system", false: "written"} {
		spec := criSpec(t, root, ro, "/bin/sh", "-c", "touch /x 2>&1 && echo written; rm -f /x")
		out, _ := os.CreateTemp(t.TempDir(), "out")
		if _, errs, code := rtIO(t, t.TempDir(), out, "run", "--bundle", writeBundle(t, spec), "w"+strconv.FormatBool(ro)); code != 0 {
			t.Fatalf("root.readonly %v: exit %d: %s", ro, code, errs)
		}
		if got, _ := os.ReadFile(out.Name()); !strings.Contains(string(got), want) {
			t.Errorf("root.readonly %v: %q, want %q", ro, got, want)
		}
	}
}

// TestOOMScoreAdj (issue 29 item 5): process.oomScoreAdj is the
// container's; a value below the runtime's own is refused, naming why,
// when the runtime cannot lower a score (rootless, or, as on this host,
// root without CAP_SYS_RESOURCE); with the capability it is set.
func TestOOMScoreAdj(t *testing.T) { testOOMScoreAdj(t) }

// TestOOMScoreAdjAsNobody is TestOOMScoreAdj run by nobody.
func TestOOMScoreAdjAsNobody(t *testing.T) { asNobody(t, testOOMScoreAdj) }

func testOOMScoreAdj(t *testing.T) {
	b, spec := bundle(t, "/bin/cat", "/proc/self/oom_score_adj")
	v := 500
	spec.Process.OOMScoreAdj = &v
	b = writeBundle(t, spec)
	out, _ := os.CreateTemp(t.TempDir(), "out")
	if _, errs, code := rtIO(t, t.TempDir(), out, "run", "--bundle", b, "oom1"); code != 0 {
		t.Fatalf("oomScoreAdj 500: exit %d: %s", code, errs)
	}
	if got, _ := os.ReadFile(out.Name()); strings.TrimSpace(string(got)) != "500" {
		t.Fatalf("oomScoreAdj 500: the container's is %q", got)
	}
	own, _ := os.ReadFile("/proc/self/oom_score_adj")
	// containerd's shim raises its own score by one and asks its own for
	// a pod sandbox (restrict_oom_score_adj): below the runtime's current
	// score, but not below the least it may set, so no capability is
	// needed for it.
	ownN, _ := strconv.Atoi(strings.TrimSpace(string(own)))
	if err := os.WriteFile("/proc/self/oom_score_adj", []byte(strconv.Itoa(ownN+1)), 0); err != nil {
		t.Fatal(err)
	}
	spec.Process.OOMScoreAdj = &ownN
	out, _ = os.CreateTemp(t.TempDir(), "out")
	_, errs, code := rtIO(t, t.TempDir(), out, "run", "--bundle", writeBundle(t, spec), "oom3")
	os.WriteFile("/proc/self/oom_score_adj", own, 0)
	if got, _ := os.ReadFile(out.Name()); code != 0 || strings.TrimSpace(string(got)) != strconv.Itoa(ownN) {
		t.Fatalf("oomScoreAdj %d from a runtime at %d: exit %d, %q: %s", ownN, ownN+1, code, got, errs)
	}
	low := -998
	spec.Process.OOMScoreAdj = &low
	out, _ = os.CreateTemp(t.TempDir(), "out")
	_, errs, code = rtIO(t, t.TempDir(), out, "run", "--bundle", writeBundle(t, spec), "oom2")
	if capSysResource() {
		if got, _ := os.ReadFile(out.Name()); code != 0 || strings.TrimSpace(string(got)) != "-998" {
			t.Fatalf("oomScoreAdj -998 with CAP_SYS_RESOURCE: exit %d, %q: %s", code, got, errs)
		}
		return
	}
	if code == 0 || !contains2(errs, "process.oomScoreAdj", "CAP_SYS_RESOURCE", strings.TrimSpace(string(own))) {
		t.Fatalf("oomScoreAdj -998 without CAP_SYS_RESOURCE: exit %d: %s", code, errs)
	}
}

// capSysResource says whether this process may lower an oom score: root of
// the initial user namespace with CAP_SYS_RESOURCE effective.
func capSysResource() bool {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapEff:\t"); ok {
			n, _ := strconv.ParseUint(v, 16, 64)
			return os.Geteuid() == 0 && n&(1<<24) != 0
		}
	}
	return false
}

// TestRuntimeSysctls: the namespaced sysctls of a config are the
// container's (its own ipc and network namespaces); one that is not
// namespaced is refused naming it.
func TestRuntimeSysctls(t *testing.T) { testRuntimeSysctls(t) }

// TestRuntimeSysctlsAsNobody is TestRuntimeSysctls run by nobody.
func TestRuntimeSysctlsAsNobody(t *testing.T) { asNobody(t, testRuntimeSysctls) }

func testRuntimeSysctls(t *testing.T) {
	_, spec := bundle(t, "/bin/cat", "/proc/sys/kernel/shm_rmid_forced", "/proc/sys/fs/mqueue/msg_max", "/proc/sys/net/ipv4/ping_group_range")
	spec.Linux.Sysctl = map[string]string{"kernel.shm_rmid_forced": "1", "fs.mqueue.msg_max": "100", "net.ipv4.ping_group_range": "0 0"}
	out, _ := os.CreateTemp(t.TempDir(), "out")
	if _, errs, code := rtIO(t, t.TempDir(), out, "run", "--bundle", writeBundle(t, spec), "sc1"); code != 0 {
		t.Fatalf("sysctls: exit %d: %s", code, errs)
	}
	if got, _ := os.ReadFile(out.Name()); strings.Join(strings.Fields(string(got)), " ") != "1 100 0 0" {
		t.Fatalf("inside: %q, want 1, 100 and 0 0", got)
	}
	spec.Linux.Sysctl = map[string]string{"kernel.panic": "1"}
	if _, errs, code := rt(t, t.TempDir(), "run", "--bundle", writeBundle(t, spec), "sc2"); code == 0 || !contains2(errs, "linux.sysctl.kernel.panic", "not a namespaced sysctl") {
		t.Fatalf("kernel.panic: exit %d: %s", code, errs)
	}
}

// initOf is the pid of a container's sandbox init: the pid state reports,
// or, while that is the monitor's (in the host's namespaces), the
// monitor's child.
func initOf(t *testing.T, pid int) int {
	t.Helper()
	self, _ := os.Readlink("/proc/self/ns/pid")
	if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid)); l != self {
		return pid
	}
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		for _, c := range strings.Fields(string(b)) {
			if n, _ := strconv.Atoi(c); n > 0 {
				return n
			}
		}
	}
	t.Fatalf("no sandbox init under %d", pid)
	return 0
}

// TestPodJoin (D3): a container whose config names another container's
// ipc, uts, pid and network namespaces joins them (a pod: net, ipc, uts
// shared; pid for shareProcessNamespace), and that container's user
// namespace too where the build can join one (cgo; podrange.go), a user
// namespace of its own otherwise; a config that names the host's is
// refused.
func TestPodJoin(t *testing.T) {
	testenv.RequireRoot(t) // joining needs CAP_SYS_ADMIN in the runtime's own user namespace
	root := t.TempDir()
	_, spec := bundle(t, "/bin/sleep", "100")
	spec.Hostname = "pod1"
	if _, errs, code := rt(t, root, "run", "--detach", "--bundle", writeBundle(t, spec), "pause"); code != 0 {
		t.Fatalf("the pod's sandbox: exit %d: %s", code, errs)
	}
	defer rt(t, root, "delete", "--force", "pause")
	init := initOf(t, waitStatus(t, root, "pause", specs.StateRunning).Pid)
	ns := func(name string) string { return fmt.Sprintf("/proc/%d/ns/%s", init, name) }
	_, app := bundle(t, "/bin/sh", "-c", "hostname; for n in ipc uts pid net user; do readlink /proc/self/ns/$n; done; cat /proc/1/cmdline; echo; cat /proc/[0-9]*/cmdline | tr '\\0' ' ' | grep -c '/bin/sleep 100'")
	app.Hostname = ""
	for i := range app.Linux.Namespaces {
		switch n := &app.Linux.Namespaces[i]; n.Type {
		case specs.IPCNamespace:
			n.Path = ns("ipc")
		case specs.UTSNamespace:
			n.Path = ns("uts")
		case specs.PIDNamespace:
			n.Path = ns("pid")
		case specs.NetworkNamespace:
			n.Path = ns("net")
		}
	}
	out, _ := os.CreateTemp(t.TempDir(), "out")
	if _, errs, code := rtIO(t, root, out, "run", "--bundle", writeBundle(t, app), "app"); code != 0 {
		t.Fatalf("the pod's container: exit %d: %s", code, errs)
	}
	got, _ := os.ReadFile(out.Name())
	f := strings.Fields(string(got))
	if len(f) < 7 || f[0] != "pod1" {
		t.Fatalf("inside: %q, want the pod's hostname", got)
	}
	for i, name := range []string{"ipc", "uts", "pid", "net"} {
		if want, _ := os.Readlink(ns(name)); f[1+i] != want {
			t.Errorf("%s: %s, want the pod's %s", name, f[1+i], want)
		}
	}
	if pod, _ := os.Readlink(ns("user")); (f[5] == pod) != nsexec.UserJoinSupported() {
		t.Errorf("user namespace %s, the pod's %s: want the pod's where the build joins one (cgo: %v)", f[5], pod, nsexec.UserJoinSupported())
	}
	if len(f) != 8 || strings.TrimRight(f[6], "\x00") != "moat-sandbox-init" || f[7] != "1" {
		t.Errorf("in the shared pid namespace: %q, want the pod's init as pid 1 and its sleep", f[6:])
	}
	// The host's: the runtime's own ipc namespace, this test's.
	app.Linux.Namespaces[2].Path = fmt.Sprintf("/proc/%d/ns/ipc", os.Getpid())
	if _, errs, code := rt(t, root, "run", "--bundle", writeBundle(t, app), "host"); code == 0 || !strings.Contains(errs, "is the host's ipc namespace") {
		t.Fatalf("a config naming the host's ipc namespace: exit %d: %s", code, errs)
	}
}

// TestJoinedNetSysctls: the net.* sysctls of a config that joins the
// engine's network namespace (which the sandbox holds no capability over)
// are set there by the runtime, and the host's stay as they were.
func TestJoinedNetSysctls(t *testing.T) {
	testenv.RequireRoot(t)
	cmd := exec.Command("unshare", "--net", "sleep", "100")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	own, _ := os.Readlink("/proc/self/ns/net")
	netns := fmt.Sprintf("/proc/%d/ns/net", cmd.Process.Pid)
	for i := 0; ; i++ {
		if l, _ := os.Readlink(netns); l != "" && l != own {
			break
		}
		if i > 500 {
			t.Fatal("unshare --net did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	hostBefore, _ := os.ReadFile("/proc/sys/net/ipv4/ip_unprivileged_port_start")
	_, spec := bundle(t, "/bin/cat", "/proc/sys/net/ipv4/ip_unprivileged_port_start")
	spec.Linux.Namespaces[1].Path = netns
	spec.Linux.Sysctl = map[string]string{"net.ipv4.ip_unprivileged_port_start": "999"}
	out, _ := os.CreateTemp(t.TempDir(), "out")
	if _, errs, code := rtIO(t, t.TempDir(), out, "run", "--bundle", writeBundle(t, spec), "ns1"); code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if got, _ := os.ReadFile(out.Name()); strings.TrimSpace(string(got)) != "999" {
		t.Fatalf("inside: %q, want 999", got)
	}
	if after, _ := os.ReadFile("/proc/sys/net/ipv4/ip_unprivileged_port_start"); string(after) != string(hostBefore) {
		t.Fatalf("the host's sysctl changed: %q, was %q", after, hostBefore)
	}
	// Hostile: a config naming the host's network namespace with a net
	// sysctl must not have the runtime write the host's sysctl on its way
	// to refusing the join.
	spec.Linux.Namespaces[1].Path = fmt.Sprintf("/proc/%d/ns/net", os.Getpid())
	if _, errs, code := rt(t, t.TempDir(), "run", "--bundle", writeBundle(t, spec), "ns2"); code == 0 || !strings.Contains(errs, "is the host's net namespace") {
		t.Fatalf("the host's network namespace with a sysctl: exit %d: %s", code, errs)
	}
	if after, _ := os.ReadFile("/proc/sys/net/ipv4/ip_unprivileged_port_start"); string(after) != string(hostBefore) {
		t.Fatalf("the host's sysctl was written: %q, was %q", after, hostBefore)
	}
}

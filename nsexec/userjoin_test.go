//go:build linux

package nsexec

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func init() {
	helpers["userancestor"] = helperUserAncestor
}

// podMember is a sandbox of a pod whose root may change the hostname: uid
// 0 with CAP_SYS_ADMIN, on the pod's range.
func podMember(t *testing.T, script string) *Config {
	cfg := shell(t, script)
	cfg.UID, cfg.GID, cfg.ExactIDs = 0, 0, true
	admin := uint64(1) << unix.CAP_SYS_ADMIN
	cfg.Caps = &Capabilities{Bounding: admin, Effective: admin, Permitted: admin}
	return cfg
}

// TestJoinPodUserNamespace: a sandbox given the pod sandbox's user
// namespace, with its uts namespace and its range, is in that user
// namespace, and its root is the pod's root: it may sethostname in the
// shared uts namespace, which, in a user namespace of its own on the
// same range, it may not (EPERM: the uts namespace belongs to the pod's).
// It may mount an mqueue of the pod's ipc namespace and a sysfs of its
// network namespace, which its own user namespace may not. The
// namespaces it gets new (mount, ipc, net) belong to the pod's user
// namespace (NS_GET_USERNS), and its maps are the pod's.
func TestJoinPodUserNamespace(t *testing.T) {
	rootOnly(t)
	space := rangeSpace(t, 1)
	cfg := shell(t, "exec sleep 1000")
	cfg.Hostname = "podhost"
	pod, err := Start(context.Background(), cfg, Stdio{}, space)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pod.Signal(syscall.SIGKILL); pod.Wait() })
	pid := strconv.Itoa(pod.Pid())
	open := func(ns string) *os.File {
		f, err := os.Open("/proc/" + pid + "/ns/" + ns)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	lease, err := pod.ShareLease()
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Close()
	if !UserJoinSupported() {
		// Without cgo, the other half of the promise: the join is refused,
		// typed, before anything runs, never a sandbox in a user namespace
		// of its own instead.
		_, err := run(t, podMember(t, "true"), space, WithSharedRange(lease), WithJoin(open("user")))
		setupErr(t, err, StepJoin, unix.EOPNOTSUPP)
		t.Logf("this build has no cgo: the join was refused as it should be (%v)", err)
		return
	}
	script := "readlink /proc/self/ns/user; hostname joined 2>&1 && echo set; hostname"
	// Before: a user namespace of its own on the pod's range.
	r := mustRun(t, podMember(t, script), space, WithSharedRange(lease), WithJoin(open("uts")))
	if f := strings.Split(strings.TrimSpace(r.stdout), "\n"); len(f) < 3 || f[0] == nsIno(t, pid, "user") ||
		strings.Contains(r.stdout, "\nset\n") || f[len(f)-1] != "podhost" {
		t.Fatalf("in a user namespace of its own: %q; want another user namespace than the pod's and sethostname refused", r.stdout)
	}
	// Joined: the pod's user namespace.
	r = mustRun(t, podMember(t, script), space, WithSharedRange(lease), WithJoin(open("uts")), WithJoin(open("user")))
	if f := strings.Fields(r.stdout); len(f) != 3 || f[0] != nsIno(t, pid, "user") || f[1] != "set" || f[2] != "joined" {
		t.Fatalf("in the pod's user namespace: %q (stderr %q); want %s, set, joined", r.stdout, r.stderr, nsIno(t, pid, "user"))
	}
	// An mqueue of the pod's ipc namespace and a sysfs of its network
	// namespace are the member's to mount once it is in the pod's user
	// namespace, which owns them; in one of its own they are refused.
	kernfs := podMember(t, "grep -c -E ' /dev/mqueue mqueue | /sys sysfs ' /proc/self/mounts")
	kernfs.Mqueue, kernfs.Sysfs = true, true
	var ce *ConfigError
	if _, err := run(t, kernfs, space, WithSharedRange(lease), WithJoin(open("ipc")), WithJoin(open("net"))); !errors.As(err, &ce) {
		t.Fatalf("an mqueue and a sysfs of the pod's namespaces, in a user namespace of its own: %v, want a ConfigError", err)
	}
	if r := mustRun(t, kernfs, space, WithSharedRange(lease), WithJoin(open("ipc")), WithJoin(open("net")), WithJoin(open("user"))); strings.TrimSpace(r.stdout) != "2" {
		t.Errorf("the pod's mqueue and sysfs in the pod's user namespace: %q, want both mounted", r.stdout)
	}
	// The member's new namespaces are the pod's user namespace's.
	member := podMember(t, "exec sleep 1000")
	p, err := Start(context.Background(), member, Stdio{}, space, WithSharedRange(lease), WithJoin(open("user")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Signal(syscall.SIGKILL); p.Wait() })
	podUser := nsIno(t, pid, "user")
	mpid := strconv.Itoa(p.Pid())
	for _, ns := range []string{"mnt", "ipc", "net", "uts"} {
		if nsIno(t, mpid, ns) == nsIno(t, pid, ns) {
			t.Errorf("the member's %s namespace is the pod's; want one of its own", ns)
		}
		if got := ownerOf(t, "/proc/"+mpid+"/ns/"+ns); got != podUser {
			t.Errorf("the member's %s namespace belongs to %s, want the pod's user namespace %s", ns, got, podUser)
		}
	}
	if nsIno(t, mpid, "user") != podUser {
		t.Errorf("the member's user namespace %s, want the pod's %s", nsIno(t, mpid, "user"), podUser)
	}
	for _, f := range []string{"uid_map", "gid_map"} {
		if a, b := mapOf(t, pod.Pid(), f), mapOf(t, p.Pid(), f); a != b {
			t.Errorf("%s: the member's %q, the pod's %q", f, b, a)
		}
	}
}

// ownerOf is the user namespace (as readlink shows it) that owns the
// namespace at path (NS_GET_USERNS).
func ownerOf(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u, err := unix.IoctlRetInt(int(f.Fd()), nsGetUserNS)
	if err != nil {
		t.Fatalf("NS_GET_USERNS %s: %v", path, err)
	}
	defer unix.Close(u)
	l, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(u))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestJoinUserNamespaceRefused (hostile): what may not be joined as a
// pod's user namespace is refused with a *SetupError of step join before
// the tool runs: the caller's own user namespace, pid 1's, an ancestor's
// (from a user namespace below it), a descriptor that is no namespace, and user namespaces whose maps include host root (uid 0 or
// gid 0 alone): those are refused once the init is in them, before it is
// let go, and the tool never runs. Without cgo every user namespace is
// refused (EOPNOTSUPP).
func TestJoinUserNamespaceRefused(t *testing.T) {
	rootOnly(t)
	try := func(f *os.File, errno error, opts ...Option) {
		t.Helper()
		r, err := run(t, podMember(t, "echo ran"), append(opts, WithJoin(f))...)
		if se := setupErr(t, err, StepJoin, errno); se.Detail == "" || strings.Contains(r.stdout, "ran") {
			t.Fatalf("%s: %v (stdout %q)", f.Name(), err, r.stdout)
		}
	}
	// The caller's own namespace is its thread's (TestJoinRefusesTheHosts
	// says why).
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	self, err := os.Open("/proc/thread-self/ns/user")
	if err != nil {
		t.Fatal(err)
	}
	defer self.Close()
	try(self, unix.EPERM)
	// pid 1's, where ptrace's rules let the caller open it (a host's
	// pid 1 outside this container's reach may not be).
	if init1, err := os.Open("/proc/1/ns/user"); err == nil {
		defer init1.Close()
		try(init1, unix.EPERM)
	} else {
		t.Logf("pid 1's user namespace: %v; not tried", err)
	}
	// An ancestor's: from a user namespace below this one, this one
	// (passed as descriptor 3; ptrace's rules keep the helper from opening
	// it by path).
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	h := exec.Command("unshare", "--user", "--map-root-user", bin)
	h.Env = append(os.Environ(), helperVar+"=userancestor")
	own, err := os.Open("/proc/thread-self/ns/user")
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	h.ExtraFiles = []*os.File{own}
	out, err := h.CombinedOutput()
	if got := strings.TrimSpace(string(out)); err != nil || got != "step=join errno=operation not permitted below=false" {
		t.Fatalf("joining an ancestor's user namespace: %v: %q, want step=join errno=operation not permitted below=false", err, got)
	}
	notNS, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	defer notNS.Close()
	try(notNS, unix.ENOTTY)
	if !UserJoinSupported() {
		u := userNSWithMaps(t, "0 100000 65536", "0 100000 65536")
		try(u, unix.EOPNOTSUPP)
		return
	}
	// Maps of host root: uid 0 (beside a range), gid 0 alone.
	for _, maps := range [][2]string{
		{"0 0 1\n1 100001 65535", "0 100000 65536"},
		{"0 100000 65536", "0 0 1\n1 100001 65535"},
	} {
		u := userNSWithMaps(t, maps[0], maps[1])
		try(u, unix.EPERM, WithIDMaps([]IDMap{{0, 100000, 65536}}, []IDMap{{0, 100000, 65536}}))
	}
	// Maps other than the planned ones.
	u := userNSWithMaps(t, "0 100000 65536", "0 100000 65536")
	try(u, unix.EPERM, WithIDMaps([]IDMap{{0, 200000, 65536}}, []IDMap{{0, 200000, 65536}}))
}

// userNSWithMaps is a user namespace with these maps, made by unshare(1)
// and held by its sleeping process until the test ends.
func userNSWithMaps(t *testing.T, uids, gids string) *os.File {
	t.Helper()
	cmd := exec.Command("unshare", "--user", "sleep", "1000")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	pid := strconv.Itoa(cmd.Process.Pid)
	own := nsIno(t, "self", "user")
	waitFor(t, func() bool { l, _ := os.Readlink("/proc/" + pid + "/ns/user"); return l != "" && l != own })
	for file, m := range map[string]string{"uid_map": uids, "gid_map": gids} {
		if err := os.WriteFile("/proc/"+pid+"/"+file, []byte(m+"\n"), 0); err != nil {
			t.Fatalf("write %s %q: %v", file, m, err)
		}
	}
	f, err := os.Open("/proc/" + pid + "/ns/user")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestJoinUserNamespaceInitFails (hostile): a join the init's constructor
// cannot complete (here the pod's user namespace allows no new mount
// namespace, so the unshare after the setns fails with ENOSPC) ends the
// init with a *SetupError of step join naming what failed, before its
// hello: never a sandbox left in the launcher's namespaces.
func TestJoinUserNamespaceInitFails(t *testing.T) {
	rootOnly(t)
	if !UserJoinSupported() {
		return // TestJoinPodUserNamespace checks the refusal without cgo
	}
	cmd := exec.Command("unshare", "--user", "--map-root-user", "/bin/sh", "-c", "echo 0 > /proc/sys/user/max_mnt_namespaces && exec sleep 1000")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	pid := strconv.Itoa(cmd.Process.Pid)
	waitFor(t, func() bool { return comm(pid) == "sleep" })
	u, err := os.Open("/proc/" + pid + "/ns/user")
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	r, err := run(t, podMember(t, "echo ran"), WithJoin(u))
	se := setupErr(t, err, StepJoin, unix.ENOSPC)
	if !strings.Contains(se.Detail, "unshare") || strings.Contains(r.stdout, "ran") {
		t.Fatalf("a join whose unshare fails: %v (stdout %q), want the init's report naming the unshare", err, r.stdout)
	}
}

// helperUserAncestor, in a user namespace below the test's, starts a
// sandbox that joins the test's (an ancestor's, descriptor 3) and prints
// what Start says.
func helperUserAncestor() error {
	f := os.NewFile(3, "ancestor")
	_, err := Start(context.Background(), &Config{Args: []string{"/bin/true"}}, Stdio{}, WithJoin(f))
	var se *SetupError
	if !errors.As(err, &se) {
		return fmt.Errorf("got %v, want a SetupError", err)
	}
	fmt.Printf("step=%v errno=%v below=%v\n", se.Step, se.Errno, !strings.Contains(se.Detail, "not below"))
	return nil
}

// TestUserNSEnvParser: the constructor takes its variable exactly as the
// launcher writes it (userJoinEnv) and nothing else: four decimal fields,
// no sign, no leading zero, no overflow, a descriptor above stdio, the
// mount namespace always new and no namespace flag but those it makes.
func TestUserNSEnvParser(t *testing.T) {
	if !UserJoinSupported() {
		return // no constructor without cgo
	}
	j := &joins{flags: unix.CLONE_NEWNET}
	v := strings.TrimPrefix(userJoinEnv(j, 7, true, []uintptr{unix.CAP_SYS_ADMIN, unix.CAP_SETUID}), userNSEnv+"=")
	got, ok := userNSParse(v)
	want := [4]uint64{7, unix.CLONE_NEWNS | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS, 1, 1<<unix.CAP_SYS_ADMIN | 1<<unix.CAP_SETUID}
	if !ok || got != want {
		t.Fatalf("%q: %v %v, want %v", v, got, ok, want)
	}
	ns := strconv.Itoa(unix.CLONE_NEWNS)
	for _, bad := range []string{
		"", "7", "7:" + ns + ":1", "7:" + ns + ":1:0:", "07:" + ns + ":1:0", "7:" + ns + ":01:0", "+7:" + ns + ":1:0",
		"-7:" + ns + ":1:0", "7:" + ns + ":2:0", "2:" + ns + ":1:0", "1048577:" + ns + ":1:0", "7:" + ns + ":1:18446744073709551616",
		"7:" + strconv.Itoa(unix.CLONE_NEWIPC) + ":1:0", "7:" + strconv.Itoa(unix.CLONE_NEWNS|unix.CLONE_NEWUSER) + ":1:0",
		"7:" + strconv.Itoa(unix.CLONE_NEWNS|unix.CLONE_NEWPID) + ":1:0", "7 :" + ns + ":1:0", "7:" + ns + ":1:0\n",
	} {
		if got, ok := userNSParse(bad); ok {
			t.Errorf("%q parsed as %v, want refused", bad, got)
		}
	}
	if got, ok := userNSParse("7:" + ns + ":0:18446744073709551615"); !ok || got[3] != 1<<64-1 {
		t.Errorf("the largest mask: %v %v", got, ok)
	}
}

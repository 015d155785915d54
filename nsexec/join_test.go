//go:build linux

package nsexec

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/conformance/testenv"
	"golang.org/x/sys/unix"
)

func init() {
	helpers["mainthreadmoved"] = helperMainThreadMoved
}

// mainNetVar names the network namespace the helper moves its main thread
// into.
const mainNetVar = "MOAT_NSEXEC_TEST_MAINNET"

// pod starts a sandbox that stands for a pod's sandbox (the pause
// container) whose namespaces other sandboxes join, running script, and
// returns it and an opener of its namespaces. It is killed when the test
// ends.
func pod(t *testing.T, script string) (*Process, func(ns string) *os.File) {
	t.Helper()
	cfg := shell(t, script)
	cfg.Hostname = "podhost"
	p, err := Start(context.Background(), cfg, Stdio{})
	if err != nil {
		t.Fatalf("start the pod sandbox: %v", err)
	}
	t.Cleanup(func() { p.Signal(unix.SIGKILL); p.Wait() })
	open := func(ns string) *os.File {
		f, err := os.Open("/proc/" + strconv.Itoa(p.Pid()) + "/ns/" + ns)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	return p, open
}

// pidJoinable reports whether this kernel makes a procfs of another pid
// namespace (procfs pidns=, Linux 6.18), which a pid join needs. Where it
// cannot, it checks the other half of the promise instead: a join of the
// pod's pid namespace is refused before anything runs, with a SetupError
// naming the missing procfs option and what to do, not a sandbox with the
// host's /proc or a half-made one. The tests of a pid join return then.
func pidJoinable(t *testing.T, open func(ns string) *os.File) bool {
	t.Helper()
	self, err := os.Open("/proc/self/ns/pid")
	if err != nil {
		t.Fatal(err)
	}
	defer self.Close()
	fsfd, err := unix.Fsopen("proc", unix.FSOPEN_CLOEXEC)
	if err != nil {
		t.Fatalf("fsopen proc: %v", err)
	}
	defer unix.Close(fsfd)
	if unix.FsconfigSetFd(fsfd, "pidns", int(self.Fd())) == nil {
		return true
	}
	_, err = run(t, shell(t, "echo ran"), WithJoin(open("pid")))
	var se *SetupError
	if !errors.As(err, &se) || se.Step != StepJoin || !strings.Contains(se.Detail, "pidns=") || !strings.Contains(se.Hint, "6.18") {
		t.Fatalf("a pid join on a kernel without procfs pidns=: %v, want a SetupError of the join step naming the procfs option and Linux 6.18", err)
	}
	t.Logf("this kernel has no procfs pidns= (Linux 6.18): the pid join was refused as it should be (%v)", err)
	return false
}

// nsIno is the inode of /proc/PID/ns/NAME, as readlink shows it.
func nsIno(t *testing.T, pid, name string) string {
	t.Helper()
	l, err := os.Readlink("/proc/" + pid + "/ns/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestJoinPodNamespaces: a sandbox given the ipc, uts and pid namespaces
// of another (a pod's container, D3) is born in them, every other
// namespace its own: it sees the pod's hostname and processes and its
// SysV objects, its init is not pid 1 there, and its user, mount and
// network namespaces are not the pod's.
func TestJoinPodNamespaces(t *testing.T) {
	testenv.RequireRoot(t) // setns needs CAP_SYS_ADMIN in the caller's own user namespace
	p, open := pod(t, "ipcmk -M 4096 >/dev/null && exec sleep 1000")
	if !pidJoinable(t, open) {
		return
	}
	pid := strconv.Itoa(p.Pid())
	// ipcmk has run once the pod's init has a child named sleep.
	waitFor(t, func() bool {
		b, _ := os.ReadFile("/proc/" + pid + "/task/" + pid + "/children")
		return len(b) > 0 && comm(strings.Fields(string(b))[0]) == "sleep"
	})
	script := "readlink /proc/self/ns/ipc /proc/self/ns/uts /proc/self/ns/pid /proc/self/ns/user /proc/self/ns/mnt /proc/self/ns/net; " +
		"hostname; echo ppid=$PPID; cat /proc/1/comm; ipcs -m | grep -c 0x"
	r := mustRun(t, shell(t, script), WithJoin(open("ipc")), WithJoin(open("uts")), WithJoin(open("pid")))
	f := strings.Fields(r.stdout)
	if len(f) != 10 {
		t.Fatalf("inside: %q", r.stdout)
	}
	for i, ns := range []string{"ipc", "uts", "pid"} {
		if want := nsIno(t, pid, ns); f[i] != want {
			t.Errorf("%s namespace %s, want the pod's %s", ns, f[i], want)
		}
	}
	for i, ns := range []string{"user", "mnt", "net"} {
		if f[3+i] == nsIno(t, pid, ns) {
			t.Errorf("%s namespace %s is the pod's, want one of its own", ns, f[3+i])
		}
	}
	if f[6] != "podhost" {
		t.Errorf("hostname %q, want the pod's podhost", f[6])
	}
	if f[7] == "ppid=1" || f[7] == "ppid=0" {
		t.Errorf("%s: the tool's parent, the init, is pid 1 of the joined pid namespace", f[7])
	}
	if want := comm(pid); f[8] != want {
		t.Errorf("pid 1 of the joined namespace is %q, want the pod's init, %q", f[8], want)
	}
	if f[9] != "1" {
		t.Errorf("%s SysV shared memory segments in the joined ipc namespace, want the pod's one", f[9])
	}
	// A hostname of its own cannot be had in a uts namespace it joined.
	cfg := shell(t, "true")
	cfg.Hostname = "mine"
	_, err := run(t, cfg, WithJoin(open("uts")))
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Field != "hostname" || !strings.Contains(ce.Reason, "podhost") {
		t.Fatalf("another hostname in the pod's uts namespace: %v, want a ConfigError naming the pod's", err)
	}
	cfg = shell(t, "true")
	cfg.Hostname = "podhost"
	mustRun(t, cfg, WithJoin(open("uts")))
}

// TestJoinRefusesTheHosts: the host's namespaces (the caller's own) are
// never joined, nor a user or mount namespace, nor a namespace of the
// host's user namespace that is not a network one (a host daemon's
// private ipc namespace), nor two of one type, nor a file that is not a
// namespace; an engine's network namespace, owned by the host's user
// namespace, is.
func TestJoinRefusesTheHosts(t *testing.T) {
	testenv.RequireRoot(t)
	try := func(f *os.File, errno error) {
		t.Helper()
		_, err := run(t, shell(t, "true"), WithJoin(f))
		if se := setupErr(t, err, StepJoin, errno); se.Path != f.Name() || se.Detail == "" {
			t.Fatalf("%s: %v", f.Name(), err)
		}
	}
	// The caller's own namespaces are its thread's: /proc/self is the main
	// thread's, which a goroutine of another test may have locked and
	// moved into a namespace of its own (then "the host's" opened here
	// was that one, and its join rightly allowed: a flake in the VM).
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for _, ns := range []string{"net", "ipc", "uts", "pid", "cgroup", "user"} {
		f, err := os.Open("/proc/thread-self/ns/" + ns)
		if err != nil {
			t.Fatal(err)
		}
		try(f, unix.EPERM)
		f.Close()
	}
	for _, ns := range []string{"mnt"} {
		f, err := os.Open("/proc/thread-self/ns/" + ns)
		if err != nil {
			t.Fatal(err)
		}
		try(f, unix.EINVAL)
		f.Close()
	}
	notNS, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	defer notNS.Close()
	try(notNS, unix.ENOTTY)
	// A namespace that root made without a user namespace of its own: the
	// network one is an engine's and may be joined, an ipc one is a host
	// process's, not a sandbox's.
	cmd := exec.Command("unshare", "--net", "--ipc", "sleep", "1000")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	// Until unshare has run, the child is in this thread's namespace
	// (forked from it), which "the host's" (/proc/self, the main thread)
	// need not be: a main thread a locked goroutine left elsewhere made
	// the wait end at once and the host's namespace be "the engine's".
	own := nsIno(t, "thread-self", "net")
	other := strconv.Itoa(cmd.Process.Pid)
	waitFor(t, func() bool { l, _ := os.Readlink("/proc/" + other + "/ns/net"); return l != "" && l != own })
	ipc, err := os.Open("/proc/" + other + "/ns/ipc")
	if err != nil {
		t.Fatal(err)
	}
	defer ipc.Close()
	try(ipc, unix.EPERM)
	net, err := os.Open("/proc/" + other + "/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	defer net.Close()
	r := mustRun(t, shell(t, "readlink /proc/self/ns/net; ip link set lo down 2>/dev/null && echo lo-down; true"), WithNetNS(net))
	if got := strings.TrimSpace(r.stdout); got != nsIno(t, other, "net") {
		t.Fatalf("inside: %q; want the joined namespace %s, and no change to it", got, nsIno(t, other, "net"))
	}
	// Two of one type, and WithNetNS given another type.
	_, err = run(t, shell(t, "true"), WithJoin(net), WithJoin(net))
	setupErr(t, err, StepJoin, unix.EINVAL)
	_, err = run(t, shell(t, "true"), WithNetNS(ipc))
	setupErr(t, err, StepJoin, unix.EINVAL)
	// What the sandbox cannot have in a network namespace it joined.
	for name, edit := range map[string]func(*Config){
		"network":                    func(c *Config) { c.Network = NetworkLoopback },
		"sysfs":                      func(c *Config) { c.Sysfs = true },
		"sysctl.net.ipv4.ip_forward": func(c *Config) { c.Sysctl = map[string]string{"net.ipv4.ip_forward": "1"} },
	} {
		cfg := shell(t, "true")
		edit(cfg)
		_, err := run(t, cfg, WithNetNS(net))
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != name {
			t.Errorf("%s with a joined network namespace: %v, want a ConfigError", name, err)
		}
	}
}

// TestJoinedPidEndsWhatItLeaves (hostile): in a joined pid namespace the
// init is not pid 1, so the kernel ends nothing when it exits. What the
// tool leaves behind, in its process group or in a session of its own, is
// ended by the init before it reports; the pod's own processes, which a
// kill(-1) would reach, live on. Both inits: a cold sandbox's Go init, and
// a prepared one's (the C tail in the static pass).
func TestJoinedPidEndsWhatItLeaves(t *testing.T) {
	testenv.RequireRoot(t)
	p, open := pod(t, "exec sleep 1000")
	if !pidJoinable(t, open) {
		return
	}
	podPid := strconv.Itoa(p.Pid())
	podNS := nsIno(t, podPid, "pid")
	// The tool leaves two: one in its group, one that left it (setsid),
	// each a child of a shell that exits at once, so both are orphans.
	// Neither holds the test's pipes, so a survivor is seen, not waited
	// for.
	script := "sh -c 'sleep 1001 </dev/null >/dev/null 2>&1 & setsid sleep 1002 </dev/null >/dev/null 2>&1 &'; sleep 0.2"
	check := func(t *testing.T, how string) {
		t.Helper()
		for _, pid := range inPidNS(t, podNS) {
			if c := cmdline(pid); c == "sleep 1001" || c == "sleep 1002" {
				t.Errorf("%s: %q (pid %s) outlived its sandbox in the pod's pid namespace", how, c, pid)
			}
		}
		if unix.Kill(p.Pid(), 0) != nil {
			t.Fatalf("%s: the pod's own init died with another sandbox", how)
		}
		if !strings.Contains(strings.Join(cmdlines(inPidNS(t, podNS)), ","), "sleep 1000") {
			t.Fatalf("%s: the pod's own process died with another sandbox", how)
		}
	}
	mustRun(t, shell(t, script), WithJoin(open("pid")))
	check(t, "cold")
	s, err := Prepare(context.Background(), &Config{Workdir: workdir(t)}, WithJoin(open("pid")))
	if err != nil {
		t.Fatal(err)
	}
	proc, err := s.Exec(context.Background(), []string{"/bin/sh", "-c", script}, []string{"PATH=/usr/bin:/bin"}, Stdio{})
	if err != nil {
		t.Fatal(err)
	}
	if e, err := proc.Wait(); err != nil || e.Code != 0 {
		t.Fatalf("prepared: %+v, %v", e, err)
	}
	check(t, "prepared")
}

// inPidNS lists the host pids of the processes in the pid namespace ns.
func inPidNS(t *testing.T, ns string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []string
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if l, _ := os.Readlink(filepath.Join("/proc", e.Name(), "ns", "pid")); l == ns {
			pids = append(pids, e.Name())
		}
	}
	return pids
}

func cmdline(pid string) string {
	b, _ := os.ReadFile("/proc/" + pid + "/cmdline")
	return strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
}

func cmdlines(pids []string) []string {
	var out []string
	for _, p := range pids {
		out = append(out, cmdline(p))
	}
	return out
}

func comm(pid string) string {
	b, _ := os.ReadFile("/proc/" + pid + "/comm")
	return strings.TrimSpace(string(b))
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestJoinAfterTheMainThreadMoved: the host's namespaces a join is checked
// against are the caller's, not those of a main thread that some goroutine
// locked and moved (own and InNamespace may land on it; podman's
// ping_group_range sysctl once had the engine's network namespace taken
// for the host's that way). The helper moves its main thread into an
// engine-style namespace and starts a sandbox in that same namespace from
// another goroutine.
func TestJoinAfterTheMainThreadMoved(t *testing.T) {
	testenv.RequireRoot(t)
	// The child is forked from this thread, and is in its namespaces
	// until unshare runs (TestJoinRefusesTheHosts says why not /proc/self).
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cmd := exec.Command("unshare", "--net", "sleep", "1000")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	own := nsIno(t, "thread-self", "net")
	other := strconv.Itoa(cmd.Process.Pid)
	waitFor(t, func() bool { l, _ := os.Readlink("/proc/" + other + "/ns/net"); return l != "" && l != own })
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	h := exec.Command(self)
	h.Env = append(os.Environ(), helperVar+"=mainthreadmoved", mainNetVar+"=/proc/"+other+"/ns/net")
	out, err := h.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != "joined "+nsIno(t, other, "net") {
		t.Fatalf("helper: %q, want the sandbox in the joined namespace", got)
	}
}

// helperMainThreadMoved moves the main thread into the network namespace
// named by mainNetVar, then joins it from a sandbox started on another
// thread, and prints the sandbox's network namespace.
func helperMainThreadMoved() error {
	runtime.LockOSThread() // the main goroutine, on the main thread since the start
	f, err := os.Open(os.Getenv(mainNetVar))
	if err != nil {
		return err
	}
	if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
		return err
	}
	self, _ := os.Readlink("/proc/self/ns/net")
	joined, _ := os.Readlink(f.Name())
	if self != joined {
		return fmt.Errorf("the helper's goroutine was not on the main thread: /proc/self/ns/net is %s", self)
	}
	done := make(chan error, 1)
	var got string
	go func() {
		r, w, err := os.Pipe()
		if err != nil {
			done <- err
			return
		}
		p, err := Start(context.Background(), &Config{Args: []string{"/bin/readlink", "/proc/self/ns/net"}}, Stdio{Stdout: w}, WithNetNS(f))
		w.Close()
		if err != nil {
			done <- err
			return
		}
		b := make([]byte, 128)
		n, _ := r.Read(b)
		got = strings.TrimSpace(string(b[:n]))
		_, err = p.Wait()
		done <- err
	}()
	if err := <-done; err != nil {
		return err
	}
	fmt.Println("joined", got)
	return nil
}

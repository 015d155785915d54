package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/ledger"
	"golang.org/x/sys/unix"
)

// Isolation is what a provider claims to isolate. Each isolation check
// needs one claim; a check whose claim is false skips and says so (that is
// not a missing host capability, so it skips even under MOAT_REQUIRE_ALL).
type Isolation struct {
	// Filesystem: host files outside the binds are invisible, the root is
	// read-only, /work is the fresh writable cwd inside the root.
	Filesystem bool
	// Network: no route out, only lo, no host loopback or abstract socket.
	Network bool
	// PIDs: no host process visible or signalable; a private hostname.
	PIDs bool
	// Privileges: no capability in any set, no_new_privs, /proc/*/exe not
	// writable, no leaked descriptor, files written not owned by host root.
	Privileges bool
	// SetID: no file the tool leaves carries a setuid or setgid bit.
	SetID bool
	// Seccomp: the policy's filter is the default allowlist (or stricter),
	// so the hostile syscall battery must fail the right way.
	Seccomp bool
	// NoProcfs: the tool has no procfs (mode no-proc), and the checks
	// assert that: the probes observe by system call what they would
	// read in /proc.
	NoProcfs bool
	// NoUserNS: the tool runs in no namespace (mode no-userns) as the
	// launcher's own uid, so what it writes is the launcher's: i8 is not
	// claimed, whatever Privileges says.
	NoUserNS bool
}

// ModeIsolation is the claim of each rung of the native provider's ladder
// (nsexec.Modes), exactly the checks it passes: full mode claims every
// one; no-proc keeps every namespace but cannot show the pid check what
// it needs (other processes are seen, and kill(-1) is only tried, through
// /proc), so it claims every check but that one. An unknown mode claims
// nothing.
func ModeIsolation(mode string) Isolation {
	all := Isolation{Filesystem: true, Network: true, PIDs: true, Privileges: true, SetID: true, Seccomp: true}
	switch mode {
	case "full":
		return all
	case "no-proc":
		all.PIDs, all.NoProcfs = false, true
		return all
	case "no-userns":
		// No pid or uts namespace: the host's processes are seen (i5),
		// and the tool's files are the launcher's (i8).
		all.PIDs, all.NoUserNS = false, true
		return all
	}
	return Isolation{}
}

// Option configures Run.
type Option func(*runConfig)

type runConfig struct {
	isolation Isolation
}

// WithIsolation declares what the provider under test isolates, turning on
// the matching isolation checks.
func WithIsolation(i Isolation) Option { return func(c *runConfig) { c.isolation = i } }

// isolationChecks run after the reference checks.
var isolationChecks = []struct {
	id, name string
	claim    func(Isolation) bool
	run      func(k *kit)
}{
	{"i1", "host files are not readable", func(i Isolation) bool { return i.Filesystem }, checkHostFiles},
	{"i2", "the root is not writable", func(i Isolation) bool { return i.Filesystem }, checkRootReadOnly},
	{"i3", "the workdir is the fresh writable cwd inside the root", func(i Isolation) bool { return i.Filesystem }, checkWork},
	{"i4", "no route out, only lo, no host loopback or abstract socket", func(i Isolation) bool { return i.Network }, checkNetwork},
	{"i5", "no host process is visible or signalable, hostname private", func(i Isolation) bool { return i.PIDs }, checkPIDs},
	{"i6", "no capabilities, no_new_privs, proc exe links not writable", func(i Isolation) bool { return i.Privileges }, checkPrivileges},
	{"i7", "no descriptor leaks into the tool", func(i Isolation) bool { return i.Privileges }, checkFDs},
	{"i8", "host root never owns what the tool writes", func(i Isolation) bool { return i.Privileges && !i.NoUserNS }, checkOwner},
	{"i9", "no file the tool leaves carries setuid or setgid bits", func(i Isolation) bool { return i.SetID }, checkSetuid},
	{"i10", "the tool's stdio is no door to a host directory", func(i Isolation) bool { return i.Filesystem }, checkStdio},
	{"i11", "the caller's directory keeps its owner, mode and entries", func(i Isolation) bool { return i.Filesystem }, checkCallerDir},
	{"h1", "every hostile syscall fails the right way", func(i Isolation) bool { return i.Seccomp }, checkAttacks},
}

// probe dispatches one probe behaviour and decodes its report.
func (k *kit) probe(cfg Config, behavior string, args map[string]any, out any) {
	k.t.Helper()
	if args == nil {
		args = map[string]any{}
	}
	args["behavior"] = behavior
	raw, _ := json.Marshal(args)
	k.decode(k.ok(k.provider(cfg), k.request(strings.ReplaceAll(behavior, "-", "_"), string(raw))), out)
}

func checkHostFiles(k *kit) {
	dir := k.t.TempDir()
	secret := filepath.Join(dir, "host-secret")
	if err := os.WriteFile(secret, []byte("s3cret"), 0o644); err != nil {
		k.t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	home, _ := os.UserHomeDir()
	paths := []string{secret, "/etc/shadow", "/root/.bash_history", filepath.Join(home, ".ssh/id_rsa")}
	var got map[string]string
	k.probe(Config{}, "probe-read", map[string]any{"paths": paths}, &got)
	for _, p := range paths {
		if got[p] == "readable" {
			k.fatalf("the host file %s is readable inside the sandbox", p)
		}
	}
}

func checkRootReadOnly(k *kit) {
	paths := []string{"/moat-probe", "/usr/moat-probe", "/etc/moat-probe", filepath.Join(filepath.Dir(k.runner), "moat-probe")}
	var got map[string]string
	k.probe(Config{}, "probe-write", map[string]any{"paths": paths}, &got)
	for _, p := range paths {
		if got[p] == "written" {
			k.fatalf("%s is writable inside the sandbox", p)
		}
	}
}

func checkWork(k *kit) {
	var got struct{ Cwd, ProcCwd, Write, ReadBack string }
	k.probe(Config{}, "probe-work", nil, &got)
	procCwd := "/work"
	if k.isolation.NoProcfs {
		procCwd = "" // and so no procfs at all
	}
	if k.isolation.NoUserNS {
		// No root of its own: the fresh workdir at its host path.
		if got.Cwd == "" || got.Cwd == "/" || got.Cwd == "/work" || got.ProcCwd != got.Cwd {
			k.fatalf("the tool's cwd is %q (/proc/self/cwd %q), want the run's workdir at its host path", got.Cwd, got.ProcCwd)
		}
	} else if got.Cwd != "/work" || got.ProcCwd != procCwd {
		k.fatalf("the tool's cwd is %q (/proc/self/cwd %q), want /work inside the root (and /proc/self/cwd %q)", got.Cwd, got.ProcCwd, procCwd)
	}
	if got.Write != "ok" || got.ReadBack != "hi" {
		k.fatalf("/work is not writable: %s (read back %q)", got.Write, got.ReadBack)
	}
}

func checkNetwork(k *kit) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		k.t.Fatal(err)
	}
	defer ln.Close()
	abstract := fmt.Sprintf("moat-conformance-%d", os.Getpid())
	al, err := net.Listen("unix", "@"+abstract)
	if err != nil {
		k.t.Fatal(err)
	}
	defer al.Close()
	var got struct {
		Interfaces                    []string
		Route4, Route6, TCP, Abstract string
	}
	k.probe(Config{}, "probe-net", map[string]any{"tcp": ln.Addr().String(), "abstract": abstract}, &got)
	if k.isolation.NoUserNS {
		// The host's interfaces, shown; what counts is that none is
		// reached (no socket but AF_UNIX, no TCP, no abstract socket).
		k.t.Logf("mode no-userns: the host's interfaces are listed (%v); none may be reached", got.Interfaces)
	} else if len(got.Interfaces) != 1 || got.Interfaces[0] != "lo" {
		k.fatalf("interfaces inside the sandbox: %v, want only lo", got.Interfaces)
	}
	for what, res := range map[string]string{"a route to 192.0.2.1": got.Route4, "a route to 2001:db8::1": got.Route6,
		"the host's loopback listener " + ln.Addr().String(): got.TCP, "the host's abstract socket @" + abstract: got.Abstract} {
		if res == "connected" {
			k.fatalf("the sandbox reached %s", what)
		}
	}
}

func checkPIDs(k *kit) {
	// A host process of the same user that kill(-1) must not reach.
	victim := exec.Command("sleep", "60")
	if err := victim.Start(); err != nil {
		k.t.Fatal(err)
	}
	defer func() { victim.Process.Kill(); victim.Wait() }()
	var got struct {
		Self     int
		Parent   int
		Pids     []map[string]string
		KillAll  string
		Hostname string
	}
	var host unix.Stat_t
	if err := unix.Stat("/proc/self/ns/pid", &host); err != nil {
		k.t.Fatal(err)
	}
	k.probe(Config{}, "probe-pids", map[string]any{"hostPidNS": host.Ino}, &got)
	// The tool is pid 1 of its own pid namespace, or the only child of an
	// init that is (moat's native sandbox): either way, nothing but the two
	// is visible, where the host has hundreds of processes.
	if got.Self != 1 && got.Parent != 1 {
		k.fatalf("the tool is pid %d with parent %d: neither pid 1 of its own pid namespace nor the child of its init", got.Self, got.Parent)
	}
	for _, p := range got.Pids {
		if p["pid"] != "1" && p["pid"] != strconv.Itoa(got.Self) {
			k.fatalf("a process other than the tool and its init is visible inside the sandbox: pid %s (%s)", p["pid"], p["comm"])
		}
		if p["pid"] == strconv.Itoa(got.Self) && !strings.HasPrefix(RunnerName, p["comm"]) {
			k.fatalf("the tool shows as %q, want %q", p["comm"], RunnerName)
		}
	}
	if err := victim.Process.Signal(syscall.Signal(0)); err != nil {
		k.fatalf("kill(-1) inside the sandbox reached a host process: %v", err)
	}
	if host, _ := os.Hostname(); got.Hostname == host {
		k.fatalf("the sandbox shares the host's hostname %q", host)
	}
}

func checkPrivileges(k *kit) {
	var got map[string]string
	k.probe(Config{}, "probe-privs", nil, &got)
	if got["NoNewPrivs"] != "1" {
		k.fatalf("NoNewPrivs = %q, want 1", got["NoNewPrivs"])
	}
	for _, set := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
		if got[set] == "0000000000000000" {
			continue
		}
		if set == "CapBnd" && k.isolation.NoUserNS && os.Geteuid() != 0 {
			// In no namespace, an unprivileged launcher cannot empty the
			// bounding set (PR_CAPBSET_DROP needs CAP_SETPCAP, which it
			// lacks: capabilities(7)). It is inert: the tool holds no
			// capability, and under no_new_privs (checked above) execve
			// grants none, setuid bits and file capabilities ignored.
			k.t.Logf("mode no-userns, launcher uid %d: CapBnd %s kept, inert under no_new_privs", os.Geteuid(), got[set])
			continue
		}
		k.fatalf("%s = %q inside the sandbox, want all zero", set, got[set])
	}
	for _, p := range []string{"/proc/self/exe", "/proc/1/exe"} {
		if got["write "+p] == "opened" {
			k.fatalf("%s is openable for writing (CVE-2019-5736)", p)
		}
	}
}

func checkFDs(k *kit) {
	// A descriptor the host holds open without close-on-exec must not
	// reach the tool (CVE-2024-21626 leaked a host directory this way).
	leak, err := os.Open(filepath.Dir(k.runner))
	if err != nil {
		k.t.Fatal(err)
	}
	defer leak.Close()
	syscall.Syscall(syscall.SYS_FCNTL, leak.Fd(), syscall.F_SETFD, 0)
	var got struct {
		Fds     map[string]string
		Cloexec map[string]bool
	}
	k.probe(Config{}, "probe-fds", nil, &got)
	for fd, target := range got.Fds {
		// execve closes every close-on-exec descriptor, so one that has
		// the flag was opened by the tool's own process after its exec:
		// the Go runtime's epoll and eventfd, and, since Go 1.25, the
		// cgroup CPU limit file it rereads for GOMAXPROCS (visible where
		// /sys is, as in a container). It cannot have been inherited.
		if fd == "0" || fd == "1" || fd == "2" || got.Cloexec[fd] {
			continue
		}
		k.fatalf("descriptor %s (%s) leaked into the tool", fd, target)
	}
}

func checkStdio(k *kit) {
	// A directory or an O_PATH descriptor as stdin, stdout or stderr would
	// reach host files through /proc/self/fd/N/ whatever the mounts are.
	var got map[string]struct{ Type, Flags, List string }
	k.probe(Config{}, "probe-stdio", nil, &got)
	for _, fd := range []string{"0", "1", "2"} {
		d, ok := got[fd]
		if !ok {
			k.fatalf("the probe did not report descriptor %s: %v", fd, got)
		}
		if d.Type == "directory" || d.Type == "symlink" || d.Type == "anonymous" || d.Flags == "O_PATH" || d.List == "ok" {
			k.fatalf("descriptor %s of the tool is a door: %+v", fd, d)
		}
	}
}

// checkCallerDir: the runner's directory is the caller's own, made visible
// read-only; the tool may change neither its owner or mode nor its entries
// (issue 13: moat never leaves a caller's directory other than it found it).
func checkCallerDir(k *kit) {
	dir := filepath.Dir(k.runner)
	var before unix.Stat_t
	if err := unix.Stat(dir, &before); err != nil {
		k.t.Fatal(err)
	}
	var got map[string]string
	k.probe(Config{}, "probe-callerdir", map[string]any{"dir": dir}, &got)
	var after unix.Stat_t
	if err := unix.Stat(dir, &after); err != nil {
		k.t.Fatal(err)
	}
	if after.Uid != before.Uid || after.Gid != before.Gid || after.Mode != before.Mode {
		// Put it back for the checks that follow, then fail.
		unix.Chown(dir, int(before.Uid), int(before.Gid))
		unix.Chmod(dir, before.Mode&0o7777)
		k.fatalf("the caller's directory %s went from %d:%d %#o to %d:%d %#o", dir,
			before.Uid, before.Gid, before.Mode&0o7777, after.Uid, after.Gid, after.Mode&0o7777)
	}
	for _, op := range []string{"chmod", "chown", "create"} {
		if got[op] == "ok" {
			k.fatalf("the tool could %s the caller's directory %s: %v", op, dir, got)
		}
	}
}

func checkOwner(k *kit) {
	l := &ownerLedger{}
	var got struct{ Write string }
	k.probe(Config{Ledger: l}, "probe-work", nil, &got)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		k.fatalf("stat the file the tool wrote: %v", l.err)
	}
	if l.uid == 0 && os.Geteuid() == 0 {
		k.fatalf("the file the tool wrote is owned by host root")
	}
	if l.uid != uint32(os.Geteuid()) && os.Geteuid() != 0 {
		k.fatalf("the file the tool wrote is owned by host uid %d, not the caller's %d", l.uid, os.Geteuid())
	}
}

// ownerLedger stats what the tool wrote while the workdir still exists
// (the outcome row comes before the workdir is removed).
type ownerLedger struct {
	mu  sync.Mutex
	uid uint32
	err error
}

func (l *ownerLedger) Record(_ context.Context, r ledger.Record) error {
	fi, err := os.Stat(filepath.Join(r.Workdir, "probe.txt"))
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.err = err
		return nil
	}
	l.uid = fi.Sys().(*syscall.Stat_t).Uid
	return nil
}

var _ executor.Ledger = (*ownerLedger)(nil)

//go:build linux

package nsexec

import (
	"context"
	"errors"
	"net"
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

// inNoUserNS runs body in a user namespace where no user namespace can be
// made (testenv.InNoUserNS), as the caller and, as root, again as nobody.
func inNoUserNS(t *testing.T, body func(t *testing.T)) {
	t.Helper()
	if testenv.InNoUserNS(t) {
		if os.Geteuid() == 0 && !testenv.ReRun() && !t.Failed() {
			testenv.RunAsUser(t, testenv.NobodyUID, testenv.NobodyGID)
		}
		return
	}
	body(t)
}

// noUserNSConfig is a no-userns sandbox of script under /bin/sh -c, with a
// fresh workdir, and true; it checks the probe put this process in that rung and,
// on a kernel whose Landlock is below the rung's minimum (the VM's ABI
// 2), that the rung is refused naming both ABIs, and returns false: that
// refusal is then what the test checks.
func noUserNSConfig(t *testing.T, args ...string) (*Config, bool) {
	t.Helper()
	if refused, why := UserNSRefused(); !refused {
		t.Fatalf("the probe makes a user namespace where max_user_namespaces is 0")
	} else if !strings.Contains(why, "max_user_namespaces") {
		t.Errorf("the refusal says %q, not the sysctl", why)
	}
	cfg := &Config{NoUserNS: true, Args: args, Env: []string{"PATH=/usr/bin:/bin", "HOME=/work"}, Workdir: workdir(t)}
	if abi := LandlockABI(); abi < NoUserNSMinABI {
		requireABIRefusal(t, cfg, abi)
		return nil, false
	}
	return cfg, true
}

// requireABIRefusal checks that cfg is refused with the *LandlockABIError
// naming the rung's minimum and this kernel's ABI, before any child.
func requireABIRefusal(t *testing.T, cfg *Config, abi int) {
	t.Helper()
	_, err := run(t, cfg)
	var le *LandlockABIError
	if !errors.As(err, &le) || le.Need != NoUserNSMinABI || le.Have != abi {
		t.Fatalf("below Landlock ABI %d (this kernel has %d): got %v, want a *LandlockABIError", NoUserNSMinABI, abi, err)
	}
	if msg := err.Error(); !strings.Contains(msg, "ABI "+strconv.Itoa(NoUserNSMinABI)) || !strings.Contains(msg, "ABI "+strconv.Itoa(abi)) || !strings.Contains(msg, string(ModeNoUserNS)) {
		t.Fatalf("the refusal names neither ABI or the mode: %v", err)
	}
}

// noUserNSAttacks is the tool of TestNoUserNSWallsOffTheHost: each attack
// a tool walled off by the rung must fail, one "name:result" line each.
// argv: the outside directory, the workdir, a TCP port on 127.0.0.1, an
// abstract unix socket's name, the pid of a process outside.
const noUserNSAttacks = `
import os, socket, subprocess, sys, fcntl, signal
out, work, port, abstract, pid = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
def attempt(name, f):
    try:
        f()
        print(name + ":ok")
    except OSError as e:
        print(name + ":" + (os.strerror(e.errno) if e.errno else str(e)).replace(" ", "_"))
def ptmx():
    fd = os.open("/dev/ptmx", os.O_RDWR | os.O_NOCTTY)
    fcntl.ioctl(fd, 0x80045430, b"0000")  # TIOCGPTN
def tcp(bind):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if bind:
        s.bind(("127.0.0.1", 0))
    else:
        s.connect(("127.0.0.1", port))
def udp():
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
def abstract_connect():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect("\0" + abstract)
def unix_connect():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(out + "/host.sock")
def dgram_pair():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    a.sendto(b"x", out + "/host.dgram")
def stream_pair():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    a.send(b"x")
    if b.recv(1) != b"x":
        raise OSError(5, "lost")
import ctypes, platform
libc = ctypes.CDLL(None, use_errno=True)
def raw(nr, *args):
    if libc.syscall(nr, *args) == -1:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
def x32():
    if platform.machine() != "x86_64":
        raise OSError(38, "not x86_64")
    raw(0x40000000 | 39)  # x32 getpid
def io_uring():
    params = ctypes.create_string_buffer(120)
    nr = {"x86_64": 425, "aarch64": 425}[platform.machine()]
    fd = libc.syscall(nr, 1, params)
    if fd < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    os.close(fd)
def keyctl():
    nr = {"x86_64": 250, "aarch64": 219}[platform.machine()]
    raw(nr, 0, ctypes.c_long(-4), 0)  # KEYCTL_GET_KEYRING_ID of the user keyring
def run_outside():
    r = subprocess.run([out + "/run.sh"], capture_output=True)
    if r.returncode != 0:
        raise OSError(13, "exit %d" % r.returncode)
attempt("read", lambda: open(out + "/secret").read())
attempt("readdir", lambda: os.listdir(out))
attempt("create", lambda: os.close(os.open(out + "/planted", os.O_CREAT | os.O_WRONLY, 0o644)))
attempt("dotdot", lambda: open(work + "/../" + os.path.basename(out) + "/secret").read())
attempt("symlink", lambda: open(work + "/link").read())
attempt("truncate", lambda: os.truncate(out + "/trunc", 0))
attempt("ioctl", ptmx)
attempt("exec", run_outside)
attempt("rename-out", lambda: os.rename(work + "/a", out + "/a"))
attempt("rename-in", lambda: os.rename(out + "/b", work + "/b"))
attempt("link-out", lambda: os.link(work + "/c", out + "/c"))
attempt("link-in", lambda: os.link(out + "/d", work + "/d"))
attempt("tcp-connect", lambda: tcp(False))
attempt("tcp-bind", lambda: tcp(True))
attempt("udp", udp)
attempt("abstract", abstract_connect)
attempt("signal", lambda: os.kill(pid, signal.SIGTERM))
attempt("unix-connect", unix_connect)
attempt("unix-dgram", dgram_pair)
attempt("stream-pair", stream_pair)
attempt("chown", lambda: os.chown(work + "/e", os.getuid(), os.getgid()))
attempt("setxattr", lambda: os.setxattr(work + "/e", "user.moat", b"1"))
attempt("setsid", os.setsid)
attempt("x32", x32)
attempt("io_uring", io_uring)
attempt("keyctl", keyctl)
attempt("chmod", lambda: os.chmod(work + "/e", 0o600))
attempt("setuid", lambda: os.setuid(os.getuid()))
`

// TestNoUserNSWallsOffTheHost: in the no-userns rung every attack of
// noUserNSAttacks is refused, and each works unsandboxed, as the same user
// (so each refusal is the rung's). The network attacks need Landlock ABI
// 4 (TCP) and 6 (abstract sockets, signals); below them they are not
// asked of the rung.
func TestNoUserNSWallsOffTheHost(t *testing.T) {
	inNoUserNS(t, func(t *testing.T) {
		py := "/usr/bin/python3" // the system's, beneath the rung's rx paths
		cfg, ok := noUserNSConfig(t, py, "-c", noUserNSAttacks)
		if !ok {
			return
		}
		if _, err := os.Stat(py); err != nil {
			testenv.Skipf(t, "no %s: %v", py, err)
		}
		base := filepath.Dir(cfg.Workdir)
		out := filepath.Join(base, "outside")
		mkfiles := func() {
			os.MkdirAll(out, 0o755)
			for _, f := range []string{"secret", "trunc", "b", "d"} {
				os.WriteFile(filepath.Join(out, f), []byte("host\n"), 0o644)
			}
			os.WriteFile(filepath.Join(out, "run.sh"), []byte("#!/bin/sh\nexit 0\n"), 0o755)
			for _, f := range []string{"a", "c", "e"} {
				os.WriteFile(filepath.Join(cfg.Workdir, f), []byte("work\n"), 0o644)
			}
			os.Symlink(filepath.Join(out, "secret"), filepath.Join(cfg.Workdir, "link"))
		}
		mkfiles()
		l := closingListener(t, "tcp", "127.0.0.1:0")
		// A pathname socket of the host, as a user's systemd manager,
		// D-Bus or ssh agent has, and a datagram one (/dev/log's kind).
		closingListener(t, "unix", filepath.Join(out, "host.sock"))
		ud, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: filepath.Join(out, "host.dgram"), Net: "unixgram"})
		if err != nil {
			t.Fatal(err)
		}
		defer ud.Close()
		name := "moat-test-nouserns-" + strconv.Itoa(os.Getpid())
		closingListener(t, "unix", "@"+name)
		sleeper := func() *exec.Cmd {
			s := exec.Command("/bin/sleep", "60")
			if err := s.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Process.Kill(); s.Wait() })
			return s
		}
		argv := func(pid int) []string {
			return []string{out, cfg.Workdir, strconv.Itoa(l.Addr().(*net.TCPAddr).Port), name, strconv.Itoa(pid)}
		}
		inSandbox := sleeper()
		cfg.Args = append(cfg.Args, argv(inSandbox.Process.Pid)...)
		r, err := run(t, cfg)
		if err != nil || r.exit.Code != 0 {
			t.Fatalf("the attacks in the rung: %v %+v\n%s\n%s", err, r.exit, r.stdout, r.stderr)
		}
		got := attackResults(t, r.stdout)
		host := sleeper()
		plain := exec.Command(py, append([]string{"-c", noUserNSAttacks}, argv(host.Process.Pid)...)...)
		plain.Dir = cfg.Workdir
		var stderr strings.Builder
		plain.Stderr = &stderr
		b, err := plain.Output()
		if err != nil {
			t.Fatalf("unsandboxed: %v\n%s\n%s", err, b, stderr.String())
		}
		free := attackResults(t, string(b))
		abi := LandlockABI()
		for _, a := range []string{"read", "readdir", "create", "dotdot", "symlink", "truncate", "ioctl", "exec",
			"rename-out", "rename-in", "link-out", "link-in", "tcp-connect", "tcp-bind", "udp", "abstract", "signal", "chmod", "setuid",
			"unix-connect", "unix-dgram"} {
			if free[a] != "ok" {
				t.Errorf("%s: unsandboxed it fails (%s), so the sandbox's refusal would prove nothing", a, free[a])
			}
			need := 0
			switch a {
			case "tcp-connect", "tcp-bind":
				need = 4
			case "abstract", "signal":
				need = 6
			}
			if abi < need {
				t.Logf("%s: %s (Landlock ABI %d has no rule for it)", a, got[a], abi)
				continue
			}
			if got[a] == "ok" || got[a] == "" {
				t.Errorf("%s: %q in the no-userns rung, want refused", a, got[a])
			}
		}
		// The rung's filter's own refusals, whatever the call does
		// unsandboxed here (x32 may be off, io_uring disabled, user
		// xattrs unsupported): the answer must be the filter's.
		for a, want := range map[string]string{"chown": "Operation_not_permitted", "setxattr": "Operation_not_permitted",
			"setsid": "Operation_not_permitted", "io_uring": "Function_not_implemented", "keyctl": "Operation_not_permitted"} {
			if got[a] != want {
				t.Errorf("%s: %q in the no-userns rung, want %q (unsandboxed: %q)", a, got[a], want, free[a])
			}
		}
		if runtime.GOARCH == "amd64" && got["x32"] != "Operation_not_permitted" {
			t.Errorf("an x32 call: %q in the no-userns rung, want the filter's EPERM (unsandboxed: %q)", got["x32"], free["x32"])
		}
		if got["stream-pair"] != "ok" {
			t.Errorf("a unix stream socketpair in the rung: %s, want ok", got["stream-pair"])
		}
		if inSandbox.ProcessState != nil {
			t.Errorf("the process outside was signalled from the sandbox")
		}
	})
}

// attackResults parses "name:result" lines.
func attackResults(t *testing.T, out string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[k] = v
		}
	}
	t.Logf("%s", out)
	return m
}

// The probe counts only the kernel's refusals: ENOSPC and EUSERS (the
// sysctl), EPERM (a sysctl, an LSM, a filter); a transient failure of the
// fork, or an exec that failed after the clone worked, drops no rung.
func TestUserNSVerdict(t *testing.T) {
	for errno, want := range map[error]bool{
		unix.ENOSPC: true, unix.EUSERS: true, unix.EPERM: true,
		unix.EAGAIN: false, unix.ENOMEM: false, unix.ENOENT: false, nil: false,
	} {
		if got, why := userNSVerdict(errno); got != want || (got && why == "") {
			t.Errorf("%v: refused %v (%q), want %v", errno, got, why, want)
		}
	}
}

// In a user namespace where max_user_namespaces is 0, HostMode is
// no-userns, and a tool runs there: its output and exit code come back,
// it starts in the workdir at its host path with HOME there, its TMPDIR
// is fresh, 0700 and removed once the run ended, and it holds no
// capability.
func TestNoUserNSRunsATool(t *testing.T) {
	inNoUserNS(t, func(t *testing.T) {
		if m, why := HostMode(); m != ModeNoUserNS || why == "" {
			t.Fatalf("HostMode = %q (%q), want %q", m, why, ModeNoUserNS)
		}
		cfg, ok := noUserNSConfig(t, "/bin/sh", "-c", `echo out; echo err >&2; pwd; echo "$HOME"; echo "$TMPDIR"; stat -c %a "$TMPDIR"; ls -A "$TMPDIR" | wc -l; echo x > "$TMPDIR/f"; grep -E '^Cap(Prm|Eff|Bnd|Amb)' /proc/self/status; exit 7`)
		if !ok {
			return
		}
		r, err := run(t, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if r.exit.Code != 7 || strings.TrimSpace(r.stderr) != "err" {
			t.Fatalf("exit %+v, stderr %q; want 7 and err\n%s", r.exit, r.stderr, r.stdout)
		}
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		if len(lines) < 6 || lines[0] != "out" || lines[1] != cfg.Workdir || lines[2] != cfg.Workdir ||
			!strings.HasPrefix(lines[3], noUserNSTmpRoot+"/moat-tmp-") || lines[4] != "700" || lines[5] != "0" {
			t.Fatalf("stdout %q: want out, the workdir twice, a fresh 0700 TMPDIR", r.stdout)
		}
		if _, err := os.Stat(lines[3]); !os.IsNotExist(err) {
			t.Errorf("TMPDIR %s is left after the run: %v", lines[3], err)
		}
		for _, l := range lines[6:] {
			f := strings.Fields(l)
			if len(f) != 2 || strings.Trim(f[1], "0") != "" {
				if os.Geteuid() != 0 && strings.HasPrefix(l, "CapBnd") {
					continue // a launcher without CAP_SETPCAP keeps its bounding set; it has nothing to raise from it
				}
				t.Errorf("the tool holds a capability: %s", l)
			}
		}
	})
}

// A background grandchild ends with the run, when the tool exits and when
// the sandbox is killed; no pid namespace does it here (the init's
// subreaper rounds and the group kill do, nouserns_linux.go).
func TestNoUserNSEndsDescendants(t *testing.T) {
	inNoUserNS(t, func(t *testing.T) {
		for _, kill := range []bool{false, true} {
			script := `(setsid sleep 60 2>/dev/null; sleep 60) & echo $!; exec sleep 60`
			if !kill {
				script = `(setsid sleep 60 2>/dev/null; sleep 60) & echo $!`
			}
			cfg, ok := noUserNSConfig(t, "/bin/sh", "-c", script)
			if !ok {
				return
			}
			outR, outW, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			p, err := Start(context.Background(), cfg, Stdio{Stdout: outW})
			outW.Close()
			if err != nil {
				t.Fatal(err)
			}
			var b [32]byte
			n, _ := outR.Read(b[:])
			outR.Close()
			pid, err := strconv.Atoi(strings.TrimSpace(string(b[:n])))
			if err != nil {
				t.Fatalf("the tool's output %q", b[:n])
			}
			if kill {
				if err := p.Signal(unix.SIGKILL); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := p.Wait(); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(2 * time.Second)
			for unix.Kill(pid, 0) == nil {
				// A zombie that a subreaper above us has yet to reap is
				// gone too: only a live one counts.
				if st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err == nil && strings.Contains(string(st), ") Z ") {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("kill %v: the background grandchild %d outlived the run", kill, pid)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
	})
}

// Below the rung's minimum Landlock ABI the rung is refused with the
// *LandlockABIError naming both, before any child: raised here to one
// above this kernel's, as the VM's ABI 2 refuses it for real.
func TestNoUserNSBelowLandlockABI(t *testing.T) {
	inNoUserNS(t, func(t *testing.T) {
		defer func(v int) { NoUserNSMinABI = v }(NoUserNSMinABI)
		NoUserNSMinABI = LandlockABI() + 1
		cfg, ok := noUserNSConfig(t, "/bin/true")
		if ok {
			t.Fatal("the rung was not refused")
		}
		_ = cfg
	})
}

// The forwarder's Egress (a unix socket bound in, relayed by the init) is
// refused in the rung, with the typed error naming the mode: its egress is
// EgressTCP (TestNoUserNSEgressPortOnly).
func TestNoUserNSRefusesEgress(t *testing.T) {
	cfg := &Config{NoUserNS: true, Args: []string{"/bin/true"}, Network: NetworkLoopback, Egress: &Egress{Port: 3128, Socket: "/run/egress.sock"}}
	_, err := Start(context.Background(), cfg, Stdio{})
	var ee *EgressModeError
	if !errors.As(err, &ee) || ee.Mode != ModeNoUserNS || !strings.Contains(err.Error(), string(ModeNoUserNS)) {
		t.Fatalf("got %v, want an *EgressModeError naming %s", err, ModeNoUserNS)
	}
}

// closingListener listens on addr (network as net.Listen takes it) and
// hangs up on every connection until the test ends: a peer that a
// sandbox's connect must not reach, or must reach and nothing more.
func closingListener(t *testing.T, network, addr string) net.Listener {
	t.Helper()
	l, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return l
}

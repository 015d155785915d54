package seccomp_test

import (
	"encoding/json"
	"github.com/moat-sandbox/moat/seccomp/attack"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/policies"
)

// withErrno returns a copy of profile whose EPERM answers (the default and
// every explicit errnoRet 1) are errno instead.
func withErrno(t *testing.T, profile *specs.LinuxSeccomp, errno unix.Errno) *specs.LinuxSeccomp {
	t.Helper()
	b, _ := json.Marshal(profile)
	var out specs.LinuxSeccomp
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	e := uint(errno)
	out.DefaultErrnoRet = &e
	for i := range out.Syscalls {
		if r := out.Syscalls[i].ErrnoRet; r != nil && *r == uint(unix.EPERM) {
			out.Syscalls[i].ErrnoRet = &e
		}
	}
	return &out
}

func runProbes(t *testing.T, profile *specs.LinuxSeccomp) map[string]int {
	t.Helper()
	out, err := runChild(t, compile(t, profile), "probes")
	if err != nil {
		t.Fatalf("probe child: %v", err)
	}
	var got map[string]int
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("probe child output %q: %v", out, err)
	}
	return got
}

// marker replaces the profile's EPERM in the battery: no kernel path returns
// it for these calls, so "filtered" cannot be confused with a kernel EPERM
// when the test runs unprivileged.
const marker = unix.EHWPOISON

func TestDefaultProfileProbes(t *testing.T) {
	got := runProbes(t, withErrno(t, defaultProfile(t), marker))
	for _, p := range attack.Probes() {
		errno, ok := got[p.Name]
		if !ok {
			t.Errorf("%s: no result", p.Name)
			continue
		}
		e := unix.Errno(errno)
		switch string(p.Want) {
		case "deny":
			if e != marker {
				t.Errorf("%s: got errno %d (%v), want the filter's errno %d: the call reached the kernel", p.Name, errno, e, marker)
			}
		case "allow":
			if e == marker || e == unix.ENOSYS {
				t.Errorf("%s: got errno %d (%v), want the kernel's answer: the filter stopped it", p.Name, errno, e)
			}
		case "enosys":
			if e != unix.ENOSYS {
				t.Errorf("%s: got errno %d (%v), want ENOSYS", p.Name, errno, e)
			}
		}
	}
}

// The real profile answers EPERM (not the test marker).
func TestDefaultProfileErrnoIsEPERM(t *testing.T) {
	got := runProbes(t, defaultProfile(t))
	for _, name := range []string{"keyctl", "mount", "ptrace", "unshare", "ioctl TIOCSTI high bits", "socket AF_VSOCK"} {
		if e := unix.Errno(got[name]); e != unix.EPERM {
			t.Errorf("%s: got %v, want EPERM", name, e)
		}
	}
	if e := unix.Errno(got["clone3"]); e != unix.ENOSYS {
		t.Errorf("clone3: got %v, want ENOSYS", e)
	}
}

// The strict profile also refuses network sockets and System V IPC.
func TestStrictProfile(t *testing.T) {
	p, err := policies.Builtin("strict")
	if err != nil {
		t.Fatal(err)
	}
	got := runProbes(t, withErrno(t, p.Seccomp, marker))
	for _, name := range []string{"socket AF_INET", "socket AF_INET6", "socket AF_NETLINK route", "keyctl", "mount", "clone CLONE_NEWUSER", "ioctl TIOCSETD", "ioctl TIOCEXCL", "ioctl KDSKBMODE"} {
		if e := unix.Errno(got[name]); e != marker {
			t.Errorf("strict %s: got %v, want the filter's errno", name, e)
		}
	}
	for _, name := range []string{"socket AF_UNIX", "socketpair", "mmap", "futex wake", "getpid"} {
		if e := unix.Errno(got[name]); e == marker {
			t.Errorf("strict %s: filtered, want allowed", name)
		}
	}
	out, err := runChild(t, compile(t, p.Seccomp), "exec", "/bin/sh", "-c", "echo hi | cat; ls / >/dev/null && echo ok")
	if err != nil || string(out) != "hi\nok\n" {
		t.Fatalf("sh under the strict profile: output %q, err %v", out, err)
	}
}

func TestProgramsRunUnderDefaultProfile(t *testing.T) {
	prog := compile(t, defaultProfile(t))
	t.Run("sh", func(t *testing.T) {
		out, err := runChild(t, prog, "exec", "/bin/sh", "-c", "echo hi | cat; x=$(echo sub); echo $x; ls /proc/self/fd >/dev/null && echo ls")
		if err != nil || string(out) != "hi\nsub\nls\n" {
			t.Fatalf("output %q, err %v", out, err)
		}
	})
	t.Run("python3", func(t *testing.T) {
		py := lookPath(t, "python3")
		script := strings.Join([]string{
			"import threading, subprocess, socket, tempfile, os",
			"r = []",
			"th = threading.Thread(target=lambda: r.append(sum(range(10))))",
			"th.start(); th.join()",
			"out = subprocess.run(['/bin/sh', '-c', 'echo sub'], capture_output=True, text=True, check=True).stdout",
			"a, b = socket.socketpair(); a.send(b'x'); assert b.recv(1) == b'x'",
			"with tempfile.TemporaryFile() as f: f.write(b'y')",
			"print(r[0], out.strip(), 'ok')",
		}, "\n")
		out, err := runChild(t, prog, "exec", py, "-c", script)
		if err != nil || string(out) != "45 sub ok\n" {
			t.Fatalf("output %q, err %v", out, err)
		}
	})
	t.Run("node", func(t *testing.T) {
		node := lookPath(t, "node")
		script := `const cp=require('child_process');const fs=require('fs');` +
			`fs.readFile('/etc/hostname',()=>{const o=cp.execFileSync('/bin/sh',['-c','echo sub']).toString().trim();console.log(o,'ok')})`
		out, err := runChild(t, prog, "exec", node, "-e", script)
		if err != nil || string(out) != "sub ok\n" {
			t.Fatalf("output %q, err %v", out, err)
		}
	})
}

package cgroups

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/conformance/testenv"
)

// devGroup makes a cgroup v2 group of the test's own, below a level of
// its own at the cgroup2 mount's root (moat-test-devices: no group the
// test did not create is changed; device programs need no controller,
// so the hybrid host's controller-less mount will do), attaches the
// program of rules to it, and returns an O_PATH descriptor of it for
// CLONE_INTO_CGROUP. Both levels go when the test ends.
func devGroup(t *testing.T, rules []specs.LinuxDeviceCgroup) int {
	t.Helper()
	testenv.RequireRoot(t)
	h, err := Detect()
	if err != nil || h.Unified == "" {
		t.Skip("not this layout: no cgroup2 mount")
	}
	base := filepath.Join(h.Unified, "moat-test-devices")
	dir := filepath.Join(base, fmt.Sprintf("%s-%d", strings.ReplaceAll(t.Name(), "/", "-"), os.Getpid()))
	made := []string{}
	fd, err := walkBeneath(dir, h.Unified, dir, true, &made)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		unix.Close(fd)
		for i := len(made) - 1; i >= 0; i-- {
			if err := rmdir(made[i]); err != nil && !errors.Is(err, unix.EBUSY) {
				t.Errorf("remove %s: %v", made[i], err)
			}
		}
	})
	if err := setDeviceProgram(fd, rules); err != nil {
		t.Fatal(err)
	}
	return fd
}

// devTry runs the "devices" helper in the group fd: each op is
// "open:PATH:r|w|rw" or "mknod:c|b:MAJOR:MINOR"; it returns one result
// per op, "ok" or the errno's name.
func devTry(t *testing.T, fd int, ops ...string) []string {
	t.Helper()
	cmd := helper(t, "devices", strings.Join(ops, " "))
	cmd.Stdin = strings.NewReader("x")
	cmd.Env = append(cmd.Env, "TMPDIR="+t.TempDir())
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("helper: %v: %s", err, ee.Stderr)
		}
		t.Fatal(err)
	}
	return strings.Fields(string(out))
}

// devHelper is runHelper's "devices" mode (see devTry).
func devHelper(arg string) int {
	tmp := os.Getenv("TMPDIR")
	for i, op := range strings.Fields(arg) {
		f := strings.Split(op, ":")
		var err error
		switch f[0] {
		case "open":
			flags := map[string]int{"r": os.O_RDONLY, "w": os.O_WRONLY, "rw": os.O_RDWR}[f[2]]
			var fd int
			if fd, err = unix.Open(f[1], flags|unix.O_CLOEXEC|unix.O_NOCTTY, 0); err == nil {
				unix.Close(fd)
			}
		case "mknod":
			mode := uint32(unix.S_IFCHR)
			if f[1] == "b" {
				mode = unix.S_IFBLK
			}
			major, _ := strconv.Atoi(f[2])
			minor, _ := strconv.Atoi(f[3])
			p := filepath.Join(tmp, strconv.Itoa(i))
			if err = unix.Mknod(p, mode|0o600, int(unix.Mkdev(uint32(major), uint32(minor)))); err == nil {
				os.Remove(p)
			}
		default:
			fmt.Fprintln(os.Stderr, "devices helper: unknown op", op)
			return 2
		}
		if err != nil {
			var errno unix.Errno
			if errors.As(err, &errno) {
				fmt.Println(unix.ErrnoName(errno))
				continue
			}
			fmt.Println(err)
			continue
		}
		fmt.Println("ok")
	}
	return 0
}

func devRule(allow bool, typ string, major, minor int64, access string) specs.LinuxDeviceCgroup {
	return specs.LinuxDeviceCgroup{Allow: allow, Type: typ, Major: &major, Minor: &minor, Access: access}
}

func checkTries(t *testing.T, ops, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("helper printed %q for %q", got, ops)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("%s: %s, want %s", ops[i], got[i], want[i])
		}
	}
}

// A group whose program allows only /dev/null read and write: a root
// process in it (with every capability) cannot open /dev/zero nor mknod
// /dev/null's number, and opens /dev/null.
func TestDeviceProgramOnlyNull(t *testing.T) {
	fd := devGroup(t, []specs.LinuxDeviceCgroup{devRule(true, "c", 1, 3, "rw")})
	ops := []string{"open:/dev/null:rw", "open:/dev/zero:r", "open:/dev/zero:w", "open:/dev/full:rw", "mknod:c:1:3", "mknod:c:1:5"}
	checkTries(t, ops, devTry(t, fd, ops...), []string{"ok", "EPERM", "EPERM", "EPERM", "EPERM", "EPERM"})
}

// The last rule that matches decides: allow-all then deny c 1:5 denies
// /dev/zero only; the same rules the other way round allow it.
func TestDeviceProgramLastMatchWins(t *testing.T) {
	ops := []string{"open:/dev/null:rw", "open:/dev/zero:r", "open:/dev/full:rw", "mknod:c:1:5", "mknod:c:1:7"}
	t.Run("deny-last", func(t *testing.T) {
		fd := devGroup(t, []specs.LinuxDeviceCgroup{{Allow: true, Type: "a"}, devRule(false, "c", 1, 5, "rwm")})
		checkTries(t, ops, devTry(t, fd, ops...), []string{"ok", "EPERM", "ok", "EPERM", "ok"})
	})
	t.Run("allow-last", func(t *testing.T) {
		fd := devGroup(t, []specs.LinuxDeviceCgroup{devRule(false, "c", 1, 5, "rwm"), {Allow: true}})
		checkTries(t, ops, devTry(t, fd, ops...), []string{"ok", "ok", "ok", "ok", "ok"})
	})
	t.Run("deny-all-last", func(t *testing.T) {
		fd := devGroup(t, []specs.LinuxDeviceCgroup{devRule(true, "c", 1, 3, "rwm"), {Allow: false, Type: "a"}})
		checkTries(t, ops, devTry(t, fd, ops...), []string{"EPERM", "EPERM", "EPERM", "EPERM", "EPERM"})
	})
}

// A -1 major or minor matches any number, an access names what may be
// done (m: mknod only), and a type names the kind of node: a char rule
// never allows a block device of the same number.
func TestDeviceProgramWildcardsAndAccess(t *testing.T) {
	t.Run("any-minor-read", func(t *testing.T) {
		fd := devGroup(t, []specs.LinuxDeviceCgroup{devRule(true, "c", 1, -1, "r")})
		ops := []string{"open:/dev/null:r", "open:/dev/zero:r", "open:/dev/null:w", "open:/dev/null:rw", "open:/dev/tty:r", "mknod:c:1:3"}
		checkTries(t, ops, devTry(t, fd, ops...), []string{"ok", "ok", "EPERM", "EPERM", "EPERM", "EPERM"})
	})
	t.Run("any-major", func(t *testing.T) {
		fd := devGroup(t, []specs.LinuxDeviceCgroup{devRule(true, "c", -1, 5, "rw")})
		ops := []string{"open:/dev/zero:rw", "open:/dev/null:rw"}
		checkTries(t, ops, devTry(t, fd, ops...), []string{"ok", "EPERM"})
	})
	t.Run("mknod-only", func(t *testing.T) {
		fd := devGroup(t, []specs.LinuxDeviceCgroup{devRule(true, "c", 1, 3, "m")})
		ops := []string{"mknod:c:1:3", "mknod:c:1:5", "mknod:b:1:3", "open:/dev/null:r"}
		checkTries(t, ops, devTry(t, fd, ops...), []string{"ok", "EPERM", "EPERM", "EPERM"})
	})
	t.Run("block-any", func(t *testing.T) {
		fd := devGroup(t, []specs.LinuxDeviceCgroup{{Allow: true, Type: "b", Access: "m"}})
		ops := []string{"mknod:b:7:0", "mknod:b:8:1", "mknod:c:1:3"}
		checkTries(t, ops, devTry(t, fd, ops...), []string{"ok", "ok", "EPERM"})
	})
}

// A rule of a type or access the OCI spec has not is refused before
// anything is loaded.
func TestDeviceProgramRefusesBadRules(t *testing.T) {
	for _, r := range []specs.LinuxDeviceCgroup{{Type: "p"}, {Type: "c", Access: "rx"}} {
		if _, err := deviceProgram([]specs.LinuxDeviceCgroup{devRule(true, "c", 1, 3, "rw"), r}); err == nil || !strings.Contains(err.Error(), "linux.resources.devices[1]") {
			t.Errorf("%+v: %v, want an error naming linux.resources.devices[1]", r, err)
		}
	}
}

// Without CAP_BPF or CAP_SYS_ADMIN no device program loads (a cgroup
// program type is privileged whatever kernel.unprivileged_bpf_disabled
// says): the load is an EPERM DeviceProgramError, which moat-runtime
// turns into a refusal when the container binds a host device.
func TestDeviceProgramNeedsPrivilege(t *testing.T) {
	if testenv.RunAsUser(t, testenv.NobodyUID, testenv.NobodyGID) {
		return
	}
	prog, err := deviceProgram([]specs.LinuxDeviceCgroup{devRule(true, "c", 1, 3, "rw")})
	if err != nil {
		t.Fatal(err)
	}
	fd, err := loadDeviceProgram(prog)
	var de *DeviceProgramError
	if err == nil {
		unix.Close(fd)
		t.Fatal("an unprivileged process loaded a device program")
	}
	if !errors.As(err, &de) || !errors.Is(err, unix.EPERM) {
		t.Fatalf("load as uid %d: %v, want an EPERM DeviceProgramError", os.Geteuid(), err)
	}
}

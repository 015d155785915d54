//go:build linux

package nsexec

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// mountinfo lines as this host's and a default podman container's
// /proc/self/mountinfo show them.
const (
	hostProc   = "22 27 0:21 / /proc rw,relatime - proc proc rw\n"
	podmanProc = "27 26 0:5 / / rw,relatime - overlay overlay rw\n" +
		"700 27 0:60 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw\n" +
		"701 700 0:61 / /proc/acpi ro,relatime - tmpfs tmpfs ro,size=0k\n" +
		"702 700 0:5 /null /proc/kcore rw,nosuid - devtmpfs udev rw\n" +
		"703 700 0:60 /sys /proc/sys ro,nosuid,nodev,noexec,relatime - proc proc rw\n"
)

func TestModeOfMountinfo(t *testing.T) {
	for _, c := range []struct {
		name, info string
		want       Mode
		why        string
	}{
		{"host", hostProc, ModeFull, ""},
		{"binfmt_misc is a permanently empty directory", hostProc + "30 22 0:40 / /proc/sys/fs/binfmt_misc rw,relatime - binfmt_misc binfmt_misc rw\n", ModeFull, ""},
		{"podman's masked /proc", podmanProc, ModeNoProc, "/proc/acpi covered"},
		{"a read-only procfs", "22 27 0:21 / /proc ro,relatime - proc proc rw\n", ModeNoProc, "stricter"},
		{"a noatime procfs", "22 27 0:21 / /proc rw,noatime - proc proc rw\n", ModeNoProc, "stricter"},
		{"only a procfs subtree", "22 27 0:21 /sys /proc rw,relatime - proc proc rw\n", ModeNoProc, "no procfs"},
		{"no procfs", "27 26 0:5 / / rw,relatime - overlay overlay rw\n", ModeNoProc, "no procfs"},
		{"a masked one and a visible one", podmanProc + "800 27 0:62 / /mnt/proc\\040x rw,relatime - proc proc rw\n", ModeFull, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, why := modeOf([]byte(c.info))
			if m != c.want || !strings.Contains(why, c.why) || (m == ModeFull) != (why == "") {
				t.Fatalf("modeOf = %q, %q; want %q and a reason naming %q", m, why, c.want, c.why)
			}
		})
	}
}

func TestModeLadder(t *testing.T) {
	if ModeFull.Rank() != 0 || ModeNoProc.Rank() <= ModeFull.Rank() || Mode("half").Rank() != -1 {
		t.Fatalf("ranks: full %d, no-proc %d, half %d", ModeFull.Rank(), ModeNoProc.Rank(), Mode("half").Rank())
	}
	if ModeNoUserNS.Rank() <= ModeNoProc.Rank() {
		t.Fatalf("ranks: no-userns %d is not below no-proc %d", ModeNoUserNS.Rank(), ModeNoProc.Rank())
	}
	if len(ModeFull.Drops()) != 0 || len(ModeNoProc.Drops()) == 0 || len(ModeNoUserNS.Drops()) == 0 {
		t.Fatalf("drops: full %q, no-proc %q", ModeFull.Drops(), ModeNoProc.Drops())
	}
}

// A NoProc sandbox has every namespace and an empty read-only /proc: not
// the host's, not one of its own pid namespace.
func TestNoProcSandbox(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		cfg := shell(t, `ls -A /proc | wc -l; if (echo x > /proc/x) 2>/dev/null; then echo proc-writable; fi; `+
			`if [ -e /proc/1 ] || [ -e /proc/self ]; then echo has-procfs; fi; echo $$; hostname; id -u; echo ok > /work/f && cat /work/f`)
		cfg.NoProc = true
		r := mustRun(t, cfg)
		lines := strings.Split(r.stdout, "\n")
		want := "0\n" + DefaultHostname + "\n1000\nok\n"
		if len(lines) < 2 {
			t.Fatalf("NoProc sandbox printed %q", r.stdout)
		}
		// A pid of the sandbox's own namespace: the init is 1, its
		// children count from 2.
		pid, err := strconv.Atoi(lines[1])
		rest := lines[0] + "\n" + strings.Join(lines[2:], "\n")
		if err != nil || pid < 2 || pid > 64 || rest != want {
			t.Fatalf("NoProc sandbox printed %q, want an empty read-only /proc, a pid of its own namespace, its hostname, uid and workdir", r.stdout)
		}
	})
}

func TestNoProcRefusesSysctls(t *testing.T) {
	cfg := shell(t, "true")
	cfg.NoProc = true
	cfg.Sysctl = map[string]string{"kernel.shmmax": "1000"}
	_, err := run(t, cfg)
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Field != "sysctl" || !strings.Contains(ce.Error(), string(ModeNoProc)) {
		t.Fatalf("NoProc with a sysctl: %v (%T), want a *ConfigError on sysctl naming the mode", err, err)
	}
}

// InheritHostname keeps the uts namespace's copy of the launcher's
// hostname: a rename inside changes only the sandbox's own.
func TestInheritHostname(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	cfg := shell(t, "hostname")
	cfg.InheritHostname = true
	if r := mustRun(t, cfg); strings.TrimSpace(r.stdout) != host {
		t.Fatalf("hostname with InheritHostname: %q, want the launcher's %q", r.stdout, host)
	}
	cfg = shell(t, "hostname")
	if r := mustRun(t, cfg); strings.TrimSpace(r.stdout) != DefaultHostname {
		t.Fatalf("hostname without it: %q, want %q", r.stdout, DefaultHostname)
	}
}

func init() {
	probes["no-procfs-fd"] = func() error {
		// Every descriptor the tool holds, and its cwd and root: none may
		// be the launcher's procfs, which the init of a NoProc sandbox
		// held open for its privilege drop (noproc_linux.go).
		var found []string
		check := func(name string, fd int) {
			var st unix.Statfs_t
			if unix.Fstatfs(fd, &st) == nil && st.Type == unix.PROC_SUPER_MAGIC {
				found = append(found, name)
			}
		}
		for fd := 0; fd < 1024; fd++ {
			check(strconv.Itoa(fd), fd)
		}
		for _, p := range []string{".", "/", "/proc", "/dev/fd/"} {
			if fd, err := unix.Open(p, unix.O_PATH, 0); err == nil {
				check(p, fd)
				unix.Close(fd)
			}
		}
		if len(found) > 0 {
			return fmt.Errorf("a procfs is reachable from the tool: %v", found)
		}
		fmt.Println("none")
		return nil
	}
}

// The launcher's procfs that a NoProc init lists its threads from never
// reaches the tool: no descriptor of it, and no path.
func TestNoProcLeavesNoProcfs(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		cfg := probeConfig(t, "no-procfs-fd")
		cfg.NoProc = true
		if r := mustRun(t, cfg); strings.TrimSpace(r.stdout) != "none" {
			t.Fatalf("probe: %q %q", r.stdout, r.stderr)
		}
	})
}

//go:build linux

package nsexec

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestIdentityInside(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		r := mustRun(t, shell(t, "id -u; id -g; id -G"))
		if r.stdout != "1000\n1000\n1000\n" {
			t.Fatalf("default identity: got %q, want uid, gid and groups 1000", r.stdout)
		}
		cfg := shell(t, "id -u; id -g")
		cfg.UID, cfg.GID = 4242, 4343
		if r := mustRun(t, cfg); r.stdout != "4242\n4343\n" {
			t.Fatalf("configured identity: got %q", r.stdout)
		}
	})
}

func TestWorkdirReadWrite(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		cfg := shell(t, "pwd; echo hello > /work/f; cat /work/f")
		r := mustRun(t, cfg)
		if r.stdout != "/work\nhello\n" {
			t.Fatalf("got %q", r.stdout)
		}
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(cfg.Workdir, "f"), &st); err != nil {
			t.Fatal(err)
		}
		if euid := uint32(os.Geteuid()); euid == 0 {
			if st.Uid < HostIDFirst || st.Uid >= HostIDFirst+HostIDCount || st.Gid != st.Uid {
				t.Fatalf("file written in /work is owned by host %d:%d, want one id of the range %d+%d", st.Uid, st.Gid, HostIDFirst, HostIDCount)
			}
		} else if st.Uid != euid {
			t.Fatalf("file written in /work is owned by host uid %d, want the caller's %d", st.Uid, euid)
		}
	})
}

func TestRootReadOnly(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		r := mustRun(t, shell(t, "for p in /x /usr/x /etc/x /dev/x /proc/sys/kernel/hostname; do "+
			"if (echo > $p) 2>/dev/null; then echo writable $p; fi; done; "+
			"touch /x 2>&1 | grep -c 'Read-only file system'; "+
			"touch /tmp/ok && touch /dev/shm/ok && echo rw-ok"))
		if r.stdout != "1\nrw-ok\n" {
			t.Fatalf("got %q (stderr %q)", r.stdout, r.stderr)
		}
	})
}

func TestHostFileInvisible(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		dir, err := os.MkdirTemp("/var/tmp", "moat-nsexec-host-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		secret := filepath.Join(dir, "secret")
		if err := os.WriteFile(secret, []byte("host"), 0o644); err != nil {
			t.Fatal(err)
		}
		r := mustRun(t, shell(t, "if [ -e "+secret+" ] || [ -e /var ]; then echo visible; else echo hidden; fi; ls /"))
		if !strings.HasPrefix(r.stdout, "hidden\n") {
			t.Fatalf("host file visible: %q", r.stdout)
		}
	})
}

func TestNetwork(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		if r := mustRun(t, probeConfig(t, "net")); r.stdout != "lo:down\n" {
			t.Fatalf("network none: got %q, want only lo, down", r.stdout)
		}
		cfg := probeConfig(t, "net")
		cfg.Network = NetworkLoopback
		if r := mustRun(t, cfg); r.stdout != "lo:up\n" {
			t.Fatalf("network loopback: got %q, want only lo, up", r.stdout)
		}
	})
}

func TestPidNamespace(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		r := mustRun(t, shell(t, "echo $PPID $$; tr '\\0' ' ' </proc/1/cmdline; echo; ls /proc"))
		lines := strings.Split(r.stdout, "\n")
		if len(lines) < 3 {
			t.Fatalf("got %q", r.stdout)
		}
		ids := strings.Fields(lines[0])
		if len(ids) != 2 || ids[0] != "1" {
			t.Fatalf("the tool is not the child of pid 1: %q", r.stdout)
		}
		if strings.TrimSpace(lines[1]) != InitArgv0 {
			t.Fatalf("pid 1 is %q, want the init %q", lines[1], InitArgv0)
		}
		var pids []int
		for _, l := range strings.Fields(strings.Join(lines[2:], " ")) {
			if n, err := strconv.Atoi(l); err == nil {
				pids = append(pids, n)
			}
		}
		slices.Sort(pids)
		// The init (1), the shell and ls: nothing of the host (the init's
		// threads use a few pids before the tool's).
		if len(pids) != 3 || pids[0] != 1 || strconv.Itoa(pids[1]) != ids[1] || pids[2] > 64 {
			t.Fatalf("pids visible in the sandbox: %v (the shell is %s)", pids, ids[1])
		}
	})
}

func TestHostname(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		before, _ := os.Hostname()
		cfg := shell(t, "cat /proc/sys/kernel/hostname; cat /etc/hostname")
		if r := mustRun(t, cfg); r.stdout != "moat\nmoat\n" {
			t.Fatalf("default hostname: %q", r.stdout)
		}
		cfg = shell(t, "hostname other 2>/dev/null; cat /proc/sys/kernel/hostname")
		cfg.Hostname = "box"
		if r := mustRun(t, cfg); r.stdout != "box\n" {
			t.Fatalf("configured hostname: %q", r.stdout)
		}
		if after, _ := os.Hostname(); after != before {
			t.Fatalf("host hostname changed from %q to %q", before, after)
		}
	})
}

func TestEnvironmentExact(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		env := []string{"PATH=/usr/bin:/bin", "A=1", "WITH SPACE=x y", "EMPTY="}
		r := mustRun(t, &Config{Args: []string{"env"}, Env: env})
		got := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
		if !slices.Equal(got, env) {
			t.Fatalf("environment %q, want exactly %q", got, env)
		}
	})
}

func TestNoPrivileges(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		if r := mustRun(t, probeConfig(t, "caps")); r.stdout != "ok\n" {
			t.Fatalf("caps probe: %q", r.stdout)
		}
	})
}

func TestProcOneExeNotWritable(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		if r := mustRun(t, probeConfig(t, "exe")); r.stdout != "ok\n" {
			t.Fatalf("exe probe: %q", r.stdout)
		}
	})
}

func TestNoDescriptorAboveStdio(t *testing.T) {
	bothInits(t, func(t *testing.T, prepared bool) {
		// A descriptor the parent holds open (not CLOEXEC) must not leak.
		f, err := os.Open("/")
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := unix.FcntlInt(f.Fd(), unix.F_SETFD, 0); err != nil {
			t.Fatal(err)
		}
		p, outR := startPiped(t, probeConfig(t, "fds"), prepared)
		out, _ := io.ReadAll(outR)
		outR.Close()
		if e, err := p.Wait(); err != nil || e.Code != 0 || string(out) != "0 1 2\n" {
			t.Fatalf("descriptors open in the tool: %q (%+v %v), want 0 1 2", out, e, err)
		}
	})
}

func TestExitStatus(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		r, err := run(t, shell(t, "exit 3"))
		if err != nil || r.exit.Code != 3 || r.exit.Signal != 0 {
			t.Fatalf("exit 3: %+v, %v", r.exit, err)
		}
	})
}

func TestProcMasked(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		r := mustRun(t, shell(t, "ls /proc/keys >/dev/null && for f in /proc/kcore /proc/keys /proc/timer_list /proc/sched_debug; do "+
			"if [ -e $f ]; then cat $f; fi; done | wc -c; "+
			"for p in /proc/sysrq-trigger /proc/sys/kernel/hostname /proc/sys/vm/drop_caches; do "+
			"if (echo 1 > $p) 2>/dev/null; then echo writable $p; fi; done; "+
			"grep -E ' /proc/(sys|keys) ' /proc/self/mountinfo | grep -c ' ro,'"))
		if r.stdout != "0\n2\n" {
			t.Fatalf("got %q (stderr %q)", r.stdout, r.stderr)
		}
	})
}

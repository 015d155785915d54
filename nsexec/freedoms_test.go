//go:build linux

package nsexec

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// The freedoms an OCI config may ask within moat's floor (issue 29, items
// 4 and 5): a writable root, sysfs, mqueue, namespaced sysctls, masked and
// read-only paths, tmpcopyup, runc's mount options. Each test also checks
// the floor still holds where the freedom could breach it.

// writableRootfs is a copy of the rootfs fixture whose root directory
// anyone may write, so that only the mount decides whether /x is written.
func writableRootfs(t *testing.T) string {
	t.Helper()
	src := testRootfs(t)
	root := filepath.Join(t.TempDir(), "root")
	for _, d := range []string{"bin", "proc", "dev", "tmp", "work"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(filepath.Join(src, "bin", "probe"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "bin", "probe"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(root, 0o777)
	return root
}

// TestRootfsWritable: RootfsWritable binds the root read-write (an OCI
// root.readonly false), still nosuid and nodev; without it the root is
// read-only.
func TestRootfsWritable(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		root := writableRootfs(t)
		r := mustRun(t, &Config{Rootfs: root, Args: []string{"/bin/probe"}, Workdir: workdir(t)})
		if !strings.Contains(r.stdout, "root: open /x: read-only file system") {
			t.Fatalf("default root: %q, want it read-only", r.stdout)
		}
		r = mustRun(t, &Config{Rootfs: root, RootfsWritable: true, Args: []string{"/bin/probe"}, Workdir: workdir(t)})
		if !strings.Contains(r.stdout, "root writable") {
			t.Fatalf("RootfsWritable: %q, want /x written", r.stdout)
		}
		if _, err := os.Stat(filepath.Join(root, "x")); err != nil {
			t.Fatalf("/x is not in the rootfs on the host: %v", err)
		}
		_, err := run(t, &Config{RootfsWritable: true, Args: []string{"/bin/true"}})
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != "rootfsWritable" {
			t.Fatalf("RootfsWritable in host mode: %v, want a ConfigError", err)
		}
	})
}

// mountinfo returns the sandbox's mountinfo line of mount point dst.
func mountLine(t *testing.T, mountinfo, dst string) string {
	t.Helper()
	for _, l := range strings.Split(mountinfo, "\n") {
		if f := strings.Fields(l); len(f) > 4 && f[4] == dst {
			return l
		}
	}
	t.Fatalf("no mount at %s in:\n%s", dst, mountinfo)
	return ""
}

// TestSysfsMqueueAndSources: Sysfs gives a read-only sysfs of the
// sandbox's own network namespace (lo alone), Mqueue the message queues of
// its own ipc namespace; every filesystem moat makes shows its type as its
// source in mountinfo, as runc's do (the runtime-tools suite looks).
func TestSysfsMqueueAndSources(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		cfg := shell(t, "cat /proc/self/mountinfo; echo ===; ls /sys/class/net; touch /sys/x 2>/dev/null && echo sys-written; true")
		cfg.Sysfs, cfg.Mqueue = true, true
		r := mustRun(t, cfg)
		mi, rest, _ := strings.Cut(r.stdout, "===\n")
		for dst, want := range map[string]string{"/sys": " - sysfs sysfs ", "/dev/mqueue": " - mqueue mqueue ", "/proc": " - proc proc ", "/tmp": " - tmpfs tmpfs ", "/dev/pts": " - devpts devpts "} {
			if l := mountLine(t, mi, dst); !strings.Contains(l, want) {
				t.Errorf("%s: %q, want %q", dst, l, want)
			}
		}
		if l := mountLine(t, mi, "/sys"); !strings.Contains(strings.Fields(l)[5], "ro") || !strings.Contains(l, "nosuid") || !strings.Contains(l, "nodev") {
			t.Errorf("/sys is not read-only, nosuid, nodev: %q", l)
		}
		if strings.TrimSpace(rest) != "lo" {
			t.Errorf("/sys/class/net: %q, want the sandbox's own lo alone", rest)
		}
	})
}

// TestSysctls: the namespaced sysctls are set in the sandbox's own ipc and
// network namespaces and the host's stay as they were; a sysctl that is
// not namespaced, or a key that would walk elsewhere in /proc/sys, is
// refused before anything starts; an ipc sysctl, which only uid 0 of the
// namespace's user namespace may write, fails naming why for another uid.
func TestSysctls(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		host := func() string {
			var out []string
			for _, f := range []string{"kernel/shm_rmid_forced", "fs/mqueue/msg_max", "net/ipv4/ip_unprivileged_port_start"} {
				b, _ := os.ReadFile("/proc/sys/" + f)
				out = append(out, strings.TrimSpace(string(b)))
			}
			return strings.Join(out, " ")
		}
		before := host()
		set := map[string]string{"kernel.shm_rmid_forced": "1", "fs.mqueue.msg_max": "100", "net.ipv4.ip_unprivileged_port_start": "80"}
		cfg := shell(t, "cat /proc/sys/kernel/shm_rmid_forced /proc/sys/fs/mqueue/msg_max /proc/sys/net/ipv4/ip_unprivileged_port_start")
		cfg.UID, cfg.GID, cfg.ExactIDs = 0, 0, true
		cfg.Sysctl = set
		r := mustRun(t, cfg)
		if got := strings.Join(strings.Fields(r.stdout), " "); got != "1 100 80" {
			t.Fatalf("inside: %q, want 1 100 80", got)
		}
		if after := host(); after != before {
			t.Fatalf("the host's sysctls changed: %q, were %q", after, before)
		}
		for key, field := range map[string]string{
			"kernel.panic":           "sysctl.kernel.panic",
			"vm.overcommit_memory":   "sysctl.vm.overcommit_memory",
			"net.ipv4..conf":         "sysctl.net.ipv4..conf",
			"net.ipv4/../../kernel":  "sysctl.net.ipv4/../../kernel",
			"kernel.hostname":        "sysctl.kernel.hostname",
			"fs.mqueue.msg_max\n":    "sysctl.fs.mqueue.msg_max\n",
			"net.core/../../x.y/z.w": "sysctl.net.core/../../x.y/z.w",
		} {
			cfg := shell(t, "true")
			cfg.Sysctl = map[string]string{key: "1"}
			_, err := run(t, cfg)
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Field != field {
				t.Errorf("sysctl %q: %v, want a ConfigError at %s", key, err, field)
			}
		}
		cfg = shell(t, "true")
		cfg.Sysctl = map[string]string{"kernel.shm_rmid_forced": "1"}
		_, err := run(t, cfg)
		if se := setupErr(t, err, StepSysctl, unix.EACCES); se.Hint == "" {
			t.Fatalf("an ipc sysctl as uid 1000: %v, want the hint", err)
		}
	})
}

// TestMaskedAndReadonlyPaths: a config's masked paths are covered (a file
// by /dev/null, a directory by an empty read-only tmpfs), its read-only
// paths cannot be written, a missing one is skipped.
func TestMaskedAndReadonlyPaths(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		cfg := shell(t, "ls -A /etc/ssl | wc -l; wc -c < /etc/ld.so.cache; echo x > /scratch/f 2>/dev/null || echo ro-refused; echo x > /work/rw && echo rw-ok")
		cfg.Mounts = []specs.Mount{{Type: "tmpfs", Destination: "/scratch"}}
		cfg.MaskedPaths = []string{"/etc/ssl", "/etc/ld.so.cache", "/no/such/path"}
		cfg.ReadonlyPaths = []string{"/scratch", "/no/such/dir"}
		r := mustRun(t, cfg)
		if got := strings.Fields(r.stdout); len(got) != 4 || got[0] != "0" || got[1] != "0" || got[2] != "ro-refused" || got[3] != "rw-ok" {
			t.Fatalf("inside: %q, want /etc/ssl empty, ld.so.cache empty, /scratch read-only, /work writable", r.stdout)
		}
		// Without the read-only path, /scratch is the sandbox's to write.
		cfg.ReadonlyPaths, cfg.Workdir = nil, workdir(t)
		if r := mustRun(t, cfg); !strings.Contains(r.stdout, "rw-ok") || strings.Contains(r.stdout, "ro-refused") {
			t.Fatalf("without readonlyPaths: %q", r.stdout)
		}
		cfg = shell(t, "true")
		cfg.MaskedPaths = []string{"relative"}
		_, err := run(t, cfg)
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != "maskedPaths[0]" {
			t.Fatalf("a relative masked path: %v", err)
		}
	})
}

// TestTmpCopyUp: a tmpfs with tmpcopyup starts with a copy of its target
// directory (files, directories, symlinks copied as links, modes but the
// setuid bit), is the sandbox's to write, and leaves the directory on the
// host as it was.
func TestTmpCopyUp(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		cfg := shell(t, "cat /data/a /data/d/b; readlink /data/l; stat -c %a /data/x /data/d/b; echo new > /data/a && cat /data/a")
		data := t.TempDir()
		os.Chmod(data, 0o755)
		os.MkdirAll(filepath.Join(data, "d"), 0o755)
		os.WriteFile(filepath.Join(data, "a"), []byte("A\n"), 0o644)
		os.WriteFile(filepath.Join(data, "d", "b"), []byte("B\n"), 0o604)
		os.WriteFile(filepath.Join(data, "x"), nil, 0o755)
		os.Chmod(filepath.Join(data, "x"), 0o4755)
		os.Chmod(filepath.Join(data, "d", "b"), 0o604)
		os.Symlink("/etc/shadow", filepath.Join(data, "l"))
		cfg.Mounts = []specs.Mount{
			{Type: "bind", Source: data, Destination: "/data"},
			{Type: "tmpfs", Destination: "/data", Options: []string{"tmpcopyup", "size=1048576"}},
		}
		r := mustRun(t, cfg)
		if got := strings.Fields(r.stdout); len(got) != 6 || got[0] != "A" || got[1] != "B" || got[2] != "/etc/shadow" || got[3] != "755" || got[4] != "604" || got[5] != "new" {
			t.Fatalf("inside: %q", r.stdout)
		}
		if b, _ := os.ReadFile(filepath.Join(data, "a")); string(b) != "A\n" {
			t.Fatalf("the host's file changed: %q", b)
		}
	})
}

// TestMountOptions: runc's option names are built as they say: noatime
// and nosymfollow on a tmpfs, unbindable, the recursive forms on a bind,
// the propagation options in their order (a peer group of the sandbox's
// own: TestPropagationStaysInside in cmd/moat-runtime is the hostile
// test); suid and dev are refused.
func TestMountOptions(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		cfg := shell(t, "cat /proc/self/mountinfo")
		cfg.Mounts = []specs.Mount{
			{Type: "tmpfs", Destination: "/t", Options: []string{"noatime", "nosymfollow", "runbindable", "nodiratime"}},
			{Type: "bind", Source: "/usr", Destination: "/b", Options: []string{"rbind", "rro", "rnoexec", "relatime", "rprivate"}},
			{Type: "tmpfs", Destination: "/tmp/sh", Options: []string{"private", "shared"}},
			{Type: "tmpfs", Destination: "/tmp/pr", Options: []string{"shared", "private"}},
		}
		r := mustRun(t, cfg)
		if l := mountLine(t, r.stdout, "/tmp/sh"); !strings.Contains(l, " shared:") {
			t.Errorf("/tmp/sh: %q, want shared (private, then shared)", l)
		}
		if l := mountLine(t, r.stdout, "/tmp/pr"); strings.Contains(l, " shared:") {
			t.Errorf("/tmp/pr: %q, want private (shared, then private)", l)
		}
		if l := mountLine(t, r.stdout, "/t"); !strings.Contains(l, "noatime") || !strings.Contains(l, "nosymfollow") || !strings.Contains(l, "unbindable") || !strings.Contains(l, "nodiratime") {
			t.Errorf("/t: %q, want noatime, nosymfollow, nodiratime, unbindable", l)
		}
		if l := mountLine(t, r.stdout, "/b"); !strings.HasPrefix(strings.Fields(l)[5], "ro,") || !strings.Contains(l, "noexec") {
			t.Errorf("/b: %q, want ro and noexec", l)
		}
		for _, o := range []string{"suid", "dev", "rdev", "shared=1"} {
			cfg := shell(t, "true")
			cfg.Mounts = []specs.Mount{{Type: "bind", Source: "/usr", Destination: "/b", Options: []string{o}}}
			_, err := run(t, cfg)
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Field != "mounts[0].options[0]" {
				t.Errorf("%s: %v, want a ConfigError", o, err)
			}
		}
	})
}

// TestDevShmBind: a Config bind at /dev/shm (a pod's, which the CRI binds
// into each of its containers) replaces the sandbox's own tmpfs there, so
// two sandboxes given it share POSIX shared memory; /dev itself stays
// read-only.
func TestDevShmBind(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		shm := t.TempDir()
		os.Chmod(shm, 0o1777)
		bind := []specs.Mount{{Type: "bind", Source: shm, Destination: "/dev/shm", Options: []string{"rw", "noexec"}}}
		cfg := shell(t, "echo from-one > /dev/shm/seg; touch /dev/x 2>/dev/null && echo dev-written; true")
		cfg.Mounts = bind
		if r := mustRun(t, cfg); strings.Contains(r.stdout, "dev-written") {
			t.Fatalf("/dev was written: %q", r.stdout)
		}
		cfg = shell(t, "cat /dev/shm/seg")
		cfg.Mounts = bind
		if r := mustRun(t, cfg); r.stdout != "from-one\n" {
			t.Fatalf("the second sandbox reads %q from /dev/shm, want the first's", r.stdout)
		}
		if b, err := os.ReadFile(filepath.Join(shm, "seg")); err != nil || string(b) != "from-one\n" {
			t.Fatalf("on the host: %q, %v", b, err)
		}
	})
}

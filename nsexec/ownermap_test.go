//go:build linux

package nsexec

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/conformance/testenv"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// private makes base/priv as the reference kit lays out its runner: a 0700
// directory of the caller (root) holding a 0700 script and a 0600 file of
// its own, a 0600 file of another host user, and a setuid-root copy of id;
// base is 0755.
func private(t *testing.T) (base, priv string) {
	t.Helper()
	base = t.TempDir()
	os.Chmod(base, 0o755)
	priv = filepath.Join(base, "priv")
	os.Mkdir(priv, 0o700)
	os.WriteFile(filepath.Join(priv, "runner.sh"), []byte("#!/bin/sh\necho ran\n"), 0o700)
	os.WriteFile(filepath.Join(priv, "data"), []byte("mine\n"), 0o600)
	theirs := filepath.Join(priv, "theirs")
	os.WriteFile(theirs, []byte("theirs\n"), 0o600)
	os.Chown(theirs, 1234, 1234)
	id, err := os.ReadFile("/usr/bin/id")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(priv, "suid-id"), id, 0o755)
	os.Chmod(filepath.Join(priv, "suid-id"), 0o755|os.ModeSetuid)
	return base, priv
}

// ownerProbe reads, runs and writes in /p, and prints the mount's flags.
const ownerProbe = `cat /p/data 2>/dev/null || echo read-refused
/p/runner.sh 2>/dev/null || echo exec-refused
cat /p/theirs 2>/dev/null || echo theirs-refused
touch /p/new 2>/dev/null && echo wrote || echo write-refused
echo x >> /p/data 2>/dev/null && echo appended || echo append-refused
/p/suid-id -u 2>/dev/null || echo suid-refused
id -u
awk '$5 == "/p" {print $6}' /proc/self/mountinfo`

// TestOwnerMappedBind (issue 32): as root, a read-only bind of the
// caller's 0700 directory is readable to the sandbox's own host id through
// an id-mapped mount of its owner alone: the tool reads and runs the
// caller's files there, but not another user's 0600 file, cannot write,
// and a setuid file grants nothing (nosuid); the bind is ro, nosuid,
// nodev. On the host nothing changed: modes, owners, the mount table.
// Without the option the same bind is closed to the tool, as on main.
func TestOwnerMappedBind(t *testing.T) {
	rootOnly(t)
	base, priv := private(t)
	testenv.RequireIDMappedMounts(t, priv)
	before := snapshot(t, base, "")
	mountsBefore := hostMounts(t, base)
	cfg := shell(t, ownerProbe)
	cfg.Mounts = []specs.Mount{{Source: priv, Destination: "/p", Options: []string{"ro"}}}
	r := mustRun(t, cfg, WithOwnerMappedBinds())
	got := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(got) != 8 {
		t.Fatalf("probe said %q (stderr %q)", r.stdout, r.stderr)
	}
	uid := got[6]
	want := []string{"mine", "ran", "theirs-refused", "write-refused", "append-refused", uid, uid}
	if strings.Join(got[:7], " ") != strings.Join(want, " ") {
		t.Errorf("owner-mapped bind: %q, want %q (stderr %q)", got[:7], want, r.stderr)
	}
	flags := strings.Split(got[7], ",")
	for _, f := range []string{"ro", "nosuid", "nodev", "idmapped"} {
		if !strings.Contains(","+got[7]+",", ","+f+",") {
			t.Errorf("the bind's flags are %q, want %s among them", flags, f)
		}
	}
	if after := snapshot(t, base, ""); after != before {
		t.Errorf("on the host:\nbefore\n%s\nafter\n%s", before, after)
	}
	if after := hostMounts(t, base); after != mountsBefore {
		t.Errorf("the host's mount table below %s changed: %q, was %q", base, after, mountsBefore)
	}

	// Without WithOwnerMappedBinds (main's behaviour) the tool cannot
	// enter the directory at all.
	if r := mustRun(t, cfg); !strings.HasPrefix(r.stdout, "read-refused\nexec-refused\n") {
		t.Errorf("plain bind of a 0700 directory: %q, want it closed to the sandbox's id", r.stdout)
	}
}

// Only what is needed and only read-only: a writable bind of the caller's
// 0700 directory stays a plain bind (the tool would write as the caller),
// and so does a read-only one the sandbox's id can enter (a 0755
// directory): its 0600 file of the caller's stays closed, as /etc/ssl's
// private keys must. A directory another host user owns is not mapped
// either.
func TestOwnerMappedBindOnlyWhereNeeded(t *testing.T) {
	rootOnly(t)
	base, priv := private(t)
	testenv.RequireIDMappedMounts(t, priv)
	probe := "cat /p/data 2>/dev/null || echo read-refused; touch /p/new 2>/dev/null && echo wrote || echo write-refused"
	for _, tc := range []struct {
		name  string
		setup func()
		opt   string
		want  string
	}{
		{"rw bind", func() {}, "rw", "read-refused\nwrite-refused\n"},
		{"0755 directory", func() { os.Chmod(priv, 0o755) }, "ro", "read-refused\nwrite-refused\n"},
		{"another user's 0700 directory", func() { os.Chmod(priv, 0o700); os.Chown(priv, 1234, 1234) }, "ro", "read-refused\nwrite-refused\n"},
	} {
		tc.setup()
		cfg := shell(t, probe)
		cfg.Mounts = []specs.Mount{{Source: priv, Destination: "/p", Options: []string{tc.opt}}}
		if r := mustRun(t, cfg, WithOwnerMappedBinds()); r.stdout != tc.want {
			t.Errorf("%s: %q, want %q (stderr %q)", tc.name, r.stdout, tc.want, r.stderr)
		}
	}
	if _, err := os.Stat(filepath.Join(base, "priv", "new")); err == nil {
		t.Error("a sandbox wrote into the host directory")
	}
}

// A source whose filesystem cannot be id-mapped (sysfs) that the sandbox's
// id cannot open: Start refuses naming the bind and what to do, and the
// file's mode is untouched (moat never chmods the caller's files).
func TestOwnerMappedBindUnsupported(t *testing.T) {
	rootOnly(t)
	var file string
	filepath.WalkDir("/sys/kernel", func(p string, d fs.DirEntry, err error) error {
		if err != nil || file != "" {
			return fs.SkipDir
		}
		var st unix.Stat_t
		if d.Type().IsRegular() && unix.Stat(p, &st) == nil && st.Uid == 0 && st.Mode&0o400 != 0 && st.Mode&0o004 == 0 {
			file = p
			return fs.SkipAll
		}
		return nil
	})
	if file == "" {
		testenv.Skipf(t, "no root-owned sysfs file closed to others below /sys/kernel")
	}
	var before unix.Stat_t
	unix.Stat(file, &before)
	cfg := &Config{Args: []string{"/bin/true"}, Mounts: []specs.Mount{{Source: file, Destination: "/f", Options: []string{"ro"}}}}
	_, err := Start(context.Background(), cfg, Stdio{}, WithOwnerMappedBinds())
	se := setupErr(t, err, StepBind, unix.EINVAL)
	if !strings.Contains(se.Detail, "mounts[0]") || !strings.Contains(se.Detail, "id-mapped") || !strings.Contains(se.Hint, "never changes") {
		t.Errorf("refusal: %v (hint %q), want the bind and the id-mapped mount named, with what to do", err, se.Hint)
	}
	var after unix.Stat_t
	if unix.Stat(file, &after); after.Mode != before.Mode || after.Uid != before.Uid {
		t.Errorf("%s changed: mode %#o uid %d, was %#o uid %d", file, after.Mode, after.Uid, before.Mode, before.Uid)
	}
}

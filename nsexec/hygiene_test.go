//go:build linux

package nsexec

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/conformance/testenv"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// TestUmask: the tool starts with Config.Umask (022 when nil), in a cold
// sandbox (the Go init is pid 1) and a prepared one (in the static pass,
// the C tail is), and the files it creates get modes by it.
func TestUmask(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		const script = "umask; : > /work/f; mkdir /work/d"
		for _, c := range []struct {
			name  string
			umask *uint32
			want  string
			mask  os.FileMode
		}{
			{"default", nil, "0022\n", 0o022},
			{"002", new(uint32(0o002)), "0002\n", 0o002},
			{"0", new(uint32(0)), "0000\n", 0},
			{"077", new(uint32(0o077)), "0077\n", 0o077},
		} {
			cold := shell(t, script)
			cold.Umask = c.umask
			checkUmask(t, c.name+", cold", cold.Workdir, mustRun(t, cold).stdout, c.want, c.mask)

			prep := shell(t, "")
			prep.Args, prep.Umask = nil, c.umask
			s, err := Prepare(context.Background(), prep)
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			p, err := s.Exec(context.Background(), []string{"/bin/sh", "-c", script}, []string{"PATH=/usr/bin:/bin"}, Stdio{Stdout: w})
			w.Close()
			if err != nil {
				r.Close()
				s.Close()
				t.Fatal(err)
			}
			out.ReadFrom(r)
			r.Close()
			if e, err := p.Wait(); err != nil || e.Code != 0 {
				t.Fatalf("%s, prepared: %+v %v", c.name, e, err)
			}
			s.Close()
			checkUmask(t, c.name+", prepared (tail: "+map[bool]string{true: "yes", false: "no"}[tailExpected()]+")", prep.Workdir, out.String(), c.want, c.mask)
		}
	})
}

// checkUmask checks the umask the tool printed and the modes of the file
// (created 0666) and the directory (0777) it made in work.
func checkUmask(t *testing.T, name, work, got, want string, mask os.FileMode) {
	t.Helper()
	if got != want {
		t.Errorf("%s: umask inside is %q, want %q", name, got, want)
	}
	fi, err := os.Stat(filepath.Join(work, "f"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o666&^mask {
		t.Errorf("%s: a file created with 0666 has mode %#o, want %#o", name, fi.Mode().Perm(), 0o666&^mask)
	}
	di, err := os.Stat(filepath.Join(work, "d"))
	if err != nil {
		t.Fatal(err)
	}
	if di.Mode().Perm() != 0o777&^mask {
		t.Errorf("%s: a directory created with 0777 has mode %#o, want %#o", name, di.Mode().Perm(), 0o777&^mask)
	}
}

// TestRlimitCore: the tool has no core dumps (RLIMIT_CORE 0, soft and
// hard) unless the config sets RLIMIT_CORE, and then it has that one, a
// hard limit above 0 included (an OCI config's process.rlimits: moat once
// lowered it to 0 first, and the init could not raise it again).
func TestRlimitCore(t *testing.T) {
	// A host (systemd's default for services and scopes) may give a hard
	// limit of 0; root raises its own first, and the re-run as nobody
	// inherits it.
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_CORE, &lim); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 && !testenv.ReRun() && lim.Max < 2<<20 {
		raised := unix.Rlimit{Cur: lim.Cur, Max: 2 << 20}
		if err := unix.Setrlimit(unix.RLIMIT_CORE, &raised); err == nil {
			t.Cleanup(func() { unix.Setrlimit(unix.RLIMIT_CORE, &lim) })
		}
		// Else (root without CAP_SYS_RESOURCE, in a container) the body
		// says the limit is too low.
	}
	asRootAndNobody(t, func(t *testing.T) {
		var lim unix.Rlimit
		if err := unix.Getrlimit(unix.RLIMIT_CORE, &lim); err != nil {
			t.Fatal(err)
		}
		if lim.Max < 2<<20 {
			// Not a missing capability: an ordinary user may not raise
			// it (systemd's scopes give 0); the root pass raised its own
			// and ran this.
			t.Skipf("not this layout: RLIMIT_CORE's hard limit here is %d, below the 2 MiB the test asks, and only root with CAP_SYS_RESOURCE may raise it", lim.Max)
		}
		const script = "grep 'Max core file size' /proc/self/limits"
		r := mustRun(t, shell(t, script))
		if f := strings.Fields(r.stdout); len(f) < 6 || f[4] != "0" || f[5] != "0" {
			t.Errorf("default: %q, want soft and hard 0", r.stdout)
		}
		cfg := shell(t, script)
		cfg.Rlimits = []specs.POSIXRlimit{{Type: "RLIMIT_CORE", Soft: 1 << 20, Hard: 2 << 20}}
		r = mustRun(t, cfg)
		if f := strings.Fields(r.stdout); len(f) < 6 || f[4] != "1048576" || f[5] != "2097152" {
			t.Errorf("RLIMIT_CORE 1 MiB, 2 MiB: %q", r.stdout)
		}
	})
}

//go:build linux

package nsexec

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// reuseConfig is a sandbox with every writable place a reset must renew.
func reuseConfig(t *testing.T) *Config {
	return &Config{Workdir: workdir(t), Mqueue: true, Network: NetworkLoopback,
		Mounts: []specs.Mount{{Destination: "/scratch", Type: MountTmpfs}}}
}

// dispatchIn runs one dispatch of a reused sandbox in a fresh subdirectory
// work of its workdir, owned by the sandbox's host id, and returns its
// output.
func dispatchIn(t *testing.T, s *Pending, wd, work, script string) (string, Exit) {
	t.Helper()
	dir := filepath.Join(wd, work)
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	id := s.HostIdentity()
	if os.Geteuid() == 0 {
		if err := os.Chown(dir, int(id.UID), int(id.GID)); err != nil {
			t.Fatal(err)
		}
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.ExecWork(context.Background(), work, []string{"/bin/sh", "-c", script}, []string{"PATH=/usr/bin:/bin"},
		Stdio{Stdout: outW, Stderr: outW})
	outW.Close()
	if err != nil {
		t.Fatalf("dispatch %s: %v", work, err)
	}
	var out bytes.Buffer
	out.ReadFrom(outR)
	outR.Close()
	e, err := p.Wait()
	if err != nil {
		t.Fatal(err)
	}
	return out.String(), e
}

// leaveBehind is a tool that leaves something in every place the reset
// renews, and a process that tries to outlive it holding a listening
// abstract socket.
const leaveBehind = `
for d in /tmp /dev/shm /work /scratch; do echo left > $d/left || exit 1; done
: > /dev/mqueue/left || exit 1
ipcmk -M 4096 >/dev/null && ipcmk -S 1 >/dev/null && ipcmk -Q >/dev/null || exit 1
(setsid sh -c 'trap "" TERM; exec sleep 1000' &)
head -c 33554432 /dev/zero | (setsid sh -c 'trap "" TERM; x=$(cat); sleep 1000' &) 
if [ -x /usr/bin/python3 ]; then
	/usr/bin/python3 -c '
import os, socket, time
s = socket.socket(socket.AF_UNIX); s.bind("\0moat-reuse"); s.listen(1)
if os.fork() == 0:
    os.setsid(); time.sleep(1000)
' || exit 1
fi
echo done`

// findNothing reports what of leaveBehind it finds: the processes it sees
// by the shell's own glob (the shell itself and pid 1 are two), files in
// every writable place, SysV objects and the abstract socket.
const findNothing = `
set -- /proc/[0-9]*; echo "procs $#"
for d in /tmp /dev/shm /work /scratch /dev/mqueue; do set -- $d/*; [ -e "$1" ] && echo "found $d"; done
[ "$(ipcs -m -s -q | grep -c '^0x')" = 0 ] || echo "found sysv"
grep -q moat-reuse /proc/net/unix && echo "found socket"
echo checked`

func TestReuseResets(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		cfg := reuseConfig(t)
		s, err := Prepare(context.Background(), cfg, WithReuse())
		if err != nil {
			t.Fatalf("prepare: %v", err)
		}
		defer s.Close()
		if out, e := dispatchIn(t, s, cfg.Workdir, "a", leaveBehind); e.Code != 0 || out != "done\n" {
			t.Fatalf("first dispatch: %q, %+v", out, e)
		}
		if err := s.Reset(context.Background()); err != nil {
			t.Fatalf("reset: %v", err)
		}
		if b, err := os.ReadFile(filepath.Join(cfg.Workdir, "a", "left")); err != nil || string(b) != "left\n" {
			t.Fatalf("the first dispatch's workdir: %q %v", b, err)
		}
		out, e := dispatchIn(t, s, cfg.Workdir, "b", findNothing)
		if e.Code != 0 || out != "procs 2\nchecked\n" {
			t.Fatalf("second dispatch found %q (%+v)", out, e)
		}
		if n := s.Served(); n != 2 {
			t.Fatalf("served %d, want 2", n)
		}
	})
}

// TestReuseDiscards: a change to pid 1 that the reset cannot undo, and a
// dispatch that ends by a signal or had one forwarded, discard the sandbox.
func TestReuseDiscards(t *testing.T) {
	for name, script := range map[string]string{
		"rlimit":   `prlimit --pid 1 --nofile=64:64`,
		"killed":   `kill -9 $$`,
		"signaled": `trap 'exit 0' TERM; kill -TERM 1; sleep 0.2; exit 0`,
	} {
		t.Run(name, func(t *testing.T) {
			cfg := reuseConfig(t)
			s, err := Prepare(context.Background(), cfg, WithReuse())
			if err != nil {
				t.Fatalf("prepare: %v", err)
			}
			defer s.Close()
			out, e := dispatchIn(t, s, cfg.Workdir, "a", script)
			if name != "killed" && e.Code != 0 {
				t.Fatalf("dispatch: %q %+v", out, e)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := s.Reset(ctx); !errors.Is(err, ErrDiscarded) {
				t.Fatalf("reset: %v, want ErrDiscarded (%q)", err, out)
			}
			select {
			case <-s.Done():
			case <-ctx.Done():
				t.Fatal("the discarded sandbox lives on")
			}
		})
	}
}

// TestReuseAttributes: a tool's change to pid 1's nice value, scheduling
// policy or oom_score_adj is either refused (the init's leader thread is
// not the tool's to change) or discards the sandbox.
func TestReuseAttributes(t *testing.T) {
	for name, change := range map[string]string{
		"priority": `renice -n 5 -p 1`,
		"policy":   `chrt --idle -p 0 1`,
		"oom":      `echo 500 > /proc/1/oom_score_adj`,
	} {
		t.Run(name, func(t *testing.T) {
			cfg := reuseConfig(t)
			s, err := Prepare(context.Background(), cfg, WithReuse())
			if err != nil {
				t.Fatalf("prepare: %v", err)
			}
			defer s.Close()
			out, e := dispatchIn(t, s, cfg.Workdir, "a", "("+change+") >/dev/null 2>&1 && echo changed; echo ran")
			if e.Code != 0 {
				t.Fatalf("dispatch: %q %+v", out, e)
			}
			err = s.Reset(context.Background())
			switch out {
			case "changed\nran\n":
				if !errors.Is(err, ErrDiscarded) {
					t.Fatalf("pid 1 changed, reset: %v, want ErrDiscarded", err)
				}
			case "ran\n":
				if err != nil {
					t.Fatalf("nothing changed, reset: %v", err)
				}
				out, _ := dispatchIn(t, s, cfg.Workdir, "b", `cat /proc/1/oom_score_adj; awk '{print $19, $41}' /proc/1/stat`)
				t.Logf("unchanged: %q", out)
			default:
				t.Fatalf("dispatch: %q", out)
			}
		})
	}
}

// TestReuseInitOutOfReach: the reused init keeps its capabilities, so the
// tool must not reach it: it is non-dumpable, so its /proc/1 files are
// not the tool's to read and ptrace is refused.
func TestReuseInitOutOfReach(t *testing.T) {
	cfg := reuseConfig(t)
	s, err := Prepare(context.Background(), cfg, WithReuse())
	if err != nil {
		t.Fatalf("prepare: %v", err)
	}
	defer s.Close()
	for _, work := range []string{"a", "b"} {
		out, e := dispatchIn(t, s, cfg.Workdir, work, `
cat /proc/1/environ >/dev/null 2>&1 && echo "read environ"
ls /proc/1/fd >/dev/null 2>&1 && echo "listed fd"
readlink /proc/1/exe >/dev/null 2>&1 && echo "read exe"
if [ -x /usr/bin/python3 ]; then /usr/bin/python3 -c '
import ctypes; libc = ctypes.CDLL(None, use_errno=True)
print("attached" if libc.ptrace(16, 1, 0, 0) == 0 else "refused")'; else echo refused; fi`)
		if e.Code != 0 || out != "refused\n" {
			t.Fatalf("dispatch %s: %q %+v", work, out, e)
		}
	}
}

func TestReuseRefused(t *testing.T) {
	for name, c := range map[string]struct {
		cfg  Config
		opts []Option
	}{
		"handover": {opts: []Option{WithHandover()}},
		"noproc":   {cfg: Config{NoProc: true}},
		"sysctl":   {cfg: Config{Sysctl: map[string]string{"kernel.shmmax": "1"}}},
		"copyup":   {cfg: Config{Mounts: []specs.Mount{{Destination: "/etc", Type: MountTmpfs, Options: []string{"tmpcopyup"}}}}},
	} {
		_, err := Prepare(context.Background(), &c.cfg, append(c.opts, WithReuse())...)
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != "WithReuse" {
			t.Errorf("%s: %v, want a ConfigError naming WithReuse", name, err)
		}
	}
	// The no-userns rung has no namespace to renew; asked of CheckReuse
	// itself, as Prepare may refuse the rung first (below its Landlock ABI).
	var ce *ConfigError
	if err := CheckReuse(&Config{NoUserNS: true}); !errors.As(err, &ce) || ce.Field != "WithReuse" {
		t.Errorf("nouserns: %v, want a ConfigError naming WithReuse", err)
	}
}

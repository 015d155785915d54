package nsexec

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// landlockProbe is the tool of the Landlock tests: it asks the unix socket
// at /work/fd.sock for a descriptor of a host directory, the shape of a
// leaked host descriptor (CVE-2024-21626) or of a mount-namespace escape,
// and tries what a tool that holds one would: read a file beneath it,
// reopen the directory itself, create a file there, hard-link, truncate
// and rename the file, and execute a host script through /proc/self/fd. Then it does what a tool does in its own tree (the
// workdir, /tmp, /dev/null, /proc, an exec), which must all still work.
// One "name:result" word per attempt.
const landlockProbe = `
import os, socket, subprocess
def attempt(name, f):
    try:
        r = f()
        print(name + ":ok" + ("" if r is None else ":" + str(r)))
    except OSError as e:
        print(name + ":" + (os.strerror(e.errno) if e.errno else str(e)).replace(" ", "_"))
s = socket.socket(socket.AF_UNIX)
s.connect("/work/fd.sock")
_, fds, _, _ = socket.recv_fds(s, 16, 1)
d = fds[0]
attempt("read", lambda: open(os.open("secret", os.O_RDONLY, dir_fd=d)).read().strip())
attempt("reopen", lambda: os.close(os.open(".", os.O_RDONLY, dir_fd=d)))
attempt("create", lambda: os.close(os.open("planted", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=d)))
attempt("link", lambda: os.link("secret", "linked", src_dir_fd=d, dst_dir_fd=d))
attempt("truncate", lambda: os.truncate("/proc/self/fd/%d/secret" % d, 0))
attempt("exec", lambda: subprocess.run(["/proc/self/fd/%d/run.sh" % d], capture_output=True, pass_fds=[d]).stdout.decode().strip())
attempt("rename", lambda: os.rename("secret", "moved", src_dir_fd=d, dst_dir_fd=d))
def inside():
    open("/work/w", "w").write("x")
    os.mkdir("/tmp/d")
    open("/tmp/d/f", "w").write("y")
    os.rename("/tmp/d/f", "/tmp/d/g")
    os.link("/tmp/d/g", "/tmp/d/h")
    os.truncate("/tmp/d/h", 0)
    open("/dev/null", "w").write("z")
    open("/proc/self/status").read()
    return subprocess.run(["/bin/echo", "inside"], capture_output=True).stdout.decode().strip()
attempt("inside", inside)
`

// hostDirServer listens on workdir/fd.sock and hands every connection a
// descriptor of dir, as a host process that leaks one would.
func hostDirServer(t *testing.T, workdir, dir string) {
	t.Helper()
	sock := filepath.Join(workdir, "fd.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	if err := os.Chmod(sock, 0o777); err != nil {
		t.Fatal(err)
	}
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	go func() {
		for {
			c, err := l.AcceptUnix()
			if err != nil {
				return
			}
			c.WriteMsgUnix([]byte{0}, unix.UnixRights(int(d.Fd())), nil)
			c.Close()
		}
	}()
}

// landlockRun runs the probe, cold or prepared, with or without Landlock,
// against a fresh host directory, and returns its words and the directory.
func landlockRun(t *testing.T, prepared, landlock bool) (map[string]string, string) {
	t.Helper()
	host := t.TempDir()
	if err := os.WriteFile(filepath.Join(host, "secret"), []byte("host-secret\n"), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(host, "secret"), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(host, "run.sh"), []byte("#!/bin/sh\necho escaped\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// The sandbox's host identity is another user's: the directory is
	// everyone's, so what stops the tool is the wall under test alone.
	if err := os.Chmod(host, 0o777); err != nil {
		t.Fatal(err)
	}
	cfg := &Config{
		Args:     []string{"/usr/bin/python3", "-c", landlockProbe},
		Env:      []string{"PATH=/usr/bin:/bin", "HOME=/work"},
		Workdir:  workdir(t),
		Landlock: landlock,
	}
	// The socket makes the workdir not empty, so it is not lent: it is
	// everyone's instead.
	if err := os.Chmod(cfg.Workdir, 0o777); err != nil {
		t.Fatal(err)
	}
	hostDirServer(t, cfg.Workdir, host)
	var out string
	if prepared {
		s, err := Prepare(context.Background(), &Config{Workdir: cfg.Workdir, Landlock: landlock})
		if err != nil {
			t.Fatalf("prepare: %v", err)
		}
		var e Exit
		out, e = runPrepared(t, s, cfg.Args, cfg.Env, "")
		if e.Code != 0 {
			t.Fatalf("the probe exited %+v: %s", e, out)
		}
	} else {
		out = mustRun(t, cfg).stdout
	}
	words := map[string]string{}
	for _, w := range strings.Fields(out) {
		name, res, _ := strings.Cut(w, ":")
		words[name] = res
	}
	return words, host
}

// TestLandlockWallsOffTheHost: with Config.Landlock, a tool that holds a
// descriptor of a host directory can neither read, reopen, create, link,
// rename into, truncate nor execute anything beneath it, while everything
// in its own tree works as before; without Landlock the same probe reads
// the host's secret and runs its script (the attack is real, and only the
// wall stops it). Cold and prepared (the C tail in a static build), as
// root and as nobody.
func TestLandlockWallsOffTheHost(t *testing.T) {
	bothInits(t, func(t *testing.T, prepared bool) {
		if LandlockABI() < 1 {
			landlockRefused(t, prepared)
			return
		}
		open, _ := landlockRun(t, prepared, false)
		if open["read"] != "ok:host-secret" || open["truncate"] != "ok" || open["rename"] != "ok" || open["exec"] != "ok:escaped" {
			t.Fatalf("without Landlock the probe got %v: want the host's secret read, truncated and renamed, its script run, or the test shows nothing", open)
		}
		got, host := landlockRun(t, prepared, true)
		walled := []string{"read", "reopen", "create", "link", "rename"}
		if LandlockABI() >= 3 {
			// Truncation is a right of its own from ABI 3 (Linux 6.2);
			// before, Landlock does not handle it.
			walled = append(walled, "truncate")
		}
		for _, name := range walled {
			if got[name] != "Permission_denied" {
				t.Errorf("%s beneath a host directory's descriptor under Landlock: %q, want Permission denied", name, got[name])
			}
		}
		// The script's exec is refused too; subprocess reports it as an
		// exception of its own, so the word is EACCES's however it reads.
		if !strings.Contains(got["exec"], "Permission_denied") {
			t.Errorf("exec of a host script under Landlock: %q, want Permission denied", got["exec"])
		}
		if got["inside"] != "ok:inside" {
			t.Errorf("the tool's own tree under Landlock: %q, want every step to work", got["inside"])
		}
		for _, name := range []string{"planted", "linked", "moved"} {
			if _, err := os.Lstat(filepath.Join(host, name)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s in the host directory: %v, want nothing there", name, err)
			}
		}
		if b, _ := os.ReadFile(filepath.Join(host, "secret")); string(b) != "host-secret\n" && LandlockABI() >= 3 {
			t.Errorf("the host's secret now reads %q", b)
		}
	})
}

// landlockRefused: on a kernel without Landlock, a Config that asks for it
// fails the setup at its step, naming what is missing, and runs nothing.
func landlockRefused(t *testing.T, prepared bool) {
	t.Helper()
	cfg := shell(t, "echo ran")
	cfg.Landlock = true
	var err error
	if prepared {
		var s *Pending
		if s, err = Prepare(context.Background(), &Config{Workdir: cfg.Workdir, Landlock: true}); err == nil {
			_, err = s.Exec(context.Background(), cfg.Args, cfg.Env, Stdio{})
		}
	} else {
		_, err = run(t, cfg)
	}
	var se *SetupError
	if !errors.As(err, &se) || se.Step != StepLandlock || !strings.Contains(se.Error(), "no Landlock") {
		t.Fatalf("Landlock asked on a kernel without it: %v, want a SetupError of the landlock step", err)
	}
	t.Logf("this kernel has no Landlock: refused as it should be (%v)", err)
}

// TestLandlockStdioReopens: under Landlock, a cold sandbox's tool whose
// stdout is a file of the host reopens it by path (a shell's
// "> /dev/stdout", /proc/self/fd/1) to write, as it would without
// Landlock, but not to read: the rule on its stdio has the rights of the
// descriptor's open mode, whatever the file's mode would let it do.
func TestLandlockStdioReopens(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		if LandlockABI() < 1 {
			landlockRefused(t, false)
			return
		}
		out := filepath.Join(t.TempDir(), "out")
		f, err := os.OpenFile(out, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o666)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := os.Chmod(out, 0o666); err != nil {
			t.Fatal(err)
		}
		cfg := shell(t, "echo direct; echo by-path >> /dev/stdout; echo by-fd >> /proc/self/fd/1; "+
			"if (exec 3</proc/self/fd/1) 2>/dev/null; then echo read-back; else echo no-read; fi")
		cfg.Landlock = true
		p, err := Start(context.Background(), cfg, Stdio{Stdout: f})
		if err != nil {
			t.Fatal(err)
		}
		if e, err := p.Wait(); err != nil || e.Code != 0 {
			t.Fatalf("exit %+v, %v", e, err)
		}
		b, _ := os.ReadFile(out)
		if string(b) != "direct\nby-path\nby-fd\nno-read\n" {
			t.Fatalf("the host file reads %q: want the three writes, and no read back through its write-only stdout", b)
		}
	})
}

package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// moatFiles runs moat with the given descriptors as its stdio (nil: a
// buffer) and returns the status and what reached the buffers.
func moatFiles(t *testing.T, stdin, stdout, stderr *os.File, args ...string) result {
	t.Helper()
	cmd := exec.Command(moatBin(t), args...)
	cmd.Dir = os.TempDir()
	var out, errb bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(""), &out, &errb
	if stdin != nil {
		cmd.Stdin = stdin
	}
	if stdout != nil {
		cmd.Stdout = stdout
	}
	if stderr != nil {
		cmd.Stderr = stderr
	}
	return exitResult(t, cmd.Run(), args, &out, &errb)
}

func openFD(t *testing.T, path string, flags int) *os.File {
	t.Helper()
	fd, err := unix.Open(path, flags|unix.O_CLOEXEC, 0o600)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	t.Cleanup(func() { f.Close() })
	return f
}

// TestRunRefusesDirectoryStdio is the reproduction of issue 13 item 5:
// `moat run -- sh -c 'ls /proc/self/fd/0/' 0</` listed the host's root.
// A directory or an O_PATH descriptor on any of stdin, stdout and stderr
// is refused with exit 125 and a message naming the descriptor.
func TestRunRefusesDirectoryStdio(t *testing.T) {
	bothIdentities(t)
	secretDir := t.TempDir()
	os.Chmod(secretDir, 0o755)
	if err := os.WriteFile(filepath.Join(secretDir, "host-secret"), []byte("s3cret"), 0o644); err != nil {
		t.Fatal(err)
	}
	for fd := range 3 {
		for _, kind := range []struct {
			name  string
			flags int
		}{{"directory", unix.O_RDONLY | unix.O_DIRECTORY}, {"O_PATH", unix.O_PATH}} {
			t.Run(kind.name+" on "+strconv.Itoa(fd), func(t *testing.T) {
				door := openFD(t, secretDir, kind.flags)
				files := [3]*os.File{}
				files[fd] = door
				n := strconv.Itoa(fd)
				r := moatFiles(t, files[0], files[1], files[2], "run", "--", "/bin/sh", "-c",
					"ls /proc/self/fd/"+n+"/ >&"+strconv.Itoa((fd+1)%3)+"; cat /proc/self/fd/"+n+"/host-secret >&"+strconv.Itoa((fd+1)%3))
				if r.code != exitSandbox {
					t.Fatalf("exit %d, want %d (stdout %q, stderr %q)", r.code, exitSandbox, r.stdout, r.stderr)
				}
				if strings.Contains(r.stdout+r.stderr, "host-secret") || strings.Contains(r.stdout+r.stderr, "s3cret") {
					t.Fatalf("the tool saw the host directory: stdout %q, stderr %q", r.stdout, r.stderr)
				}
				if fd != 2 && !strings.Contains(r.stderr, stdioNames[fd]+" (descriptor "+n+")") {
					t.Fatalf("stderr %q does not name %s", r.stderr, stdioNames[fd])
				}
			})
		}
	}
}

var stdioNames = [...]string{"stdin", "stdout", "stderr"}

// TestRunKeepsOrdinaryStdio: a regular file, /dev/null, a pty and a socket
// still pass through (pipes are every other CLI test).
func TestRunKeepsOrdinaryStdio(t *testing.T) {
	bothIdentities(t)
	file := filepath.Join(t.TempDir(), "out")
	f := openFD(t, file, unix.O_RDWR|unix.O_CREAT)
	null := openFD(t, "/dev/null", unix.O_RDWR)
	ptmx := openFD(t, "/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY)
	if err := unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	ptn, err := unix.IoctlGetInt(int(ptmx.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	pts := openFD(t, "/dev/pts/"+strconv.Itoa(ptn), unix.O_RDWR|unix.O_NOCTTY)
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	sock, peer := os.NewFile(uintptr(fds[0]), "sock"), os.NewFile(uintptr(fds[1]), "peer")
	defer sock.Close()
	defer peer.Close()
	for name, file := range map[string]*os.File{"file": f, "/dev/null": null, "pty": pts, "socket": sock} {
		t.Run(name, func(t *testing.T) {
			r := moatFiles(t, file, file, nil, "run", "--", "/bin/sh", "-c", "test -e /proc/self/fd/0 && echo ok")
			if r.code != 0 {
				t.Fatalf("%s as stdio: exit %d, stderr %q", name, r.code, r.stderr)
			}
		})
	}
}

//go:build linux

package nsexec

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/conformance/testenv"
	"golang.org/x/sys/unix"
)

// doorKinds are descriptors that must never become a tool's stdio: each
// opens something that outlives the sandbox's mounts.
var doorKinds = map[string]func(t *testing.T) *os.File{
	"directory": func(t *testing.T) *os.File { return openT(t, "/", unix.O_RDONLY|unix.O_DIRECTORY) },
	"O_PATH directory": func(t *testing.T) *os.File {
		return openT(t, t.TempDir(), unix.O_PATH|unix.O_DIRECTORY)
	},
	"O_PATH file": func(t *testing.T) *os.File {
		p := filepath.Join(t.TempDir(), "secret")
		if err := os.WriteFile(p, []byte("s3cret"), 0o600); err != nil {
			t.Fatal(err)
		}
		return openT(t, p, unix.O_PATH)
	},
	"O_PATH symlink": func(t *testing.T) *os.File {
		p := filepath.Join(t.TempDir(), "link")
		if err := os.Symlink("/etc", p); err != nil {
			t.Fatal(err)
		}
		return openT(t, p, unix.O_PATH|unix.O_NOFOLLOW)
	},
	"epoll": func(t *testing.T) *os.File {
		fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
		if err != nil {
			t.Fatal(err)
		}
		return fileT(t, fd, "epoll")
	},
	"pidfd": func(t *testing.T) *os.File {
		fd, err := unix.PidfdOpen(os.Getpid(), 0)
		if err != nil {
			testenv.Skipf(t, "pidfd_open: %v", err)
		}
		return fileT(t, fd, "pidfd")
	},
	"namespace": func(t *testing.T) *os.File { return openT(t, "/proc/self/ns/net", unix.O_RDONLY) },
}

// streamKinds keep working as stdio; each returns the file for stdin and
// the one for stdout and stderr.
var streamKinds = map[string]func(t *testing.T) (in, out *os.File){
	"pipe": func(t *testing.T) (*os.File, *os.File) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close(); w.Close() })
		w2, err := os.OpenFile("/dev/null", os.O_WRONLY, 0) // stdout: nothing reads the pipe
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w2.Close() })
		w.Close()
		return r, w2
	},
	"regular file": func(t *testing.T) (*os.File, *os.File) {
		f := openT(t, filepath.Join(t.TempDir(), "f"), unix.O_RDWR|unix.O_CREAT)
		return f, f
	},
	"/dev/null": func(t *testing.T) (*os.File, *os.File) {
		f := openT(t, "/dev/null", unix.O_RDWR)
		return f, f
	},
	"pty": func(t *testing.T) (*os.File, *os.File) {
		_, pts := openPty(t)
		return pts, pts
	},
	"socket": func(t *testing.T) (*os.File, *os.File) {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		fileT(t, fds[1], "peer")
		f := fileT(t, fds[0], "socket")
		return f, f
	},
	"memfd": func(t *testing.T) (*os.File, *os.File) {
		fd, err := unix.MemfdCreate("moat-stdio", unix.MFD_CLOEXEC)
		if err != nil {
			t.Fatal(err)
		}
		f := fileT(t, fd, "memfd")
		return f, f
	},
}

func openT(t *testing.T, path string, flags int) *os.File {
	t.Helper()
	fd, err := unix.Open(path, flags|unix.O_CLOEXEC, 0o600)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	return fileT(t, fd, path)
}

func fileT(t *testing.T, fd int, name string) *os.File {
	f := os.NewFile(uintptr(fd), name)
	t.Cleanup(func() { f.Close() })
	return f
}

// openPty opens a fresh pseudo-terminal pair (pty(7)).
func openPty(t *testing.T) (ptmx, pts *os.File) {
	t.Helper()
	ptmx = openT(t, "/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY)
	if err := unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlockpt: %v", err)
	}
	n, err := unix.IoctlGetInt(int(ptmx.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("ptsname: %v", err)
	}
	return ptmx, openT(t, "/dev/pts/"+strconv.Itoa(n), unix.O_RDWR|unix.O_NOCTTY)
}

// TestStdioDoorsRefused hands each door as stdin, stdout and stderr to a
// tool that would list and write the host through it. Start must refuse,
// naming the descriptor, before a sandbox exists. As root and as nobody.
func TestStdioDoorsRefused(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		for kind, open := range doorKinds {
			for fd := range 3 {
				t.Run(kind+"/"+stdioNames[fd], func(t *testing.T) {
					door := open(t)
					stdio := Stdio{}
					switch fd {
					case 0:
						stdio.Stdin = door
					case 1:
						stdio.Stdout = door
					case 2:
						stdio.Stderr = door
					}
					cfg := shell(t, "ls /proc/self/fd/"+strconv.Itoa(fd)+"/ && touch /proc/self/fd/"+strconv.Itoa(fd)+"/moat-was-here")
					p, err := Start(context.Background(), cfg, stdio)
					if err == nil {
						p.Wait()
						t.Fatalf("%s as %s was accepted", kind, stdioNames[fd])
					}
					var se *StdioError
					if !errors.As(err, &se) || se.FD != fd {
						t.Fatalf("got %v (%T), want a *StdioError for descriptor %d", err, err, fd)
					}
					if !strings.Contains(err.Error(), stdioNames[fd]) {
						t.Fatalf("the error does not name %s: %v", stdioNames[fd], err)
					}
					entries, _ := os.ReadDir(cfg.Workdir)
					if len(entries) != 0 {
						t.Fatalf("the refused start left %v in the workdir", entries)
					}
				})
			}
		}
		if _, err := os.Stat("/moat-was-here"); err == nil {
			t.Fatal("a tool wrote the host's / through its stdio")
		}
	})
}

// TestStdioStreamsWork: pipes, files, /dev/null, a pty, a socket and a
// memfd still pass through as stdio.
func TestStdioStreamsWork(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		for kind, open := range streamKinds {
			t.Run(kind, func(t *testing.T) {
				in, out := open(t)
				cfg := shell(t, "test -e /proc/self/fd/0 && echo out && echo err >&2")
				p, err := Start(context.Background(), cfg, Stdio{Stdin: in, Stdout: out, Stderr: out})
				if err != nil {
					t.Fatalf("%s as stdio: %v", kind, err)
				}
				st, err := p.Wait()
				if err != nil || st.Code != 0 {
					t.Fatalf("%s as stdio: exit %+v, %v", kind, st, err)
				}
			})
		}
	})
}

package testenv

import (
	"archive/tar"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// Podman is a default podman container recipe for the tests of moat
// inside a container (issue 31): runc, podman's default seccomp profile
// and masked /proc, no network, an offline image of Debian's static
// busybox (never a download), and Dirs bound read-only at the same path.
// As root, or as an ordinary user (rootless podman, PodmanAs).
type Podman struct {
	Bin   string              // podman
	Image string              // the imported image's name
	Dirs  []string            // host directories bound read-only at the same path
	Cred  *syscall.Credential // podman's user, nil for the caller
	Env   []string            // podman's environment when Cred is set
}

// NewPodman imports the image (busybox and links to it for commands, /tmp
// writable by every user, /lib and /lib64 linking into /usr so that a
// bound /usr runs the host's dynamic binaries) into the store of podman's
// user, removed when t ends. It skips (see Skipf) without podman, runc or
// a static busybox.
func NewPodman(t *testing.T, cred *syscall.Credential, env []string, commands ...string) *Podman {
	t.Helper()
	bin, err := exec.LookPath("podman")
	if err != nil {
		Skipf(t, "podman is not installed (Debian: apt-get install podman)")
	}
	if _, err := exec.LookPath("runc"); err != nil {
		Skipf(t, "runc is not installed (Debian: apt-get install runc)")
	}
	bb := staticBusybox(t)
	p := &Podman{Bin: bin, Image: fmt.Sprintf("localhost/moat-podman-test:%d-%d", os.Getpid(), len(t.Name())), Cred: cred, Env: env}
	dir := p.TempDir(t)
	img := filepath.Join(dir, "image.tar")
	if err := os.WriteFile(img, busyboxImage(t, bb, commands), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := p.Command("import", img, p.Image).CombinedOutput(); err != nil {
		t.Fatalf("podman import: %v\n%s", err, b)
	}
	t.Cleanup(func() { p.Command("rmi", "-f", p.Image).Run() })
	return p
}

// PodmanAs is NewPodman for rootless podman, run by the ordinary user
// name (created if missing, as cmd/moat-runtime's engine tests do).
func PodmanAs(t *testing.T, name string, commands ...string) *Podman {
	t.Helper()
	RequireRoot(t) // to create the user and run as it
	if _, err := exec.LookPath("newuidmap"); err != nil {
		Skipf(t, "rootless podman needs newuidmap (Debian: apt-get install uidmap)")
	}
	if out, err := exec.Command("id", "-u", name).Output(); err != nil || len(out) == 0 {
		if out, err := exec.Command("useradd", "-m", "-s", "/bin/sh", name).CombinedOutput(); err != nil {
			t.Fatalf("useradd %s: %v: %s", name, err, out)
		}
	}
	uidOut, _ := exec.Command("id", "-u", name).Output()
	gidOut, _ := exec.Command("id", "-g", name).Output()
	uid, _ := strconv.Atoi(strings.TrimSpace(string(uidOut)))
	gid, _ := strconv.Atoi(strings.TrimSpace(string(gidOut)))
	runDir := fmt.Sprintf("/run/user/%d", uid)
	if err := os.MkdirAll(runDir, 0o700); err != nil {
		t.Fatal(err)
	}
	os.Chown(runDir, uid, gid)
	return NewPodman(t, &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)},
		[]string{"HOME=/home/" + name, "USER=" + name, "XDG_RUNTIME_DIR=" + runDir, "PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"}, commands...)
}

// TempDir is a directory podman's user and the container's can read (a
// test's TempDir is below a 0700 one), removed when t ends.
func (p *Podman) TempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "moat-podman-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	return dir
}

// Command is podman with args, as its user.
func (p *Podman) Command(args ...string) *exec.Cmd {
	cmd := exec.Command(p.Bin, args...)
	if p.Cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.Cred}
		cmd.Env = p.Env
	}
	return cmd
}

// Run runs argv in a fresh container (flags: podman run's own, such as
// --user) and returns its stdout, stderr and exit status. The rlimits are
// this host's (podman's default nofile is above the development host's
// hard limit: cmd/moat-runtime's engine tests say why).
func (p *Podman) Run(t *testing.T, flags []string, argv ...string) (string, string, int) {
	t.Helper()
	var nofile, nproc syscall.Rlimit
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &nofile)
	syscall.Getrlimit(6 /* RLIMIT_NPROC */, &nproc)
	np := min(nproc.Max, 32768)
	args := []string{"run", "--rm", "--runtime", "runc", "--cgroup-manager", "cgroupfs", "--network", "none",
		"--ulimit", fmt.Sprintf("nofile=%d:%d", nofile.Max, nofile.Max), "--ulimit", fmt.Sprintf("nproc=%d:%d", np, np)}
	for _, d := range p.Dirs {
		args = append(args, "-v", d+":"+d+":ro")
	}
	args = append(append(append(args, flags...), p.Image), argv...)
	cmd := p.Command(args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("podman run: %v", err)
	}
	return out.String(), errb.String(), code
}

// staticBusybox is the path of Debian's static busybox, the offline
// image's one binary; it skips (see Skipf) without it.
func staticBusybox(t *testing.T) string {
	t.Helper()
	bb, err := exec.LookPath("busybox")
	if err == nil {
		if b, _ := exec.Command("file", "-L", bb).Output(); !bytes.Contains(b, []byte("statically linked")) {
			err = fmt.Errorf("%s is not static", bb)
		}
	}
	if err != nil {
		Skipf(t, "the offline image needs Debian's busybox-static: %v", err)
	}
	return bb
}

// busyboxImage is the image's root as a tar.
func busyboxImage(t *testing.T, bb string, commands []string) []byte {
	t.Helper()
	bin, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(h *tar.Header, body []byte) {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(body); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"bin", "etc", "proc", "dev", "sys", "run", "work", "usr"} {
		add(&tar.Header{Name: d + "/", Typeflag: tar.TypeDir, Mode: 0o755}, nil)
	}
	add(&tar.Header{Name: "tmp/", Typeflag: tar.TypeDir, Mode: 0o1777}, nil)
	for _, l := range []string{"lib", "lib64"} {
		add(&tar.Header{Name: l, Typeflag: tar.TypeSymlink, Linkname: "usr/" + l, Mode: 0o777}, nil)
	}
	add(&tar.Header{Name: "bin/busybox", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(bin))}, bin)
	for _, c := range append([]string{"sh"}, commands...) {
		add(&tar.Header{Name: "bin/" + c, Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777}, nil)
	}
	passwd := []byte("root:x:0:0:root:/:/bin/sh\n")
	add(&tar.Header{Name: "etc/passwd", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(passwd))}, passwd)
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

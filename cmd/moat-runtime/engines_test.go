package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/conformance/testenv"
	"github.com/moat-sandbox/moat/seccomp/attack"
)

// testImage is the offline image's name in podman's store.
const testImage = "localhost/moat-oci-test:busybox"

// imageTar writes the test image's root as a tar (symlinks kept) and
// returns its bytes.
func imageTar(t *testing.T) []byte {
	t.Helper()
	root := testRootfs(t)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if d.Type()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		h, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		h.Name, _ = filepath.Rel(root, p)
		h.Uid, h.Gid, h.Uname, h.Gname = 0, 0, "", ""
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if info.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			_, err = tw.Write(b)
			return err
		}
		return nil
	})
	if err == nil {
		err = tw.Close()
	}
	if err != nil {
		t.Fatalf("tar the test image: %v", err)
	}
	return buf.Bytes()
}

// cmdOut runs cmd with a timeout and returns stdout, stderr, exit status.
func cmdOut(t *testing.T, cmd *exec.Cmd) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatalf("%v: %v", cmd.Args, err)
	}
	timer := time.AfterFunc(2*time.Minute, func() { cmd.Process.Kill() })
	err := cmd.Wait()
	timer.Stop()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%v: %v", cmd.Args, err)
	}
	return out.String(), errb.String(), code
}

// podman is an engine as one user: root, or an ordinary user (rootless).
type podman struct {
	t    *testing.T
	bin  string
	cred *syscall.Credential
	env  []string // podman's whole environment when set (rootless; a pod's CONTAINERS_CONF)
	n    int
}

func needPodman(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("podman")
	if err != nil {
		testenv.Skipf(t, "podman is not installed (Debian: apt-get install podman)")
	}
	return p
}

// ulimits are the rlimits a container gets. podman asks RLIMIT_NOFILE
// 1048576 by default, which only a process with CAP_SYS_RESOURCE may set
// above its hard limit; the development host's root lacks it (it runs in
// a container), and runc fails there the same way. So nofile is this
// process's hard limit; and nproc must then be given too, since podman
// 4.3 turns it to 1048576 once any --ulimit is given: 32768, podman's
// own default, at most this process's hard limit.
func ulimits() []string {
	var nofile, nproc syscall.Rlimit
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &nofile)
	syscall.Getrlimit(6 /* RLIMIT_NPROC */, &nproc)
	np := min(nproc.Max, 32768)
	return []string{"--ulimit", fmt.Sprintf("nofile=%d:%d", nofile.Max, nofile.Max), "--ulimit", fmt.Sprintf("nproc=%d:%d", np, np)}
}

func (p *podman) cmd(args ...string) *exec.Cmd {
	// cgroupfs: moat makes its cgroups itself, and this host's systemd
	// (if any) does not run podman's scopes.
	all := append([]string{"--runtime", runtimeBin(p.t), "--cgroup-manager", "cgroupfs"}, args...)
	c := exec.Command(p.bin, all...)
	if p.cred != nil {
		c.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	}
	if p.env != nil {
		c.Env = p.env
	}
	return c
}

// name is a container name of its own for one test container, removed
// when the test ends whatever happened (a failed create leaves podman's
// record behind).
func (p *podman) name(t *testing.T) string {
	t.Helper()
	p.n++
	n := fmt.Sprintf("moat-oci-%d-%d", os.Getpid(), p.n)
	t.Cleanup(func() { p.run("rm", "-f", n) })
	return n
}

func (p *podman) run(args ...string) (string, string, int) {
	p.t.Helper()
	return cmdOut(p.t, p.cmd(args...))
}

// runFlags are what every test container gets: no network (moat makes a
// namespace with only lo; the "network" subtest joins podman's own) and
// rlimits this host allows.
func runFlags() []string { return append([]string{"--network", "none"}, ulimits()...) }

// importImage puts the offline test image into this user's store.
func (p *podman) importImage() {
	p.t.Helper()
	// A directory of its own that the engine's user can read (a test's
	// TempDir is below a 0700 one).
	dir, err := os.MkdirTemp("", "moat-oci-import-")
	if err != nil {
		p.t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	f := filepath.Join(dir, "image.tar")
	if err := os.WriteFile(f, imageTar(p.t), 0o644); err != nil {
		p.t.Fatal(err)
	}
	if _, errs, code := p.run("import", f, testImage); code != 0 {
		p.t.Fatalf("podman import: exit %d: %s", code, errs)
	}
}

// podmanChecks is the battery a podman user runs: exit statuses, the
// identity inside, stop (SIGTERM, then SIGKILL), rm -f.
func podmanChecks(t *testing.T, p *podman, root bool) {
	p.importImage()
	run := func(args ...string) (string, string, int) {
		return p.run(append(append([]string{"run", "--rm"}, runFlags()...), append([]string{testImage}, args...)...)...)
	}
	t.Run("exit-status", func(t *testing.T) {
		for script, want := range map[string]int{"exit 3": 3, "true": 0, "kill -9 $$": 137} {
			if _, errs, code := run("/bin/sh", "-c", script); code != want {
				t.Errorf("%q: exit %d, want %d: %s", script, code, want, errs)
			}
		}
		// A command that is not there fails create with runc's words,
		// which podman turns into a shell's statuses, as with runc.
		for name, want := range map[string]int{"/nosuch": 127, "nosuch": 127, "/etc/passwd": 126} {
			if _, errs, code := run(name); code != want || !strings.Contains(errs, name) {
				t.Errorf("run %s: exit %d, want %d and the name: %s", name, code, want, errs)
			}
		}
	})
	t.Run("identity", func(t *testing.T) {
		out, errs, code := run("/bin/sh", "-c", "id -u; cat /proc/self/uid_map; grep -E '^(CapEff|CapBnd|NoNewPrivs):' /proc/self/status")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errs)
		}
		checkIdentity(t, out, root)
	})
	t.Run("root", func(t *testing.T) {
		// podman's root is writable by default (root.readonly false):
		// moat binds the engine's overlay read-write. Rootless the image
		// belongs to the caller, whom the container's root is, so it
		// writes its own directory /work (not / itself, mode 0555, which
		// only a capability would let it write); as root the image is
		// host root's, which moat never maps, so the root is writable
		// only where the image lets others write. --read-only keeps it
		// read-only.
		out, errs, code := run("/bin/sh", "-c", "touch /work/x 2>&1 && echo written")
		want := "written"
		if root {
			want = "Permission denied"
		}
		if !strings.Contains(out, want) {
			t.Errorf("touch /work/x on podman's default root: exit %d, %q, want %q: %s", code, out, want, errs)
		}
		out, errs, code = p.run(append(append([]string{"run", "--rm", "--read-only"}, runFlags()...), testImage, "/bin/sh", "-c", "touch /work/x 2>&1")...)
		if !strings.Contains(out, "Read-only file system") {
			t.Errorf("touch /work/x with --read-only: exit %d, %q, want a read-only root: %s", code, out, errs)
		}
	})
	t.Run("terminal", func(t *testing.T) {
		// -t: conmon passes --console-socket and gets the pty's master.
		out, errs, code := p.run(append(append([]string{"run", "--rm", "-t"}, runFlags()...), testImage, "/bin/sh", "-c", "test -t 0 && test -t 1 && echo tty-ok; exit 4")...)
		if code != 4 || out != "tty-ok\r\n" {
			t.Fatalf("run -t: exit %d, output %q (want 4 and tty-ok through the pty): %s", code, out, errs)
		}
	})
	t.Run("stop", func(t *testing.T) {
		id, errs, code := p.run(append(append([]string{"run", "-d", "--name", p.name(t)}, runFlags()...), testImage, "/bin/sh", "-c", "trap '' TERM; while :; do sleep 0.1; done")...)
		if code != 0 {
			t.Fatalf("run -d: exit %d: %s", code, errs)
		}
		id = strings.TrimSpace(id)
		defer p.run("rm", "-f", id)
		time.Sleep(300 * time.Millisecond)
		start := time.Now()
		if _, errs, code := p.run("stop", "-t", "1", id); code != 0 {
			t.Fatalf("stop: exit %d: %s", code, errs)
		}
		if d := time.Since(start); d < time.Second {
			t.Fatalf("stop of a container ignoring SIGTERM took %v, want the 1 s grace first", d)
		}
		if out, _, _ := p.run("inspect", id, "--format", "{{.State.ExitCode}}"); strings.TrimSpace(out) != "137" {
			t.Fatalf("exit code after stop: %q, want 137 (SIGKILL)", out)
		}
		id2, errs, code := p.run(append(append([]string{"run", "-d", "--name", p.name(t)}, runFlags()...), testImage, "sleep", "100")...)
		if code != 0 {
			t.Fatalf("run -d: exit %d: %s", code, errs)
		}
		id2 = strings.TrimSpace(id2)
		if _, errs, code := p.run("stop", "-t", "10", id2); code != 0 {
			t.Fatalf("stop: exit %d: %s", code, errs)
		}
		if out, _, _ := p.run("inspect", id2, "--format", "{{.State.ExitCode}}"); strings.TrimSpace(out) != "143" {
			t.Fatalf("exit code after stop: %q, want 143 (SIGTERM)", out)
		}
		p.run("rm", id2)
	})
	t.Run("exec", func(t *testing.T) {
		// podman exec goes through conmon: exec --detach --pid-file
		// --process, the waiter's pid reaped by conmon for the status.
		id, errs, code := p.run(append(append([]string{"run", "-d", "--name", p.name(t)}, runFlags()...), testImage, "sleep", "100")...)
		if code != 0 {
			t.Fatalf("run -d: exit %d: %s", code, errs)
		}
		id = strings.TrimSpace(id)
		defer p.run("rm", "-f", id)
		out, errs, code := p.run("exec", id, "/bin/sh", "-c", "echo exec-ok $(id -u); grep NoNewPrivs /proc/self/status; exit 3")
		if code != 3 || !strings.Contains(out, "exec-ok 0") || !strings.Contains(out, "NoNewPrivs:\t1") {
			t.Fatalf("podman exec: exit %d, output %q: %s", code, out, errs)
		}
		out, errs, code = p.run("exec", "-t", id, "/bin/sh", "-c", "test -t 0 && echo tty-ok")
		if code != 0 || out != "tty-ok\r\n" {
			t.Fatalf("podman exec -t: exit %d, output %q: %s", code, out, errs)
		}
		in := p.cmd("exec", "-i", id, "/bin/cat")
		in.Stdin = strings.NewReader("piped\n")
		if out, errs, code := cmdOut(t, in); code != 0 || out != "piped\n" {
			t.Fatalf("podman exec -i: exit %d, output %q: %s", code, out, errs)
		}
		// top lists the container's processes: the pid podman has is
		// the container's init, in the container's pid namespace.
		out, errs, code = p.run("top", id, "pid", "args")
		if code != 0 || !strings.Contains(out, "sleep 100") || strings.Contains(out, "podman") {
			t.Fatalf("podman top: exit %d, output %q: %s", code, out, errs)
		}
	})
	t.Run("rm-f", func(t *testing.T) {
		id, errs, code := p.run(append(append([]string{"run", "-d", "--name", p.name(t)}, runFlags()...), testImage, "sleep", "100")...)
		if code != 0 {
			t.Fatalf("run -d: exit %d: %s", code, errs)
		}
		id = strings.TrimSpace(id)
		pidOut, _, _ := p.run("inspect", id, "--format", "{{.State.Pid}}")
		pid, _ := strconv.Atoi(strings.TrimSpace(pidOut))
		if _, errs, code := p.run("rm", "-f", id); code != 0 {
			t.Fatalf("rm -f: exit %d: %s", code, errs)
		}
		if out, _, _ := p.run("ps", "-a", "-q", "--no-trunc"); strings.Contains(out, id) {
			t.Fatalf("podman still lists %s", id)
		}
		if pid <= 0 {
			t.Fatalf("podman gave pid %q", pidOut)
		}
		deadline := time.Now().Add(5 * time.Second)
		for syscall.Kill(pid, 0) == nil && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if syscall.Kill(pid, 0) == nil {
			t.Fatalf("the container's monitor %d outlived rm -f", pid)
		}
	})
}

// TestPodmanRoot: podman as root runs its containers in moat's sandbox.
func TestPodmanRoot(t *testing.T) {
	testenv.RequireRoot(t)
	p := &podman{t: t, bin: needPodman(t)}
	podmanChecks(t, p, true)
	t.Run("interactive", func(t *testing.T) { podmanInteractive(t, p) })
	t.Run("network", func(t *testing.T) {
		// podman's default network: moat-runtime joins the namespace
		// podman configured (a veth, eth0), every other one new.
		all := append(append([]string{"run", "--rm", "--cap-add", "NET_ADMIN"}, ulimits()...), testImage, "/bin/sh", "-c",
			"cat /proc/net/dev; grep CapEff /proc/self/status; ip link set lo down 2>/dev/null && echo changed || echo refused")
		out, errs, code := p.run(all...)
		eff := capField(out, "CapEff")
		if code != 0 || !strings.Contains(out, "eth0:") || eff&(1<<12) == 0 || !strings.HasSuffix(out, "refused\n") {
			t.Fatalf("default network with --cap-add NET_ADMIN: exit %d, output %q, want eth0 from podman's namespace, CAP_NET_ADMIN inside the user namespace and lo left as it is: %s", code, out, errs)
		}
	})
	t.Run("uidmap", func(t *testing.T) {
		// The config's own user namespace: the process's ids map to what
		// its mappings say (podman chowns the image for them), never to
		// host root.
		run := func(m string) (string, string, int) {
			return p.run(append(append([]string{"run", "--rm", "--uidmap", m, "--gidmap", m}, runFlags()...), testImage, "/bin/sh", "-c", "cat /proc/self/uid_map; stat -c %u /bin/busybox")...)
		}
		out, errs, code := run("0:300000:65536")
		if f := strings.Fields(out); code != 0 || len(f) != 4 || f[0] != "0" || f[1] != "300000" || f[2] != "65536" || f[3] != "0" {
			t.Fatalf("--uidmap 0:300000:65536: exit %d, output %q, want the map as given and the image owned by uid 0: %s", code, out, errs)
		}
		if _, errs, code := run("0:0:65536"); code == 0 || !strings.Contains(errs, "host root") {
			t.Fatalf("--uidmap 0:0:65536: exit %d, want a refusal naming host root: %s", code, errs)
		}
	})
	t.Run("limits", func(t *testing.T) {
		run := func(extra []string, args ...string) (string, string, int) {
			all := append(append(append([]string{"run", "--rm"}, runFlags()...), extra...), append([]string{testImage}, args...)...)
			// In a directory of the test's: conmon writes a file "oom"
			// into its working directory when the container is OOM-killed.
			c := p.cmd(all...)
			c.Dir = t.TempDir()
			return cmdOut(t, c)
		}
		_, errs, code := run([]string{"--pids-limit", "8"}, "/bin/sh", "-c", "for i in $(seq 20); do sleep 2 & done; wait")
		if !strings.Contains(errs, "fork") {
			t.Fatalf("--pids-limit 8 with 20 children: exit %d, stderr %q, want a refused fork", code, errs)
		}
		_, errs, code = run([]string{"--memory", "32m"}, "/bin/sh", "-c", "head -c 256m /dev/zero | tail -n 1 > /dev/null")
		if code != 137 {
			t.Fatalf("--memory 32m with 256 MiB in one line: exit %d, want 137 (OOM kill): %s", code, errs)
		}
	})
}

// rootlessUser is the ordinary user the rootless podman test runs as,
// created when missing (useradd gives it a subordinate id range).
const rootlessUser = "moat-oci"

// TestPodmanRootless: podman run by an ordinary user, moat-runtime in
// podman's own user namespace.
func TestPodmanRootless(t *testing.T) {
	podmanChecks(t, rootlessPodman(t), false)
}

// rootlessPodman is podman as an ordinary user, created if missing.
func rootlessPodman(t *testing.T) *podman {
	testenv.RequireRoot(t) // to create the user and run as it
	bin := needPodman(t)
	if _, err := exec.LookPath("newuidmap"); err != nil {
		testenv.Skipf(t, "rootless podman needs newuidmap (Debian: apt-get install uidmap)")
	}
	if out, err := exec.Command("id", "-u", rootlessUser).Output(); err != nil || len(out) == 0 {
		if out, err := exec.Command("useradd", "-m", "-s", "/bin/sh", rootlessUser).CombinedOutput(); err != nil {
			t.Fatalf("useradd %s: %v: %s", rootlessUser, err, out)
		}
	}
	uidOut, _ := exec.Command("id", "-u", rootlessUser).Output()
	gidOut, _ := exec.Command("id", "-g", rootlessUser).Output()
	uid, _ := strconv.Atoi(strings.TrimSpace(string(uidOut)))
	gid, _ := strconv.Atoi(strings.TrimSpace(string(gidOut)))
	home := "/home/" + rootlessUser
	runDir := fmt.Sprintf("/run/user/%d", uid)
	if err := os.MkdirAll(runDir, 0o700); err != nil {
		t.Fatal(err)
	}
	os.Chown(runDir, uid, gid)
	return &podman{t: t, bin: bin, cred: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)},
		env: []string{"HOME=" + home, "USER=" + rootlessUser, "XDG_RUNTIME_DIR=" + runDir, "PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"}}
}

// TestContainerd: containerd from Debian's packages, started with its own
// root, state and socket in a temporary directory, runs the imported
// offline image with moat-runtime as its runc binary.
func TestContainerd(t *testing.T) {
	pc := newContainerd(t, "moat-test", "docker.io/moat/oci-test:busybox")
	c, ctr, sock := pc.c, pc.ctr, pc.sock
	rt := runtimeBin(t)
	for script, want := range map[string]int{"exit 5": 5, "id -u; touch /x 2>&1": 1, "kill -9 $$": 137} {
		out, errs, code := c("run", "--rm", "--runc-binary", rt, "docker.io/moat/oci-test:busybox", "t-"+strconv.Itoa(want), "/bin/sh", "-c", script)
		if code != want {
			t.Errorf("ctr run %q: exit %d, want %d: %s%s", script, code, want, out, errs)
		}
		// ctr's root is writable (root.readonly false), but the image is
		// host root's, which moat never maps into the container.
		if want == 1 && !strings.HasPrefix(out, "0\n") || want == 1 && !strings.Contains(out, "Permission denied") {
			t.Errorf("ctr run %q: output %q, want uid 0 and a root it may not write", script, out)
		}
	}
	ctrIdentity(t, c, rt, "docker.io/moat/oci-test:busybox")
	out, errs, code := c("run", "--rm", "--read-only", "--runc-binary", rt, "docker.io/moat/oci-test:busybox", "t-ro", "/bin/sh", "-c", "touch /x 2>&1")
	if !strings.Contains(out, "Read-only file system") {
		t.Errorf("ctr run --read-only: exit %d, %q, want a read-only root: %s", code, out, errs)
	}
	// ctr run -t: the shim reads create's stdout and stderr until they
	// close, which a monitor that kept them never let happen (it hung).
	code, out = onTerminal(t, exec.Command(ctr, "--address", sock, "--namespace", "moat-test", "run", "--rm", "-t", "--runc-binary", rt,
		"docker.io/moat/oci-test:busybox", "t-tty", "/bin/sh", "-c", "test -t 0 && echo tty-ok; exit 6"), 30*time.Second)
	if code != 6 || !strings.Contains(out, "tty-ok") {
		t.Errorf("ctr run -t: exit %d, output %q", code, out)
	}
	// ctr task exec: the runc shim runs exec --detach --pid-file
	// --process and reaps the waiter for the exec'd process's status.
	if _, errs, code := c("run", "-d", "--runc-binary", rt, "docker.io/moat/oci-test:busybox", "t-exec", "sleep", "100"); code != 0 {
		t.Fatalf("ctr run -d: exit %d: %s", code, errs)
	}
	defer func() {
		c("task", "kill", "-s", "KILL", "t-exec")
		for i := 0; i < 50; i++ {
			if _, _, code := c("task", "delete", "t-exec"); code == 0 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		c("container", "delete", "t-exec")
	}()
	out, errs, code = c("task", "exec", "--exec-id", "e1", "t-exec", "/bin/sh", "-c", "echo exec-ok; exit 4")
	if code != 4 || out != "exec-ok\n" {
		t.Errorf("ctr task exec: exit %d, output %q: %s", code, out, errs)
	}
	out, errs, code = c("task", "exec", "--exec-id", "e2", "t-exec", "/bin/sh", "-c", "kill -TERM $$")
	if code != 143 {
		t.Errorf("ctr task exec of a process killed by SIGTERM: exit %d, output %q: %s", code, out, errs)
	}
}

// ociArchive builds an OCI image archive of the test image (one
// uncompressed layer) named name, as ctr images import reads it.
func ociArchive(t *testing.T, name string) []byte {
	t.Helper()
	return testenv.OCIArchive(name, imageTar(t), testenv.OCIConfig{Env: []string{"PATH=/bin"}})
}

// TestPodmanHostile runs moat's hostile syscall battery inside a podman
// container on moat-runtime: with podman's profile switched off
// (seccomp=unconfined) the container gets moat's own allowlist, and every
// attack must fail the way moat's sandbox makes it fail.
func TestPodmanHostile(t *testing.T) {
	testenv.RequireRoot(t)
	p := &podman{t: t, bin: needPodman(t)}
	goBin, err := exec.LookPath("go")
	if err != nil {
		testenv.Skipf(t, "the attacker program is built from source and needs the go command")
	}
	dir, err := os.MkdirTemp("", "moat-oci-attacker-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	bin := filepath.Join(dir, "attacker")
	build := exec.Command(goBin, "build", "-o", bin, "./testdata/attacker")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the attacker: %v\n%s", err, out)
	}
	p.importImage()
	out, errs, code := p.run(append(append([]string{"run", "--rm", "--security-opt", "seccomp=unconfined", "-v", bin + ":/attacker:ro"}, runFlags()...), testImage, "/attacker")...)
	if code != 0 {
		t.Fatalf("attacker: exit %d: %s", code, errs)
	}
	checkAttackReport(t, out, "inside the podman container")
}

// checkAttackReport checks the hostile syscall battery's report (the
// attacker's JSON, each probe's errno): every probe reported, and each one
// was refused as its Want says, where is where it ran.
func checkAttackReport(t *testing.T, out, where string) {
	t.Helper()
	var got map[string]int
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("attacker output %q: %v", out, err)
	}
	for _, pr := range attack.Probes() {
		e, ok := got[pr.Name]
		if !ok {
			t.Errorf("attack %q did not report", pr.Name)
			continue
		}
		switch errno := syscall.Errno(e); pr.Want {
		case attack.Deny:
			if errno != syscall.EPERM {
				t.Errorf("%s returned %v %s, want EPERM from moat's filter", pr.Name, errno, where)
			}
		case attack.ENOSYS:
			if errno != syscall.ENOSYS {
				t.Errorf("%s returned %v %s, want ENOSYS", pr.Name, errno, where)
			}
		}
	}
}

package main

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

	"github.com/moat-sandbox/moat/conformance/testenv"
)

// moat in a default podman container (runc, podman's default seccomp
// profile, a masked /proc), as its root and as an ordinary user in it:
// the release binary bound in. Today's
// issue 31 was `moat run -- /bin/true` exiting 125 with "sandbox setup
// proc /proc: operation not permitted" and moat doctor's userns FAILED.
// Now it runs in the no-proc mode, says so in one warning line, and the
// in-sandbox probes that still apply hold; strict, which requires full
// mode, is refused with 125 naming it.
func TestInPodmanContainer(t *testing.T) {
	testenv.RequireRoot(t)
	c := newContainer(t)
	for _, user := range []struct {
		name  string
		flags []string
	}{{"root", nil}, {"nobody", []string{"--user", "65534:65534"}}} {
		t.Run(user.name, func(t *testing.T) { podmanNoProc(t, c, user.flags) })
	}

	// moat doctor names the mode and what it drops; the default policy
	// runs degraded, strict is refused.
	out, errs, _ := c.run(t, nil, "/moat/moat doctor")
	for _, want := range []string{"userns    ok", "mode      degraded  no-proc: drops /proc, sysctls, hostname", "refused: strict", "sandboxes run in mode no-proc"} {
		if !strings.Contains(out, want) {
			t.Errorf("moat doctor in the container does not say %q:\n%s%s", want, out, errs)
		}
	}

	out, errs, code := c.run(t, nil, "/moat/moat run --policy strict -- /bin/true")
	if code != exitSandbox || !strings.Contains(errs, `policy "strict" requires mode full`) || !strings.Contains(errs, "no-proc") {
		t.Errorf("strict in the no-proc mode: exit %d, %q %q; want 125 naming the required mode and the one this host allows", code, out, errs)
	}
}

// The same with podman run by an ordinary user (rootless podman: the
// container is in a user namespace of that user's, moat's sandbox in one
// inside it).
func TestInRootlessPodmanContainer(t *testing.T) {
	testenv.RequireRoot(t) // to create the user and run as it
	if _, err := exec.LookPath("newuidmap"); err != nil {
		testenv.Skipf(t, "rootless podman needs newuidmap (Debian: apt-get install uidmap)")
	}
	const user = "moat-oci" // cmd/moat-runtime's rootless podman user too
	if out, err := exec.Command("id", "-u", user).Output(); err != nil || len(out) == 0 {
		if out, err := exec.Command("useradd", "-m", "-s", "/bin/sh", user).CombinedOutput(); err != nil {
			t.Fatalf("useradd %s: %v: %s", user, err, out)
		}
	}
	uidOut, _ := exec.Command("id", "-u", user).Output()
	gidOut, _ := exec.Command("id", "-g", user).Output()
	uid, _ := strconv.Atoi(strings.TrimSpace(string(uidOut)))
	gid, _ := strconv.Atoi(strings.TrimSpace(string(gidOut)))
	runDir := fmt.Sprintf("/run/user/%d", uid)
	if err := os.MkdirAll(runDir, 0o700); err != nil {
		t.Fatal(err)
	}
	os.Chown(runDir, uid, gid)
	c := newContainerAs(t, &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)},
		[]string{"HOME=/home/" + user, "USER=" + user, "XDG_RUNTIME_DIR=" + runDir, "PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"})
	podmanNoProc(t, c, nil)
}

// podmanNoProc: moat run works in the container as the user flags name,
// with one warning line, and the probes that still apply hold.
func podmanNoProc(t *testing.T, c *podmanBox, flags []string) {
	out, errs, code := c.run(t, flags, "/moat/moat run -- /bin/true")
	if code != 0 {
		t.Fatalf("moat run -- /bin/true in a default podman container: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	warning := ""
	for _, l := range strings.Split(errs, "\n") {
		if strings.Contains(l, "warning: mode") {
			if warning != "" {
				t.Fatalf("more than one mode warning:\n%s", errs)
			}
			warning = l
		}
	}
	for _, want := range []string{"mode no-proc", "mount_too_revealing", "drops /proc", "hostname"} {
		if !strings.Contains(warning, want) {
			t.Errorf("the mode warning %q does not say %q", warning, want)
		}
	}

	// The probes that still apply, each in a sandbox of its own: no host
	// (container) file, an empty /proc, no capability and no_new_privs
	// (setpriv asks capget and prctl, not /proc), moat's seccomp filter
	// (unshare is allowed by podman's profile, refused by moat's), only
	// lo, and the uts namespace still its own.
	script := `echo container-secret > /secret
M="/moat/moat run --"
echo "secret $($M cat /secret 2>/dev/null; echo $?)"
echo "proc [$($M ls -A /proc)]"
$M setpriv -d | sed 's/^/privs /'
$M unshare -U true 2>/dev/null; echo "unshare $?"
echo "links $($M ip -o link | cut -d: -f2 | tr -d ' \n')"
echo "uts $($M sh -c 'hostname sandbox-renamed 2>/dev/null; echo $?')"`
	out, errs, code = c.run(t, flags, script)
	if code != 0 {
		t.Fatalf("the probes: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	got := map[string][]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		k, v, _ := strings.Cut(l, " ")
		got[k] = append(got[k], v)
	}
	one := func(k string) string {
		if len(got[k]) != 1 {
			t.Fatalf("probe %s: %q\nstdout: %s\nstderr: %s", k, got[k], out, errs)
		}
		return got[k][0]
	}
	if s := one("secret"); s != "1" {
		t.Errorf("cat of a file of the container at /secret inside the sandbox: %q, want exit 1 and nothing read", s)
	}
	if s := one("proc"); s != "[]" {
		t.Errorf("/proc in the no-proc mode lists %s, want nothing", s)
	}
	privs := strings.Join(got["privs"], "\n")
	for _, want := range []string{"uid: 1000", "no_new_privs: 1", "Inheritable capabilities: [none]", "Ambient capabilities: [none]", "Capability bounding set: [none]"} {
		if !strings.Contains(privs, want) {
			t.Errorf("setpriv -d in the sandbox says %q, want %q in it", privs, want)
		}
	}
	if s := one("unshare"); s == "0" {
		t.Errorf("unshare -U in the sandbox succeeded: moat's seccomp filter is not there")
	}
	if s := one("links"); s != "lo" {
		t.Errorf("network interfaces in the sandbox: %q, want only lo", s)
	}
	if s := one("uts"); s == "0" {
		t.Errorf("the tool renamed its host: sethostname succeeded without a capability")
	}
}

// podmanBox is one default podman container recipe: an offline image of
// Debian's static busybox, the release moat bound read-only at /moat.
type podmanBox struct {
	podman, image, bin string
	cred               *syscall.Credential // podman's user, nil for root
	env                []string            // podman's environment when rootless
}

func newContainer(t *testing.T) *podmanBox { return newContainerAs(t, nil, nil) }

func newContainerAs(t *testing.T, cred *syscall.Credential, env []string) *podmanBox {
	t.Helper()
	podman, err := exec.LookPath("podman")
	if err != nil {
		testenv.Skipf(t, "podman is not installed (Debian: apt-get install podman)")
	}
	if _, err := exec.LookPath("runc"); err != nil {
		testenv.Skipf(t, "runc is not installed (Debian: apt-get install runc)")
	}
	bb, err := exec.LookPath("busybox")
	if err == nil {
		if b, _ := exec.Command("file", "-L", bb).Output(); !bytes.Contains(b, []byte("statically linked")) {
			err = fmt.Errorf("%s is not static", bb)
		}
	}
	if err != nil {
		testenv.Skipf(t, "the offline image needs Debian's busybox-static: %v", err)
	}
	script, _ := filepath.Abs("../../.ci/build-static")
	if _, err := os.Stat(script); err != nil {
		t.Skip("not in a source checkout: " + err.Error())
	}
	// Directories the container's root can read (a test's TempDir is
	// below a 0700 one).
	dir, err := os.MkdirTemp("", "moat-container-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	c := &podmanBox{podman: podman, image: fmt.Sprintf("localhost/moat-container-test:%d", os.Getpid()), bin: filepath.Join(dir, "bin"), cred: cred, env: env}
	if b, err := exec.Command("bash", script, c.bin).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", script, err, b)
	}
	img := filepath.Join(dir, "image.tar")
	if err := os.WriteFile(img, busyboxImage(t, bb), 0o644); err != nil { // podman's user reads it
		t.Fatal(err)
	}
	if b, err := c.command("import", img, c.image).CombinedOutput(); err != nil {
		t.Fatalf("podman import: %v\n%s", err, b)
	}
	t.Cleanup(func() { c.command("rmi", "-f", c.image).Run() })
	return c
}

// command is podman with args as the box's user.
func (c *podmanBox) command(args ...string) *exec.Cmd {
	cmd := exec.Command(c.podman, args...)
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
		cmd.Env = c.env
	}
	return cmd
}

// run runs script with sh in a fresh default container (flags: podman
// run's own, such as --user): runc, podman's
// default seccomp profile and masked /proc, no network, and the rlimits
// this host allows (podman's default nofile is above the development
// host's hard limit; cmd/moat-runtime's engine tests say why).
func (c *podmanBox) run(t *testing.T, flags []string, script string) (string, string, int) {
	t.Helper()
	var nofile, nproc syscall.Rlimit
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &nofile)
	syscall.Getrlimit(6 /* RLIMIT_NPROC */, &nproc)
	np := min(nproc.Max, 32768)
	args := append([]string{"run", "--rm", "--runtime", "runc", "--cgroup-manager", "cgroupfs", "--network", "none",
		"--ulimit", fmt.Sprintf("nofile=%d:%d", nofile.Max, nofile.Max), "--ulimit", fmt.Sprintf("nproc=%d:%d", np, np),
		"-v", c.bin + ":/moat:ro"}, flags...)
	cmd := c.command(append(args, c.image, "/bin/sh", "-c", script)...)
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

// containerCommands are the busybox links the image gets.
var containerCommands = []string{"sh", "true", "cat", "ls", "echo", "sed", "cut", "tr", "setpriv", "unshare", "ip", "hostname", "id"}

// busyboxImage is the image's root as a tar: /bin/busybox and its links,
// the directories moat and runc need, a passwd.
func busyboxImage(t *testing.T, bb string) []byte {
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
	for _, d := range []string{"bin", "etc", "proc", "dev", "sys", "run", "work", "moat"} {
		add(&tar.Header{Name: d + "/", Typeflag: tar.TypeDir, Mode: 0o755}, nil)
	}
	// Where moat makes its workdirs, as any user.
	add(&tar.Header{Name: "tmp/", Typeflag: tar.TypeDir, Mode: 0o1777}, nil)
	add(&tar.Header{Name: "bin/busybox", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(bin))}, bin)
	for _, c := range containerCommands {
		add(&tar.Header{Name: "bin/" + c, Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777}, nil)
	}
	passwd := []byte("root:x:0:0:root:/:/bin/sh\n")
	add(&tar.Header{Name: "etc/passwd", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(passwd))}, passwd)
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

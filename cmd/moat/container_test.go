package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
	c, moat := newContainer(t, "")
	for _, user := range []struct {
		name  string
		flags []string
	}{{"root", nil}, {"nobody", []string{"--user", "65534:65534"}}} {
		t.Run(user.name, func(t *testing.T) {
			containerNoProc(t, func(argv ...string) (string, string, int) { return c.Run(t, user.flags, argv...) }, moat, true)
		})
	}

	// moat doctor names the mode and what it drops; the default policy
	// runs degraded, strict is refused.
	out, errs, _ := c.Run(t, nil, moat, "doctor")
	for _, want := range []string{"userns    ok", "mode      degraded  no-proc: drops /proc, sysctls, hostname", "refused: strict", "sandboxes run in mode no-proc"} {
		if !strings.Contains(out, want) {
			t.Errorf("moat doctor in the container does not say %q:\n%s%s", want, out, errs)
		}
	}

	out, errs, code := c.Run(t, nil, moat, "run", "--policy", "strict", "--", "/bin/true")
	if code != exitSandbox || !strings.Contains(errs, `policy "strict" requires mode full`) || !strings.Contains(errs, "no-proc") {
		t.Errorf("strict in the no-proc mode: exit %d, %q %q; want 125 naming the required mode and the one this host allows", code, out, errs)
	}
}

// The same with podman run by an ordinary user (rootless podman: the
// container is in a user namespace of that user's, moat's sandbox in one
// inside it).
func TestInRootlessPodmanContainer(t *testing.T) {
	c, moat := newContainer(t, "moat-oci") // cmd/moat-runtime's rootless podman user too
	containerNoProc(t, func(argv ...string) (string, string, int) { return c.Run(t, nil, argv...) }, moat, true)
}

// containerNoProc: moat run works in the container (run runs argv in a
// fresh one) with one warning line, and the probes that still apply hold.
// hostname says that the container's seccomp profile refuses sethostname
// (podman's does), so the warning names the hostname among the drops.
func containerNoProc(t *testing.T, run func(argv ...string) (string, string, int), moat string, hostname bool) {
	t.Helper()
	out, errs, code := run(moat, "run", "--", "/bin/true")
	if code != 0 {
		t.Fatalf("moat run -- /bin/true in a default container: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
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
		if want == "hostname" && !hostname {
			if strings.Contains(warning, "hostname:") {
				t.Errorf("the mode warning %q drops the hostname, which no filter around moat refuses here", warning)
			}
			continue
		}
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
M="$0 run --"
echo "secret $($M cat /secret 2>/dev/null; echo $?)"
echo "proc [$($M ls -A /proc)]"
$M setpriv -d | sed 's/^/privs /'
$M unshare -U true 2>/dev/null; echo "unshare $?"
echo "links $($M ip -o link | cut -d: -f2 | tr -d ' \n')"
echo "uts $($M sh -c 'hostname sandbox-renamed 2>/dev/null; echo $?')"`
	out, errs, code = run("/bin/sh", "-c", script, moat)
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

// newContainer is the default podman container recipe (testenv.Podman)
// as user's (rootless podman; "": root), with the release moat built from this
// checkout (.ci/build-static) bound in read-only at its host path.
func newContainer(t *testing.T, user string) (*testenv.Podman, string) {
	t.Helper()
	script, _ := filepath.Abs("../../.ci/build-static")
	if _, err := os.Stat(script); err != nil {
		t.Skip("not in a source checkout: " + err.Error())
	}
	var p *testenv.Podman
	if user == "" {
		p = testenv.NewPodman(t, nil, nil, containerCommands...)
	} else {
		p = testenv.PodmanAs(t, user, containerCommands...)
	}
	bin := filepath.Join(p.TempDir(t), "bin")
	if b, err := exec.Command("bash", script, bin).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", script, err, b)
	}
	p.Dirs = append(p.Dirs, bin)
	return p, filepath.Join(bin, "moat")
}

// containerCommands are the busybox links the image gets.
var containerCommands = []string{"true", "cat", "ls", "echo", "sed", "cut", "tr", "setpriv", "unshare", "ip", "hostname", "id"}

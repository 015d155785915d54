package main

import (
	"github.com/moat-sandbox/moat/nsexec"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/conformance/testenv"
)

// The offline image in the test's containerd, once run as its root and
// once as nobody (ctr run has no --user: the image's config says who).
const (
	ctrRootImage   = "docker.io/moat/in-ctr:root"
	ctrNobodyImage = "docker.io/moat/in-ctr:nobody"
)

// moat in a default containerd container (`ctr run`: containerd's runc
// shim, ctr's default spec with its masked /proc paths, no seccomp
// profile of ctr's own unless asked), as the container's root and as
// nobody, with the release binary bound in: the same as in a default
// podman container (TestInPodmanContainer). moat runs in the no-proc
// mode, says so in one warning line, the probes that still apply hold,
// and moat doctor's userns and mode lines agree that sandboxes run, in
// no-proc; strict, which requires full mode, is refused with 125. Under
// containerd's default seccomp profile (--seccomp) moat runs in no-userns.
func TestInContainerdContainer(t *testing.T) {
	c, moat := newCtrContainer(t)
	for _, user := range []struct{ name, image, id string }{{"root", ctrRootImage, "0"}, {"nobody", ctrNobodyImage, "65534"}} {
		t.Run(user.name, func(t *testing.T) {
			run := func(argv ...string) (string, string, int) { return c.Run(t, user.image, nil, argv...) }
			if out, errs, _ := run("id", "-u"); strings.TrimSpace(out) != user.id {
				t.Fatalf("id -u in the container: %q %q, want %s", out, errs, user.id)
			}
			containerNoProc(t, run, moat, false)
			out, errs, _ := run(moat, "doctor")
			for _, want := range []string{"userns    ok", "mode      degraded  no-proc: drops /proc, sysctls", "refused: strict", "sandboxes run in mode no-proc"} {
				if !strings.Contains(out, want) {
					t.Errorf("moat doctor in the container does not say %q:\n%s%s", want, out, errs)
				}
			}
		})
	}
	out, errs, code := c.Run(t, ctrRootImage, nil, moat, "run", "--policy", "strict", "--", "/bin/true")
	if code != exitSandbox || !strings.Contains(errs, `policy "strict" requires mode full`) || !strings.Contains(errs, "no-proc") {
		t.Errorf("strict in the no-proc mode: exit %d, %q %q; want 125 naming the required mode and the one this host allows", code, out, errs)
	}

	// With containerd's default seccomp profile (ctr run --seccomp, the
	// one a pod's RuntimeDefault gets), unshare needs CAP_SYS_ADMIN, which
	// the container lacks: no user namespace can be made, and moat runs
	// in the no-userns rung, said in its one warning line; doctor's
	// userns line says none and its mode line no-userns. Below the rung's
	// Landlock ABI it refuses with 125 naming both ABIs.
	out, errs, code = c.Run(t, ctrRootImage, []string{"--seccomp"}, moat, "run", "--", "/bin/sh", "-c", "echo in; exit 3")
	if nsexec.LandlockABI() < nsexec.NoUserNSMinABI {
		if code != exitSandbox || !strings.Contains(errs, "Landlock ABI") {
			t.Errorf("moat run under containerd's seccomp profile, Landlock ABI %d: exit %d, %q %q; want 125 naming the ABIs", nsexec.LandlockABI(), code, out, errs)
		}
		return
	}
	if code != 3 || strings.TrimSpace(out) != "in" || strings.Count(errs, "warning: mode no-userns") != 1 || !strings.Contains(errs, "forbids new namespaces") {
		t.Errorf("moat run under containerd's seccomp profile: exit %d, %q %q; want 3, in and one warning naming mode no-userns and why", code, out, errs)
	}
	out, errs, _ = c.Run(t, ctrRootImage, []string{"--seccomp"}, moat, "doctor")
	if !strings.Contains(out, "userns    none") || !strings.Contains(out, "mode      degraded  no-userns") {
		t.Errorf("moat doctor under containerd's seccomp profile: want userns none, mode no-userns:\n%s%s", out, errs)
	}
}

// newCtrContainer is a containerd of the test's own with the offline
// image imported as ctrRootImage and ctrNobodyImage, and the release moat
// built from this checkout (.ci/build-static) bound in read-only at its
// host path.
func newCtrContainer(t *testing.T) (*testenv.Containerd, string) {
	t.Helper()
	script, _ := filepath.Abs("../../.ci/build-static")
	if _, err := os.Stat(script); err != nil {
		t.Skip("not in a source checkout: " + err.Error())
	}
	c := testenv.NewContainerd(t, "moat-test")
	c.ImportBusybox(t, ctrRootImage, "", containerCommands...)
	c.ImportBusybox(t, ctrNobodyImage, "65534:65534", containerCommands...)
	bin := filepath.Join(c.TempDir(t), "bin")
	if b, err := exec.Command("bash", script, bin).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", script, err, b)
	}
	c.Dirs = append(c.Dirs, bin)
	return c, filepath.Join(bin, "moat")
}

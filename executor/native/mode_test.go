package native_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/conformance"
	"github.com/moat-sandbox/moat/conformance/testenv"
	"github.com/moat-sandbox/moat/executor/native"
	"github.com/moat-sandbox/moat/nsexec"
	"github.com/moat-sandbox/moat/policies"
)

// The kit's claim for the no-proc rung passes in it, as root and as
// nobody: every check but the pid one, whose probe needs /proc.
func TestConformanceNoProc(t *testing.T) {
	conformance.Run(t, noProcProvider, noProcClaim)
}

func TestConformanceNoProcAsNobody(t *testing.T) {
	if testenv.RunAsUser(t, testenv.NobodyUID, testenv.NobodyGID) {
		return
	}
	conformance.Run(t, noProcProvider, noProcClaim)
}

var (
	noProcProvider = policyProvider("default", native.WithMode(nsexec.ModeNoProc))
	noProcClaim    = conformance.WithIsolation(conformance.ModeIsolation(string(nsexec.ModeNoProc)))
)

// The posture names the mode and what it drops; the tool has an empty /proc.
func TestNoProcModePosture(t *testing.T) {
	p, err := native.New(native.WithMode(nsexec.ModeNoProc), native.WithoutCgroups())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	n := p.Posture().Isolation.Native
	if n.Mode != "no-proc" || len(n.ModeDrops) == 0 || !strings.Contains(strings.Join(n.ModeDrops, " "), "/proc") || n.ModeReason == "" {
		t.Fatalf("posture mode %q, reason %q, drops %q: want no-proc, why, and /proc among the drops", n.Mode, n.ModeReason, n.ModeDrops)
	}
	st, err := p.Run(context.Background(), &native.Command{Args: []string{"/bin/sh", "-c", `[ -z "$(ls -A /proc)" ] && [ ! -e /proc/self ] && [ -d /work ]`}})
	if err != nil || st.Code != 0 {
		t.Fatalf("an empty /proc in no-proc mode: exit %+v, %v", st, err)
	}
	full, err := native.New(native.WithoutCgroups())
	if err != nil {
		t.Fatal(err)
	}
	defer full.Close()
	if m, _ := nsexec.HostMode(); m == nsexec.ModeFull && full.Posture().Isolation.Native.Mode != "full" {
		t.Fatalf("on a full host the posture says mode %q", full.Posture().Isolation.Native.Mode)
	}
}

// A policy that requires full mode is refused, naming the mode and what
// is missing, where the sandboxes would run in no-proc; strict does.
func TestRequiresModeRefused(t *testing.T) {
	strict, err := policies.Builtin("strict")
	if err != nil {
		t.Fatal(err)
	}
	_, err = native.New(native.WithPolicy(strict), native.WithMode(nsexec.ModeNoProc), native.WithoutCgroups())
	var me *native.ModeError
	if !errors.As(err, &me) || me.Required != nsexec.ModeFull || me.Mode != nsexec.ModeNoProc ||
		!strings.Contains(err.Error(), "requires mode full") || !strings.Contains(err.Error(), "/proc") {
		t.Fatalf("strict in no-proc mode: %v (%T), want a *native.ModeError naming full, no-proc and /proc", err, err)
	}
	def, _ := policies.Builtin("default")
	def.Requires = &policies.Requires{Mode: "no-proc"}
	p, err := native.New(native.WithPolicy(def), native.WithMode(nsexec.ModeNoProc), native.WithoutCgroups())
	if err != nil {
		t.Fatalf("a policy that accepts no-proc, in no-proc: %v", err)
	}
	p.Close()
}

// A warm pool's prepared sandboxes run in the no-proc mode too.
func TestNoProcModePool(t *testing.T) {
	p, err := native.New(native.WithMode(nsexec.ModeNoProc), native.WithoutCgroups(), native.WithPool(2))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i := range 4 {
		st, err := p.Run(context.Background(), &native.Command{Args: []string{"/bin/sh", "-c", `[ -z "$(ls -A /proc)" ] && echo ok > /work/x && [ "$(cat /work/x)" = ok ]`}})
		if err != nil || st.Code != 0 {
			t.Fatalf("dispatch %d in no-proc mode from the pool: exit %+v, %v", i, st, err)
		}
	}
}

// TestConformanceHostMode runs the kit with the claim of the mode this
// host reaches: full here; no-proc inside a default container
// (TestConformanceInPodman runs it there).
func TestConformanceHostMode(t *testing.T) {
	mode, why := nsexec.HostMode()
	claim := conformance.ModeIsolation(string(mode))
	if refused, _ := nsexec.HostnameRefused(); refused {
		claim.PIDs = false // its hostname is the launcher's (nsexec.HostnameDrop)
	}
	t.Logf("mode %s (%s), claim %+v", mode, why, claim)
	conformance.Run(t, newProvider, conformance.WithIsolation(claim))
}

// The kit in a default podman container, as its root and as an ordinary
// user in it: this test binary, with the host's /usr bound in for its
// libraries, runs TestConformanceHostMode there, which reaches the
// no-proc mode and its claim. Not under rootless podman yet: moat, uid 0
// of the container's user namespace but not host root, maps the tool to
// its own uid (nsexec.IsHostRoot is false, so the rootless mapping), and
// i8 fails there: what the tool writes is owned by the container's root.
func TestConformanceInPodman(t *testing.T) {
	testenv.RequireRoot(t)
	for _, c := range []struct {
		name  string
		flags []string
	}{{"root", nil}, {"user", []string{"--user", "65534:65534"}}} {
		t.Run(c.name, func(t *testing.T) {
			p := testenv.NewPodman(t, nil, nil)
			dir := p.TempDir(t)
			bin := filepath.Join(dir, "native.test")
			copySelf(t, bin)
			p.Dirs = append(p.Dirs, "/usr", dir)
			kitInContainer(t, func(argv ...string) (string, string, int) { return p.Run(t, c.flags, argv...) }, bin, nsexec.ModeNoProc)
		})
	}
}

// The kit in a default containerd container (ctr run: containerd's runc
// shim, ctr's default spec and masked /proc), as its root and as nobody
// (the image's USER: ctr run has no --user), as TestConformanceInPodman
// runs it in podman's: TestConformanceHostMode there reaches the no-proc
// mode and passes its claim.
func TestConformanceInContainerd(t *testing.T) {
	c := testenv.NewContainerd(t, "moat-test")
	bin := filepath.Join(c.TempDir(t), "native.test")
	copySelf(t, bin)
	c.Dirs = append(c.Dirs, "/usr", filepath.Dir(bin))
	for _, u := range []struct{ name, user string }{{"root", ""}, {"nobody", "65534:65534"}} {
		image := "docker.io/moat/native-kit:" + u.name
		c.ImportBusybox(t, image, u.user)
		t.Run(u.name, func(t *testing.T) {
			kitInContainer(t, func(argv ...string) (string, string, int) { return c.Run(t, image, nil, argv...) }, bin, nsexec.ModeNoProc)
		})
		// Under containerd's default seccomp profile (ctr run --seccomp, a
		// pod's RuntimeDefault) no user namespace can be made: the kit
		// runs in no-userns with that rung's claim.
		t.Run(u.name+"-seccomp", func(t *testing.T) {
			if nsexec.LandlockABI() < nsexec.NoUserNSMinABI {
				t.Logf("Landlock ABI %d is below the no-userns rung's %d: the rung's refusal is TestNoUserNSModeBelowLandlockABI's", nsexec.LandlockABI(), nsexec.NoUserNSMinABI)
				return
			}
			kitInContainer(t, func(argv ...string) (string, string, int) { return c.Run(t, image, []string{"--seccomp"}, argv...) }, bin, nsexec.ModeNoUserNS)
		})
	}
}

// kitInContainer runs TestConformanceHostMode of bin, this test binary, in
// a fresh container (run runs argv in one), and wants it to reach mode
// and pass; it logs each check's verdict.
func kitInContainer(t *testing.T, run func(argv ...string) (string, string, int), bin string, mode nsexec.Mode) {
	t.Helper()
	out, errs, code := run(bin, "-test.run", "^TestConformanceHostMode$", "-test.count=1", "-test.v")
	if code != 0 || !strings.Contains(out, "mode "+string(mode)) || !strings.Contains(out, "--- PASS: TestConformanceHostMode") {
		t.Fatalf("the kit in the container: exit %d\n%s\n%s", code, out, errs)
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "--- ") {
			t.Log(strings.TrimSpace(l))
		}
	}
}

// copySelf copies this test binary to path, executable by every user.
func copySelf(t *testing.T, path string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err == nil {
		err = os.WriteFile(path, b, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
}

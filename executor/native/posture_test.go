package native_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/conformance/testenv"
	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/executor/native"
	"github.com/moat-sandbox/moat/ledger"
	"github.com/moat-sandbox/moat/nsexec"
	"github.com/moat-sandbox/moat/policies"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func postureOf(t *testing.T, edit func(*policies.Policy), opts ...native.Option) executor.Posture {
	t.Helper()
	pol, err := policies.Builtin("default")
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(pol)
	}
	p, err := native.New(append([]native.Option{native.WithPolicy(pol), native.WithLedger(&ledger.Memory{})}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p.Posture()
}

// As root on this host every limit is enforced, so the default policy
// meets the strict floor; the descriptor attests what a dispatch gets.
func TestNativePostureMeetsTheStrictFloorAsRoot(t *testing.T) {
	testenv.RequireRoot(t)
	p := postureOf(t, nil)
	if err := executor.RegulatedFloor(p); err != nil {
		t.Fatalf("regulated floor: %v", err)
	}
	if err := executor.StrictFloor(p); err != nil {
		b, _ := json.MarshalIndent(p, "", " ")
		t.Fatalf("strict floor: %v\n%s", err, b)
	}
	n := p.Isolation.Native
	if !n.Seccomp.Enabled || !strings.HasPrefix(n.Seccomp.ProfileDigest, "sha256:") || n.Limits["memory"] != executor.LimitEnforced {
		t.Fatalf("native attestation = %+v", n)
	}
	if n.UIDMappings[0].HostID == 0 || n.UIDMappings[0].ContainerID != 1000 {
		t.Fatalf("uid mapping %+v maps host root or the wrong inside id", n.UIDMappings)
	}
	if r := n.HostIDs; r == nil || r.First != nsexec.HostIDFirst || r.Count != nsexec.HostIDCount || n.UIDMappings[0].HostID != r.First {
		t.Fatalf("as root the posture must say each sandbox gets its own host id from the range: %+v, %+v", r, n.UIDMappings)
	}
	fixed := postureOf(t, nil, native.WithHostIdentity(nsexec.Identity{UID: 3000000000, GID: 3000000000})).Isolation.Native
	if fixed.HostIDs != nil || fixed.UIDMappings[0].HostID != 3000000000 {
		t.Fatalf("a fixed host identity is shared by every sandbox, the posture must say so: %+v, %+v", fixed.HostIDs, fixed.UIDMappings)
	}
}

// Without delegation the limits are degraded, and the strict floor says
// which, by field.
func TestNativePostureDegradedAsNobody(t *testing.T) {
	if testenv.RunAsUser(t, testenv.NobodyUID, testenv.NobodyGID) {
		return
	}
	p := postureOf(t, nil)
	if err := executor.RegulatedFloor(p); err != nil {
		t.Fatalf("regulated floor: %v", err)
	}
	err := executor.StrictFloor(p)
	var fe *executor.FloorError
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), "limits") || !strings.Contains(err.Error(), "memory") {
		t.Fatalf("strict floor err = %v, want a field error naming the degraded memory limit", err)
	}
	if n := p.Isolation.Native; n.UIDMappings[0].HostID != testenv.NobodyUID || n.HostIDs != nil {
		t.Fatalf("rootless mapping %+v does not map to the caller", n.UIDMappings)
	}
}

// A loosened setting moves the fingerprint; the same settings keep it.
func TestNativePostureFingerprint(t *testing.T) {
	base := executor.Fingerprint(postureOf(t, nil))
	if again := executor.Fingerprint(postureOf(t, nil)); again != base {
		t.Fatalf("fingerprint is not stable: %s then %s", base, again)
	}
	for name, edit := range map[string]func(*policies.Policy){
		"network loopback": func(p *policies.Policy) { p.Network = policies.NetworkLoopback },
		"no seccomp":       func(p *policies.Policy) { p.Seccomp, p.Unfiltered = nil, true },
		"longer timeout":   func(p *policies.Policy) { p.Limits.Timeout = "10m" },
		"env allowlist":    func(p *policies.Policy) { p.Env = append(p.Env, "HOME") },
	} {
		if executor.Fingerprint(postureOf(t, edit)) == base {
			t.Errorf("%s did not move the fingerprint", name)
		}
	}
	if executor.Fingerprint(postureOf(t, nil, native.WithoutCgroups())) == base {
		t.Error("dropping the cgroup limits did not move the fingerprint")
	}
}

// TestNoFilterWithoutTheStatement is issue 13 item 8 at the library seam:
// a policy built in Go that lost its filter (none, or one that allows
// everything) is refused by New with a typed config error naming the JSON
// path; with "unfiltered" stated it runs, and the posture says seccomp is
// off, which the strict floor refuses.
func TestNoFilterWithoutTheStatement(t *testing.T) {
	allowAll := &specs.LinuxSeccomp{DefaultAction: specs.ActAllow}
	for name, edit := range map[string]func(*policies.Policy){
		"no profile":       func(p *policies.Policy) { p.Seccomp = nil },
		"allow everything": func(p *policies.Policy) { p.Seccomp = allowAll },
		"bare, extending":  func(p *policies.Policy) { p.Seccomp, p.Extends = nil, "default" },
	} {
		t.Run(name, func(t *testing.T) {
			pol, err := policies.Builtin("default")
			if err != nil {
				t.Fatal(err)
			}
			edit(pol)
			p, err := native.New(native.WithPolicy(pol), native.WithLedger(&ledger.Memory{}))
			if err == nil {
				p.Close()
				t.Fatal("a policy with no effective filter was accepted")
			}
			fes := policies.FieldErrors(err)
			if executor.CodeOf(err) != executor.CodeConfig || len(fes) == 0 || !strings.HasPrefix(fes[0].Path, "seccomp") {
				t.Fatalf("got %v (code %q), want a config error with a seccomp field error", err, executor.CodeOf(err))
			}
		})
	}
	post := postureOf(t, func(p *policies.Policy) { p.Seccomp, p.Unfiltered = nil, true })
	if n := post.Isolation.Native; n == nil || n.Seccomp.Enabled || n.Seccomp.ProfileDigest != "" {
		t.Fatalf("the posture of an unfiltered policy does not say seccomp is off: %+v", post.Isolation.Native)
	}
	if err := executor.StrictFloor(post); err == nil || !strings.Contains(err.Error(), "seccomp") {
		t.Fatalf("the strict floor accepted an unfiltered posture: %v", err)
	}
}

// TestZeroPolicyTimeoutIsRefused: a policy that writes limits.timeout "0s"
// is refused with a config error, not run for 30 s and attested as 30000
// (the reference keeps a written 0 and kills at once), and a fractional
// timeout is attested as it runs.
func TestZeroPolicyTimeoutIsRefused(t *testing.T) {
	pol, err := policies.Builtin("default")
	if err != nil {
		t.Fatal(err)
	}
	pol.Limits.Timeout = "0s"
	_, err = native.New(native.WithPolicy(pol), native.WithoutCgroups())
	if executor.CodeOf(err) != executor.CodeConfig || !strings.Contains(err.Error(), `limits.timeout "0s" is zero`) {
		t.Fatalf("err = %v, want a config error naming limits.timeout", err)
	}
	pol.Limits.Timeout = "1500500us"
	p, err := native.New(native.WithPolicy(pol), native.WithoutCgroups())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if got := p.Posture().Bounds.TimeoutMs; got != 1500.5 {
		t.Fatalf("attested timeoutMs %v, want 1500.5", got)
	}
}

// TestPostureNamesTheLandlockWall: on a kernel with Landlock every sandbox
// is in a domain (nsexec's TestLandlockWallsOffTheHost tries what it
// stops) and the posture names its ABI; WithoutLandlock leaves it out and
// the posture says so. On a kernel without it the posture claims none.
func TestPostureNamesTheLandlockWall(t *testing.T) {
	abi := nsexec.LandlockABI()
	if abi < 2 {
		abi = 0 // ABI 1 refuses renames across directories: not used
	}
	if got := postureOf(t, nil).Isolation.Native.Landlock; got != abi {
		t.Fatalf("posture landlock %d, want the kernel's ABI %d", got, abi)
	}
	if got := postureOf(t, nil, native.WithoutLandlock()).Isolation.Native.Landlock; got != 0 {
		t.Fatalf("posture landlock %d with WithoutLandlock, want 0", got)
	}
}

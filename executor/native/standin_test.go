package native_test

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/cgroups"
	"github.com/moat-sandbox/moat/conformance/testenv"
	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/executor/native"
	"github.com/moat-sandbox/moat/policies"
)

// forkMany forks up to 300 children that sleep, stops at the first failure
// and prints how many it started.
const forkMany = `import os, sys, time
sys.stdin.read()
n = 0
for i in range(300):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    n += 1
print(n)`

// allocate600M allocates 600 MiB and touches it.
const allocate600M = `import sys; sys.stdin.read(); b = bytearray(600 << 20); print(len(b))`

// defaultProvider runs argv under the default policy (256 MiB, 128 pids,
// 1 cpu, nothing required).
func defaultProvider(t *testing.T, argv []string, opts ...native.Option) *native.Provider {
	t.Helper()
	pol, err := policies.Builtin("default")
	if err != nil {
		t.Fatal(err)
	}
	p, err := native.New(append([]native.Option{native.WithPolicy(pol), native.WithCommand(argv[0], argv[1:]...)}, opts...)...)
	if err != nil {
		t.Fatalf("native.New: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// states is "name=state ..." of a provider's limits.
func states(p *native.Provider) string {
	var out []string
	for _, s := range p.Limits() {
		out = append(out, s.Name+"="+s.State)
	}
	return strings.Join(out, " ")
}

// Issue 28 item 6, the partial case: a cgroup that holds some of the
// limits (v1 with only the memory hierarchy delegated to nobody) holds
// them, and RLIMIT_NPROC stands in for pids. Before, a missing controller
// dropped the dispatch's leaf altogether while the posture went on saying
// memory was enforced: a 600 MiB allocation succeeded under a 256 MiB
// policy that claimed to hold it.
func TestPartialCgroupHoldsWhatItCan(t *testing.T) {
	if !testenv.ReRun() {
		testenv.RequireRoot(t)
		h, err := cgroups.Detect()
		if err != nil {
			t.Fatal(err)
		}
		if h.Layout != cgroups.V1 && h.Layout != cgroups.Hybrid {
			t.Skipf("layout %v: delegating one v1 hierarchy needs v1 hierarchies", h.Layout)
		}
		parent, _ := delegateToNobody(t, "memory")
		t.Setenv(delegatedVar, parent)
	}
	if testenv.RunAsUser(t, testenv.NobodyUID, testenv.NobodyGID) {
		return
	}
	requireNprocPerUserNS(t)
	manager := func() native.Option {
		m, err := cgroups.New(cgroups.WithParent(os.Getenv(delegatedVar)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		return native.WithCgroups(m)
	}
	p := defaultProvider(t, []string{"python3", "-c", allocate600M}, manager())
	if got := states(p); got != "memory=enforced pids=rlimit cpu=degraded" {
		t.Fatalf("limits %s, want memory by the cgroup, pids by RLIMIT_NPROC, cpu not at all", got)
	}
	if l := p.Posture().Isolation.Native.Limits; l["memory"] != executor.LimitEnforced || l["pids"] != executor.LimitRlimit || l["cpu"] != executor.LimitDegraded {
		t.Fatalf("posture limits %v", l)
	}
	_, err := dispatchOnce(t, p)
	var e *executor.Error
	if !errors.As(err, &e) || e.Code != executor.CodeOOM {
		t.Fatalf("600 MiB under a 256 MiB memory cgroup: %v, want code oom", err)
	}
	out, err := dispatchOnce(t, defaultProvider(t, []string{"python3", "-c", forkMany}, manager()))
	if n, _ := strconv.Atoi(strings.TrimSpace(string(out))); err != nil || n <= 0 || n >= 128 {
		t.Fatalf("forked %q (%v), want fewer than the policy's 128 pids", out, err)
	}
}

// Issue 28 item 6, posture and refusal: rootless without delegation the
// posture says what stands in for each limit, which the strict floor does
// not take for enforced, and a policy that requires pids is refused
// although RLIMIT_NPROC could stand in.
func TestStandInsAreNotEnforcedLimits(t *testing.T) {
	if testenv.RunAsUser(t, testenv.NobodyUID, testenv.NobodyGID) {
		return
	}
	requireNoCgroup(t)
	requireNprocPerUserNS(t)
	p := defaultProvider(t, []string{"/bin/true"})
	l := p.Posture().Isolation.Native.Limits
	if l["memory"] != executor.LimitPerProcess || l["pids"] != executor.LimitRlimit || l["cpu"] != executor.LimitDegraded {
		t.Fatalf("posture limits %v, want memory per-process, pids rlimit, cpu degraded", l)
	}
	err := executor.StrictFloor(p.Posture())
	for _, name := range []string{"memory", "pids", "cpu"} {
		if err == nil || !strings.Contains(err.Error(), ".limits."+name+" must be enforced") {
			t.Errorf("strict floor %v: want the %s limit named", err, name)
		}
	}
	pol, err := policies.Builtin("default")
	if err != nil {
		t.Fatal(err)
	}
	pol.Limits.Required = []string{"pids"}
	_, err = native.New(native.WithPolicy(pol))
	var re *cgroups.RequiredError
	if !errors.As(err, &re) || re.Limit != cgroups.Pids {
		t.Fatalf("a policy requiring pids: %v, want a RequiredError for pids", err)
	}
}

// requireNoCgroup skips plainly where this user's cgroup holds a limit:
// the stand-ins are for a host without one.
func requireNoCgroup(t *testing.T) {
	t.Helper()
	pv, err := native.New(native.WithPolicy(&policies.Policy{Unfiltered: true}))
	if err != nil {
		t.Fatal(err)
	}
	p := pv.Cgroups()
	pv.Close()
	if p.Memory.Enforced || p.Pids.Enforced {
		t.Skip("not this layout: this user has a delegated cgroup here; the stand-ins are for a host without one")
	}
}

// requireNprocPerUserNS skips (a failure under MOAT_REQUIRE_ALL) on a
// kernel that counts RLIMIT_NPROC per uid across namespaces.
func requireNprocPerUserNS(t *testing.T) {
	t.Helper()
	for _, s := range defaultProvider(t, []string{"/bin/true"}, native.WithoutCgroups()).Limits() {
		if s.Name == "pids" && s.State != executor.LimitRlimit {
			testenv.Skipf(t, "RLIMIT_NPROC does not stand in for pids here: %s", s.Reason)
		}
	}
}

package native

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/cgroups"
	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/policies"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// Each limit no cgroup holds gets the rlimit that stands in for it, never
// above the policy's own rlimit or the launcher's hard limit, and a state
// and a text that say exactly that; what a cgroup holds gets none.
func TestStandIns(t *testing.T) {
	const mib = 1 << 20
	none := func(cgroups.Limit) (bool, string) { return false, "no delegated cgroup" }
	memoryOnly := func(l cgroups.Limit) (bool, string) { return l == cgroups.Memory, "not delegated" }
	all := func(cgroups.Limit) (bool, string) { return true, "" }
	unlimited := func(int) uint64 { return math.MaxUint64 }
	base := func() *policies.Policy {
		pol, err := policies.Builtin("default") // 256M, 128 pids, 1 cpu; RLIMIT_CORE, RLIMIT_NOFILE
		if err != nil {
			t.Fatal(err)
		}
		return pol
	}
	rl := func(typ string, soft, hard uint64) specs.POSIXRlimit {
		return specs.POSIXRlimit{Type: typ, Soft: soft, Hard: hard}
	}
	for _, tc := range []struct {
		name       string
		edit       func(*policies.Policy)
		holds      func(cgroups.Limit) (bool, string)
		hard       func(int) uint64
		nprocPerNS bool
		states     string // name=state, in order
		text       string // unheld
		added      []specs.POSIXRlimit
	}{
		{name: "the cgroup holds everything", holds: all, hard: unlimited, nprocPerNS: true,
			states: "memory=enforced pids=enforced cpu=enforced"},
		{name: "no cgroup", holds: none, hard: unlimited, nprocPerNS: true,
			states: "memory=per-process pids=rlimit cpu=degraded",
			text:   "memory 256M as RLIMIT_DATA per process, pids 128 as RLIMIT_NPROC, cpu 1 not enforced",
			added:  []specs.POSIXRlimit{rl("RLIMIT_DATA", 256*mib, 256*mib), rl("RLIMIT_NPROC", 128, 128)}},
		{name: "memory in the cgroup, pids not", holds: memoryOnly, hard: unlimited, nprocPerNS: true,
			states: "memory=enforced pids=rlimit cpu=degraded",
			text:   "pids 128 as RLIMIT_NPROC, cpu 1 not enforced",
			added:  []specs.POSIXRlimit{rl("RLIMIT_NPROC", 128, 128)}},
		{name: "the policy's own rlimits are smaller", holds: none, hard: unlimited, nprocPerNS: true,
			edit: func(p *policies.Policy) {
				p.Rlimits = append(p.Rlimits, rl("RLIMIT_DATA", 100*mib, 300*mib), rl("RLIMIT_NPROC", 64, 64))
			},
			states: "memory=per-process pids=rlimit cpu=degraded",
			text:   "memory 256M as RLIMIT_DATA per process, pids 128 as RLIMIT_NPROC 64, cpu 1 not enforced",
			added:  []specs.POSIXRlimit{rl("RLIMIT_DATA", 100*mib, 256*mib), rl("RLIMIT_NPROC", 64, 64)}},
		{name: "the policy's own rlimits are larger", holds: none, hard: unlimited, nprocPerNS: true,
			edit: func(p *policies.Policy) {
				p.Rlimits = append(p.Rlimits, rl("RLIMIT_DATA", 1<<30, 1<<30), rl("RLIMIT_NPROC", 4096, 4096))
			},
			states: "memory=per-process pids=rlimit cpu=degraded",
			added:  []specs.POSIXRlimit{rl("RLIMIT_DATA", 256*mib, 256*mib), rl("RLIMIT_NPROC", 128, 128)}},
		{name: "the launcher's hard limit is lower", holds: none, nprocPerNS: true,
			hard: func(res int) uint64 {
				if res == unix.RLIMIT_NPROC {
					return 50
				}
				return math.MaxUint64
			},
			states: "memory=per-process pids=rlimit cpu=degraded",
			text:   "memory 256M as RLIMIT_DATA per process, pids 128 as RLIMIT_NPROC 50, cpu 1 not enforced",
			added:  []specs.POSIXRlimit{rl("RLIMIT_DATA", 256*mib, 256*mib), rl("RLIMIT_NPROC", 50, 50)}},
		{name: "memory below the floor", holds: none, hard: unlimited, nprocPerNS: true,
			edit:   func(p *policies.Policy) { p.Limits.Memory = "64M" },
			states: "memory=degraded pids=rlimit cpu=degraded",
			text:   "memory 64M not enforced, pids 128 as RLIMIT_NPROC, cpu 1 not enforced",
			added:  []specs.POSIXRlimit{rl("RLIMIT_NPROC", 128, 128)}},
		{name: "a kernel that counts RLIMIT_NPROC per uid", holds: none, hard: unlimited, nprocPerNS: false,
			states: "memory=per-process pids=degraded cpu=degraded",
			text:   "memory 256M as RLIMIT_DATA per process, pids 128 not enforced, cpu 1 not enforced",
			added:  []specs.POSIXRlimit{rl("RLIMIT_DATA", 256*mib, 256*mib)}},
		{name: "no limits set", holds: none, hard: unlimited, nprocPerNS: true,
			edit: func(p *policies.Policy) { p.Limits.Memory, p.Limits.Pids, p.Limits.CPUs = "", 0, 0 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pol := base()
			if tc.edit != nil {
				tc.edit(pol)
			}
			before := slices.Clone(pol.Rlimits)
			states, got, err := standIns(pol, tc.holds, tc.hard, tc.nprocPerNS)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(pol.Rlimits, before) {
				t.Errorf("the policy's rlimits changed: %v, were %v", pol.Rlimits, before)
			}
			var names []string
			for _, s := range states {
				names = append(names, s.Name+"="+s.State)
				if s.State != executor.LimitEnforced && s.Reason == "" {
					t.Errorf("%s: %s without a reason", s.Name, s.State)
				}
			}
			if strings.Join(names, " ") != tc.states {
				t.Errorf("states %q, want %q", strings.Join(names, " "), tc.states)
			}
			if tc.text != "" && unheld(states) != tc.text {
				t.Errorf("text %q, want %q", unheld(states), tc.text)
			}
			// Every rlimit the policy names is there, the stand-ins set to
			// the smaller value, and nothing else is added.
			want := map[string]specs.POSIXRlimit{}
			for _, r := range before {
				want[r.Type] = r
			}
			for _, r := range tc.added {
				want[r.Type] = r
			}
			if len(got) != len(want) {
				t.Errorf("rlimits %v, want %v", got, want)
			}
			for _, r := range got {
				if want[r.Type] != r {
					t.Errorf("rlimit %+v, want %+v", r, want[r.Type])
				}
			}
		})
	}
}

func TestKernelAtLeast(t *testing.T) {
	for release, want := range map[string]bool{
		"6.18.44-fc-v509": true, "5.14.0": true, "5.14-rc1": true, "5.15.0-91-generic": true,
		"5.13.19": false, "4.19.0-26-amd64": false, "5": false, "": false, "x.y": false,
	} {
		if got := kernelAtLeast(release, 5, 14); got != want {
			t.Errorf("kernelAtLeast(%q, 5, 14) = %v, want %v", release, got, want)
		}
	}
}

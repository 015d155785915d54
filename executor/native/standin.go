package native

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/moat-sandbox/moat/cgroups"
	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/policies"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// What stands in for the cgroup limits this host does not enforce (issue
// 28, item 6). Rootless without a delegated cgroup the policy's memory,
// pids and cpu limits used to vanish behind a warning that spoke of
// rlimits none of which bounded them. What an unprivileged process can set
// instead is now set in every sandbox (nsexec applies the template's
// rlimits before the tool exists), and the warning, the posture and `moat
// doctor` say per limit what holds:
//
//   - pids: RLIMIT_NPROC, the policy's number. Since Linux 5.14 fork
//     checks it against the tasks of the caller's uid in the caller's own
//     user namespace (kernel/ucount.c is_rlimit_overlimit, commit
//     21d1c5e386bc "Reimplement RLIMIT_NPROC on top of ucounts";
//     kernel/fork.c copy_process), so in a sandbox, whose user namespace
//     maps one uid, it counts that sandbox alone: every task, threads
//     included as pids.max counts them, and the init's own (one for the C
//     tail, a handful for a Go init), as on cgroup v2 where the init is in
//     the leaf. The limit is pids, not pids+1. Earlier kernels count every
//     process of the uid in every namespace, the caller's own and other
//     sandboxes' (cgroups/doc.go): no stand-in there.
//   - memory: RLIMIT_DATA, the private writable mappings of one process
//     (mm/mmap.c may_expand_vm), brk and anonymous mmap alike. It bounds
//     each process, not the sandbox's sum, and counts address space, not
//     resident memory: a Go program maps about 40 MiB at start, node about
//     50 MiB. RLIMIT_AS, which would also count the gigabytes V8 and Go
//     reserve PROT_NONE, breaks both. Below dataFloor it is not set (see
//     there).
//   - cpu: nothing. RLIMIT_CPU is CPU seconds, not a share of a CPU; the
//     wall-clock kill bounds the time.
//
// Neither the policy's own rlimits nor the launcher's hard limits are ever
// raised: each stand-in takes the smaller value (a hard limit cannot be
// raised without CAP_SYS_RESOURCE in the initial user namespace anyway,
// and nsexec would fail the setup trying).

// dataFloor is the smallest memory limit RLIMIT_DATA stands in for. The
// sandbox's init is subject to it too, and when the init is the Go one
// (cold starts, builds without the C tail) it maps more than small limits
// of its own: 73 MiB measured for moat-init, 132 to 148 MiB for a cgo
// build, whose threads' stacks are mmap'd by glibc. Under a smaller limit
// its next mapping fails and the Go runtime aborts the sandbox ("fatal
// error: runtime: cannot allocate memory", seen under 32 MiB). 256 MiB,
// the default policy's limit, leaves it 100 MiB.
const dataFloor = 256 << 20

// A LimitState says how one of the policy's limits holds in the
// provider's sandboxes on this host.
type LimitState struct {
	// Name is the limit's posture name: "memory", "pids" or "cpu".
	Name string `json:"name"`
	// Setting is the limit as the policy sets it ("256M", "128", "1").
	Setting string `json:"setting"`
	// State is executor.LimitEnforced (a cgroup holds it), LimitRlimit
	// (an rlimit bounds the sandbox as a whole), LimitPerProcess (an
	// rlimit bounds each process) or LimitDegraded (nothing does).
	State string `json:"state"`
	// Rlimit and Value are the stand-in, when there is one.
	Rlimit string `json:"rlimit,omitempty"`
	Value  uint64 `json:"value,omitempty"`
	// Reason says why no cgroup holds the limit, and for LimitDegraded why
	// no rlimit does either.
	Reason string `json:"reason,omitempty"`
}

// String says what holds, in a few words: "memory 256M as RLIMIT_DATA
// per process", "pids 128 as RLIMIT_NPROC", "cpu 1 not enforced".
func (s LimitState) String() string {
	head := s.Name + " " + s.Setting
	switch s.State {
	case executor.LimitEnforced:
		return head + " by the cgroup"
	case executor.LimitPerProcess:
		return head + " as " + s.rlimit() + " per process"
	case executor.LimitRlimit:
		return head + " as " + s.rlimit()
	}
	return head + " not enforced"
}

// Detail is String with what the stand-in counts.
func (s LimitState) Detail() string {
	switch s.State {
	case executor.LimitPerProcess:
		return s.String() + " (each process alone, not the sandbox's sum)"
	case executor.LimitRlimit:
		return s.String() + " (every task of the sandbox, its init included)"
	}
	return s.String()
}

// rlimit names the stand-in, with its value where it differs from the
// setting (a policy's own smaller rlimit, the launcher's hard limit).
func (s LimitState) rlimit() string {
	setting := s.Setting
	if n, err := policies.Size(setting).Bytes(); err == nil && s.Name == "memory" {
		setting = strconv.FormatInt(n, 10)
	}
	if v := strconv.FormatUint(s.Value, 10); v != setting {
		return s.Rlimit + " " + v
	}
	return s.Rlimit
}

// standIns returns the state of each limit the policy sets, and the
// rlimits with the stand-ins merged in. holds reports what the sandbox's
// cgroup enforces; hard is the launcher's hard limit of a resource (the
// sandbox inherits it); nprocPerNS is whether this kernel counts
// RLIMIT_NPROC per user namespace.
func standIns(pol *policies.Policy, holds func(cgroups.Limit) (bool, string), hard func(int) uint64, nprocPerNS bool) ([]LimitState, []specs.POSIXRlimit, error) {
	rl := append([]specs.POSIXRlimit(nil), pol.Rlimits...)
	var out []LimitState
	if pol.Limits.Memory != "" {
		mem, err := pol.Limits.Memory.Bytes()
		if err != nil {
			return nil, nil, fmt.Errorf("native: policy %q: limits.memory: %w", pol.Name, err)
		}
		s := LimitState{Name: "memory", Setting: string(pol.Limits.Memory)}
		if ok, why := holds(cgroups.Memory); ok {
			s.State = executor.LimitEnforced
		} else if s.Reason = why; mem < dataFloor {
			s.State = executor.LimitDegraded
			s.Reason += "; RLIMIT_DATA is not set below 256 MiB, where it would stop the sandbox's own init"
		} else {
			s.State, s.Rlimit = executor.LimitPerProcess, "RLIMIT_DATA"
			rl, s.Value = lowerRlimit(rl, s.Rlimit, min(uint64(mem), hard(unix.RLIMIT_DATA)))
		}
		out = append(out, s)
	}
	if pol.Limits.Pids > 0 {
		s := LimitState{Name: "pids", Setting: strconv.FormatInt(pol.Limits.Pids, 10)}
		if ok, why := holds(cgroups.Pids); ok {
			s.State = executor.LimitEnforced
		} else if s.Reason = why; !nprocPerNS {
			s.State = executor.LimitDegraded
			s.Reason += "; RLIMIT_NPROC counts per user namespace only since Linux 5.14"
		} else {
			s.State, s.Rlimit = executor.LimitRlimit, "RLIMIT_NPROC"
			rl, s.Value = lowerRlimit(rl, s.Rlimit, min(uint64(pol.Limits.Pids), hard(unix.RLIMIT_NPROC)))
		}
		out = append(out, s)
	}
	if pol.Limits.CPUs > 0 {
		s := LimitState{Name: "cpu", Setting: strconv.FormatFloat(pol.Limits.CPUs, 'g', -1, 64), State: executor.LimitEnforced}
		if ok, why := holds(cgroups.CPU); !ok {
			s.State, s.Reason = executor.LimitDegraded, why+"; no rlimit bounds a share of a CPU (RLIMIT_CPU is CPU seconds)"
		}
		out = append(out, s)
	}
	return out, rl, nil
}

// lowerRlimit sets the rlimit named typ to at most v, soft and hard, in rl
// (a copy the caller owns): a policy's own smaller value stays. It returns
// the list and the resulting hard limit.
func lowerRlimit(rl []specs.POSIXRlimit, typ string, v uint64) ([]specs.POSIXRlimit, uint64) {
	for i := range rl {
		if rl[i].Type == typ {
			rl[i].Soft, rl[i].Hard = min(rl[i].Soft, v), min(rl[i].Hard, v)
			return rl, rl[i].Hard
		}
	}
	return append(rl, specs.POSIXRlimit{Type: typ, Soft: v, Hard: v}), v
}

// hostHard is the launcher's hard limit of a resource; unlimited when it
// cannot be read.
func hostHard(res int) uint64 {
	var r unix.Rlimit
	if unix.Getrlimit(res, &r) != nil {
		return math.MaxUint64
	}
	return r.Max
}

// nprocPerUserNS reports whether the running kernel counts RLIMIT_NPROC
// per user namespace: Linux 5.14 or later (uname's release).
func nprocPerUserNS() bool {
	var uts unix.Utsname
	if unix.Uname(&uts) != nil {
		return false
	}
	return kernelAtLeast(unix.ByteSliceToString(uts.Release[:]), 5, 14)
}

// kernelAtLeast reports whether a kernel release ("6.1.0-18-amd64") is
// major.minor or later.
func kernelAtLeast(release string, major, minor int) bool {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return false
	}
	ma, ok1 := leadingInt(parts[0])
	mi, ok2 := leadingInt(parts[1]) // "14-rc1"
	return ok1 && ok2 && (ma > major || ma == major && mi >= minor)
}

// leadingInt parses the decimal digits s starts with.
func leadingInt(s string) (int, bool) {
	end := strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	if end < 0 {
		end = len(s)
	}
	n, err := strconv.Atoi(s[:end])
	return n, err == nil
}

// unheld is the warning's text: what holds each limit no cgroup enforces,
// "" when the cgroup holds every limit the policy sets.
func unheld(states []LimitState) string {
	var parts []string
	for _, s := range states {
		if s.State != executor.LimitEnforced {
			parts = append(parts, s.String())
		}
	}
	return strings.Join(parts, ", ")
}

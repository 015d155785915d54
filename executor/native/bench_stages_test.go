package native_test

import (
	"github.com/moat-sandbox/moat/conformance/testenv"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/moat-sandbox/moat/cgroups"
	"github.com/moat-sandbox/moat/executor/native"
	"github.com/moat-sandbox/moat/nsexec"
	"github.com/moat-sandbox/moat/policies"
	"github.com/moat-sandbox/moat/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// BenchmarkStage makes the cold path's cost visible stage by stage:
//   - clone/*: fork and exec of /bin/true with one namespace at a time
//     (each with a user namespace, as rootless needs), and all of them;
//   - trace: a full native dispatch with nsexec.WithTrace, each setup stage
//     reported as its own metric (µs/op);
//   - seccomp-compile: compiling the default profile (what the per-policy
//     cache saves);
//   - cgroup: creating and removing a leaf with the default limits;
//   - native-cold/no-*: the dispatch with one part switched off.
func BenchmarkStage(b *testing.B) {
	withInit(b)
	for _, c := range []struct {
		name  string
		flags uintptr
	}{
		{"none", 0},
		{"user", unix.CLONE_NEWUSER},
		{"user+uts", unix.CLONE_NEWUSER | unix.CLONE_NEWUTS},
		{"user+pid", unix.CLONE_NEWUSER | unix.CLONE_NEWPID},
		{"user+ipc", unix.CLONE_NEWUSER | unix.CLONE_NEWIPC},
		{"user+mnt", unix.CLONE_NEWUSER | unix.CLONE_NEWNS},
		{"user+net", unix.CLONE_NEWUSER | unix.CLONE_NEWNET},
		{"all", unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS},
	} {
		b.Run("clone/"+c.name, func(b *testing.B) { benchClone(b, c.flags) })
	}
	b.Run("trace", func(b *testing.B) {
		var sum nsexec.Trace
		n := 0
		p := benchProvider(b, native.WithInitPath(moatInit(b)), native.WithNsexecOptions(nsexec.WithTrace(func(t nsexec.Trace) {
			sum = addTrace(sum, t)
			n++
		})))
		dispatchLoop(b, p, nil)
		reportTrace(b, sum, n)
	})
	b.Run("seccomp-compile", func(b *testing.B) {
		pol := defaultPolicy(b)
		for range b.N {
			if _, err := seccomp.Compile(pol.Seccomp); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("cgroup", func(b *testing.B) {
		m, err := cgroups.New()
		if err != nil {
			testenv.Skipf(b, "no cgroup manager here: %v", err)
		}
		defer m.Close()
		mem, pids := int64(256<<20), int64(256)
		res := &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: &mem}, Pids: &specs.LinuxPids{Limit: &pids}}
		for range b.N {
			leaf, err := m.Create(uuid.NewString(), res)
			if err != nil {
				b.Fatal(err)
			}
			if err := leaf.Delete(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("native-cold/full", func(b *testing.B) {
		dispatchLoop(b, benchProvider(b, native.WithInitPath(moatInit(b))), nil)
	})
	b.Run("native-cold/no-seccomp", func(b *testing.B) {
		pol := defaultPolicy(b)
		pol.Seccomp, pol.Unfiltered = nil, true
		dispatchLoop(b, benchProvider(b, native.WithPolicy(pol), native.WithInitPath(moatInit(b))), nil)
	})
	b.Run("native-cold/no-cgroups", func(b *testing.B) {
		dispatchLoop(b, benchProvider(b, native.WithoutCgroups(), native.WithInitPath(moatInit(b))), nil)
	})
}

func defaultPolicy(b *testing.B) *policies.Policy {
	b.Helper()
	pol, err := policies.Builtin("default")
	if err != nil {
		b.Fatal(err)
	}
	return pol
}

// benchClone forks and execs /bin/true in new namespaces (flags), mapping
// the caller's own ids when a user namespace is asked for.
func benchClone(b *testing.B, flags uintptr) {
	for range b.N {
		cmd := exec.Command("/bin/true")
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: flags}
		if flags&unix.CLONE_NEWUSER != 0 {
			cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}}
			cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}
		}
		if err := cmd.Run(); err != nil {
			b.Fatalf("clone flags %#x: %v", flags, err)
		}
	}
}

func addTrace(a, t nsexec.Trace) nsexec.Trace {
	return nsexec.Trace{Spawn: a.Spawn + t.Spawn, Runtime: a.Runtime + t.Runtime, Config: a.Config + t.Config,
		Handshake: a.Handshake + t.Handshake, Sources: a.Sources + t.Sources, Mounts: a.Mounts + t.Mounts,
		Pivot: a.Pivot + t.Pivot, Hygiene: a.Hygiene + t.Hygiene, Privileges: a.Privileges + t.Privileges,
		Seccomp: a.Seccomp + t.Seccomp, Exec: a.Exec + t.Exec}
}

func reportTrace(b *testing.B, t nsexec.Trace, n int) {
	if n == 0 {
		return
	}
	for _, s := range []struct {
		name string
		d    time.Duration
	}{{"spawn", t.Spawn}, {"runtime", t.Runtime}, {"config", t.Config}, {"handshake", t.Handshake},
		{"sources", t.Sources}, {"mounts", t.Mounts}, {"pivot", t.Pivot}, {"hygiene", t.Hygiene},
		{"privs", t.Privileges}, {"seccomp", t.Seccomp}, {"exec", t.Exec}} {
		b.ReportMetric(float64(s.d.Microseconds())/float64(n), s.name+"-µs/op")
	}
}

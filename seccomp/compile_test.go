//go:build linux && cgo

package seccomp_test

import (
	"errors"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/policies"
	"github.com/moat-sandbox/moat/seccomp"
)

func TestCompileRejects(t *testing.T) {
	errno := uint(5000)
	cases := map[string]*specs.LinuxSeccomp{
		"nil":            nil,
		"unknown action": {DefaultAction: "SCMP_ACT_MAYBE"},
		"notify":         {DefaultAction: specs.ActErrno, Syscalls: []specs.LinuxSyscall{{Names: []string{"read"}, Action: specs.ActNotify}}},
		"errno range":    {DefaultAction: specs.ActErrno, DefaultErrnoRet: &errno},
		"unknown op":     {DefaultAction: specs.ActErrno, Syscalls: []specs.LinuxSyscall{{Names: []string{"read"}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{{Index: 0, Op: "SCMP_CMP_ABOUT"}}}}},
		"unknown arch":   {DefaultAction: specs.ActErrno, Architectures: []specs.Arch{"SCMP_ARCH_Z80"}},
		"flags":          {DefaultAction: specs.ActErrno, Flags: []specs.LinuxSeccompFlag{specs.LinuxSeccompFlagLog}},
		"listener":       {DefaultAction: specs.ActErrno, ListenerPath: "/run/agent.sock"},
	}
	for name, p := range cases {
		if _, err := seccomp.Compile(p); err == nil {
			t.Errorf("%s: Compile accepted it", name)
		}
	}
	var pe *seccomp.ProfileError
	if _, err := seccomp.Compile(cases["unknown op"]); !errors.As(err, &pe) || pe.Field != "syscalls[0].args" {
		t.Errorf("unknown op: want a *ProfileError at syscalls[0].args, got %v", err)
	}
}

// The ENOSYS stub leads a refusing profile (its effect is checked in a real
// filter by the probe "unassigned syscall 1000").
func TestCompileENOSYSStub(t *testing.T) {
	deny := compile(t, &specs.LinuxSeccomp{DefaultAction: specs.ActErrno, Syscalls: []specs.LinuxSyscall{{Names: []string{"read", "write"}, Action: specs.ActAllow}}})
	last := unix.SockFilter{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)}
	found := false
	for _, ins := range deny[:8] {
		found = found || ins == last
	}
	if !found {
		t.Errorf("no ENOSYS return at the head of a deny-by-default program: %v", deny[:8])
	}
}

// Unknown syscall names are skipped (profiles list every architecture's).
func TestCompileSkipsUnknownNames(t *testing.T) {
	p := &specs.LinuxSeccomp{DefaultAction: specs.ActErrno, Syscalls: []specs.LinuxSyscall{{Names: []string{"read", "no_such_syscall_xyz", "chown32"}, Action: specs.ActAllow}}}
	if prog := compile(t, p); len(prog) == 0 {
		t.Fatal("empty program")
	}
}

func TestDigestMatchesPolicies(t *testing.T) {
	for _, name := range policies.Builtins() {
		p, err := policies.Builtin(name)
		if err != nil {
			t.Fatal(err)
		}
		want, err := p.SeccompDigest()
		if err != nil {
			t.Fatal(err)
		}
		got, err := seccomp.Digest(p.Seccomp)
		if err != nil || got != want {
			t.Errorf("%s: seccomp.Digest %q, policies SeccompDigest %q (%v)", name, got, want, err)
		}
	}
}

func TestProgramRoundTrip(t *testing.T) {
	prog := compile(t, defaultProfile(t))
	b, err := prog.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	back, err := seccomp.ParseProgram(b)
	if err != nil || len(back) != len(prog) {
		t.Fatalf("round trip: %d instructions, %v", len(back), err)
	}
	for i := range prog {
		if back[i] != prog[i] {
			t.Fatalf("instruction %d differs", i)
		}
	}
}

func BenchmarkCompile(b *testing.B) {
	profile := defaultProfile(b)
	for b.Loop() {
		if _, err := seccomp.Compile(profile); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCacheHit(b *testing.B) {
	profile := defaultProfile(b)
	var c seccomp.Cache
	if _, err := c.Program(profile); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := c.Program(profile); err != nil {
			b.Fatal(err)
		}
	}
}

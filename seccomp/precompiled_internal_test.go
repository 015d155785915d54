package seccomp

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/policies"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Every built-in policy's profile has its program here, under its policy's
// name, whether or not it shares the profile of another.
func TestPrecompiledFoundByDigest(t *testing.T) {
	if precompiledNative == nil {
		t.Skip("no programs are precompiled for this architecture")
	}
	for _, name := range policies.Builtins() {
		p, err := policies.Builtin(name)
		if err != nil {
			t.Fatal(err)
		}
		if p.Seccomp == nil {
			continue
		}
		prog, err := lookupPrecompiled(p.Seccomp)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		i := slices.IndexFunc(precompiledNative.programs, func(q precompiledProgram) bool { return slices.Equal(q.prog, prog) })
		if i < 0 || !slices.Contains(strings.Fields(precompiledNative.programs[i].policies), name) {
			t.Errorf("%s: got a program that is not labelled with it", name)
		}
		prog[0].K ^= 1 // a caller's copy: the table stays as it is
		if again, _ := lookupPrecompiled(p.Seccomp); again[0] == prog[0] {
			t.Fatalf("%s: lookupPrecompiled handed out the table itself", name)
		}
	}
}

// A built-in policy's profile changed in any way, by code or by a policy
// that extends it, is not matched to the program of what it was: the
// lookup is by the digest of the whole profile, never by a name.
func TestPrecompiledRefusesChangedBuiltins(t *testing.T) {
	if precompiledNative == nil {
		t.Skip("no programs are precompiled for this architecture")
	}
	errno := uint(13)
	changes := map[string]func(*specs.LinuxSeccomp){
		"one more allowed call": func(s *specs.LinuxSeccomp) {
			s.Syscalls[0].Names = append(s.Syscalls[0].Names, "ptrace")
		},
		"a refusal dropped": func(s *specs.LinuxSeccomp) {
			i := slices.IndexFunc(s.Syscalls, func(r specs.LinuxSyscall) bool { return slices.Contains(r.Names, "clone3") })
			s.Syscalls = slices.Delete(s.Syscalls, i, i+1)
		},
		"another default errno": func(s *specs.LinuxSeccomp) { s.DefaultErrnoRet = &errno },
		"an argument changed": func(s *specs.LinuxSeccomp) {
			for i, r := range s.Syscalls {
				if slices.Contains(r.Names, "socket") && len(r.Args) == 1 {
					s.Syscalls[i].Args = []specs.LinuxSeccompArg{{Index: 0, Value: 17, Op: specs.OpEqualTo}} // AF_PACKET
					return
				}
			}
			panic("no socket rule")
		},
		"32-bit calls allowed": func(s *specs.LinuxSeccomp) {
			s.Architectures = append(s.Architectures, specs.ArchX86, specs.ArchARM)
		},
		"names reordered":  func(s *specs.LinuxSeccomp) { slices.Reverse(s.Syscalls[0].Names) },
		"allow by default": func(s *specs.LinuxSeccomp) { s.DefaultAction = specs.ActAllow },
	}
	for _, base := range []string{"default", "python", "strict"} {
		for what, change := range changes {
			p, err := policies.Builtin(base)
			if err != nil {
				t.Fatal(err)
			}
			change(p.Seccomp)
			refused(t, base+", "+what, p.Seccomp)
		}
	}

	// A policy that extends python with a profile of its own (the default
	// one and ptrace) is refused; one that changes only its limits runs
	// with python's program.
	python, _ := policies.Builtin("python")
	own := *python.Seccomp
	own.Syscalls = append(slices.Clone(own.Syscalls), specs.LinuxSyscall{Names: []string{"ptrace"}, Action: specs.ActAllow})
	ext := resolvePolicy(t, &policies.Policy{Version: 1, Name: "mine", Extends: "python", Seccomp: &own})
	refused(t, "extends python with its own profile", ext.Seccomp)
	ext = resolvePolicy(t, &policies.Policy{Version: 1, Name: "mine", Extends: "python", Limits: policies.Limits{Pids: 7}})
	got, err := lookupPrecompiled(ext.Seccomp)
	want, _ := lookupPrecompiled(python.Seccomp)
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("extends python, limits only: got %d instructions, %v; want python's program", len(got), err)
	}
}

func refused(t *testing.T, what string, s *specs.LinuxSeccomp) {
	t.Helper()
	prog, err := lookupPrecompiled(s)
	var npe *NotPrecompiledError
	if !errors.As(err, &npe) || !errors.Is(err, ErrUnsupported) {
		t.Errorf("%s: got %d instructions, %v; want a *NotPrecompiledError", what, len(prog), err)
		return
	}
	if d, _ := Digest(s); npe.Digest != d || !slices.Contains(npe.Policies, "python") {
		t.Errorf("%s: the error names digest %s and policies %v, want %s and the built-ins", what, npe.Digest, npe.Policies, d)
	}
}

func resolvePolicy(t *testing.T, p *policies.Policy) *policies.Policy {
	t.Helper()
	r, err := policies.Resolve(p)
	if err != nil {
		t.Fatalf("resolve %s: %v", p.Name, err)
	}
	return r
}

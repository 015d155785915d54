//go:build linux && cgo

package seccomp

import (
	"slices"
	"testing"

	"github.com/moat-sandbox/moat/policies"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"
)

// TestPrecompiledAgreeAcrossArches checks the programs carried for a
// foreign architecture (arm64, made on an amd64 host: compileFor) by what
// they do,
// since no arm64 kernel runs them here. Run through a BPF interpreter,
// each must give every system call the verdict the host's own program
// (which the probe battery checks against the kernel) gives the call of
// the same name, for every argument value the profile compares and its
// neighbours; a number that is no call of the target's must get the
// default action, or ENOSYS above the profile's highest; and a call from
// any other architecture must be refused.
func TestPrecompiledAgreeAcrossArches(t *testing.T) {
	native, err := libseccomp.GetNativeArch()
	if err != nil {
		t.Fatal(err)
	}
	if native != libseccomp.ArchAMD64 {
		t.Skipf("the foreign tables are checked against the amd64 program, and this host is %v", native)
	}
	for _, name := range []string{"default", "strict"} {
		pol, err := policies.Builtin(name)
		if err != nil {
			t.Fatal(err)
		}
		host, err := Compile(pol.Seccomp)
		if err != nil {
			t.Fatal(err)
		}
		digest, _ := Digest(pol.Seccomp)
		i := slices.IndexFunc(precompiledARM64.programs, func(p precompiledProgram) bool { return p.digest == digest })
		if i < 0 {
			t.Fatalf("no arm64 program for %s (TestPrecompiled says why)", name)
		}
		foreign := precompiledARM64.programs[i].prog
		t.Run(name, func(t *testing.T) {
			agreeAcross(t, pol.Seccomp, host, foreign, libseccomp.ArchARM64, unix.AUDIT_ARCH_AARCH64)
		})
	}
}

func agreeAcross(t *testing.T, profile *specs.LinuxSeccomp, host, foreign Program, arch libseccomp.ScmpArch, audit uint32) {
	wrong := 0
	mismatch := func(format string, args ...any) {
		t.Helper()
		if wrong++; wrong > 20 {
			t.Fatalf("more than 20 verdicts differ")
		}
		t.Errorf(format, args...)
	}
	verdict := func(p Program, d seccompData) uint32 {
		t.Helper()
		r, err := run(p, d)
		if err != nil {
			t.Fatalf("interpret %+v: %v", d, err)
		}
		return r
	}
	def := unix.SECCOMP_RET_ERRNO | uint32(*profile.DefaultErrnoRet)
	enosys := unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
	vectors := argVectors(profile)
	maxNr, compared, alone := -1, 0, 0
	for _, r := range profile.Syscalls {
		for _, n := range r.Names {
			if nr, err := libseccomp.GetSyscallFromNameByArch(n, arch); err == nil && int(nr) > maxNr {
				maxNr = int(nr)
			}
		}
	}
	for nr := 0; nr < 1024; nr++ {
		name, err := libseccomp.ScmpSyscall(nr).GetNameByArch(arch)
		if err != nil {
			want := def
			if nr > maxNr {
				want = enosys
			}
			if got := verdict(foreign, seccompData{nr: int32(nr), arch: audit}); got != want {
				mismatch("number %d, no call of %v: verdict %#x, want %#x", nr, arch, got, want)
			}
			continue
		}
		hostNr, err := libseccomp.GetSyscallFromName(name)
		if err != nil || hostNr < 0 {
			// A call the host lacks: only what no argument decides is
			// known without the host's program.
			if want, ok := unconditional(profile, name, def); ok {
				if got := verdict(foreign, seccompData{nr: int32(nr), arch: audit}); got != want {
					mismatch("%s (%v only): verdict %#x, want %#x", name, arch, got, want)
				}
				alone++
			}
			continue
		}
		for _, args := range vectors {
			want := verdict(host, seccompData{nr: int32(hostNr), arch: unix.AUDIT_ARCH_X86_64, args: args})
			if got := verdict(foreign, seccompData{nr: int32(nr), arch: audit, args: args}); got != want {
				mismatch("%s%v: verdict %#x on %v, %#x on the host", name, args, got, arch, want)
			}
			compared++
		}
	}
	for _, other := range []uint32{unix.AUDIT_ARCH_X86_64, unix.AUDIT_ARCH_I386, unix.AUDIT_ARCH_ARM, 0} {
		if other == audit {
			continue
		}
		for _, nr := range []int32{0, 1, 59, 221, 1000} {
			if got := verdict(foreign, seccompData{nr: nr, arch: other}); got != def {
				mismatch("call %d of arch %#x: verdict %#x, want the default %#x", nr, other, got, def)
			}
		}
	}
	if compared < 200*len(vectors) {
		t.Errorf("only %d verdicts compared: the tables of names were not read", compared)
	}
	t.Logf("%d verdicts compared, %d calls only %v has", compared, alone, arch)
}

// argVectors are argument sets that reach every comparison the profile
// makes: none set, and for each compared value the value itself, its
// neighbours, and the value with the upper 32 bits set.
func argVectors(profile *specs.LinuxSeccomp) [][6]uint64 {
	out := [][6]uint64{{}}
	seen := map[[2]uint64]bool{}
	for _, r := range profile.Syscalls {
		for _, a := range r.Args {
			v := a.Value
			if a.Op == specs.OpMaskedEqual {
				v = a.ValueTwo
			}
			for _, x := range []uint64{v, v + 1, v - 1, v | 0xffffffff00000000, v | ^a.Value} {
				if a.Index > 5 || seen[[2]uint64{uint64(a.Index), x}] {
					continue
				}
				seen[[2]uint64{uint64(a.Index), x}] = true
				var args [6]uint64
				args[a.Index] = x
				out = append(out, args)
			}
		}
	}
	return out
}

// unconditional is the verdict of the profile for a call of name whatever
// its arguments: the action of a rule without arguments naming it, or the
// default when no rule names it. It is not known (false) when only rules
// with arguments name it.
func unconditional(profile *specs.LinuxSeccomp, name string, def uint32) (uint32, bool) {
	named := false
	for _, r := range profile.Syscalls {
		for _, n := range r.Names {
			if n != name {
				continue
			}
			named = true
			if len(r.Args) > 0 {
				continue
			}
			switch r.Action {
			case specs.ActAllow:
				return unix.SECCOMP_RET_ALLOW, true
			case specs.ActErrno:
				errno := uint32(unix.EPERM)
				if r.ErrnoRet != nil {
					errno = uint32(*r.ErrnoRet)
				}
				return unix.SECCOMP_RET_ERRNO | errno, true
			}
			return 0, false
		}
	}
	return def, !named
}

package policies

import (
	"fmt"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// seccompActions are the OCI actions moat can compile. SCMP_ACT_NOTIFY is
// left out: there is no notify agent.
var seccompActions = []specs.LinuxSeccompAction{specs.ActKill, specs.ActKillProcess,
	specs.ActKillThread, specs.ActTrap, specs.ActErrno, specs.ActTrace, specs.ActAllow, specs.ActLog}

var seccompOperators = []specs.LinuxSeccompOperator{specs.OpNotEqual, specs.OpLessThan,
	specs.OpLessEqual, specs.OpEqualTo, specs.OpGreaterEqual, specs.OpGreaterThan, specs.OpMaskedEqual}

var seccompArches = []specs.Arch{specs.ArchX86, specs.ArchX86_64, specs.ArchX32, specs.ArchARM,
	specs.ArchAARCH64, specs.ArchMIPS, specs.ArchMIPS64, specs.ArchMIPS64N32, specs.ArchMIPSEL,
	specs.ArchMIPSEL64, specs.ArchMIPSEL64N32, specs.ArchPPC, specs.ArchPPC64, specs.ArchPPC64LE,
	specs.ArchS390, specs.ArchS390X, specs.ArchPARISC, specs.ArchPARISC64, specs.ArchRISCV64,
	specs.ArchLOONGARCH64, specs.ArchM68K, specs.ArchSH, specs.ArchSHEB}

// maxErrno is the largest errno a seccomp filter can return: the kernel caps
// SECCOMP_RET_DATA at MAX_ERRNO (4095) and libseccomp 2.5 refuses 4095 itself.
const maxErrno = 4094

func (v *validator) seccomp(s *specs.LinuxSeccomp) {
	v.seccompAction("seccomp.defaultAction", s.DefaultAction, s.DefaultErrnoRet, "seccomp.defaultErrnoRet")
	for i, a := range s.Architectures {
		if !slices.Contains(seccompArches, a) {
			v.add(fmt.Sprintf("seccomp.architectures[%d]", i), a, "is not a seccomp architecture; use a name like SCMP_ARCH_X86_64, SCMP_ARCH_AARCH64, SCMP_ARCH_X86")
		}
	}
	if len(s.Flags) > 0 {
		v.missing("seccomp.flags", "filter flags are not supported (the filter is loaded with TSYNC only); remove them")
	}
	if s.ListenerPath != "" || s.ListenerMetadata != "" {
		v.missing("seccomp.listenerPath", "seccomp user notification is not supported; remove listenerPath and listenerMetadata")
	}
	for i, r := range s.Syscalls {
		at := fmt.Sprintf("seccomp.syscalls[%d]", i)
		if len(r.Names) == 0 {
			v.missing(at+".names", "is empty; list at least one syscall name")
		}
		for j, n := range r.Names {
			if n == "" || strings.TrimSpace(n) != n {
				v.add(fmt.Sprintf("%s.names[%d]", at, j), n, "is not a syscall name")
			}
		}
		v.seccompAction(at+".action", r.Action, r.ErrnoRet, at+".errnoRet")
		if len(r.Args) > 6 {
			v.add(at+".args", len(r.Args), "arguments are too many; a syscall has at most 6")
		}
		for k, a := range r.Args {
			aat := fmt.Sprintf("%s.args[%d]", at, k)
			if a.Index > 5 {
				v.add(aat+".index", a.Index, "is not an argument index; use 0 to 5")
			}
			if !slices.Contains(seccompOperators, a.Op) {
				v.add(aat+".op", a.Op, "is not a comparison; use one of %s", joinOps())
			}
		}
	}
}

func (v *validator) seccompAction(at string, a specs.LinuxSeccompAction, errnoRet *uint, errnoAt string) {
	if a == specs.ActNotify {
		v.add(at, a, "is not supported (no notify agent); use SCMP_ACT_ERRNO or SCMP_ACT_KILL_PROCESS")
	} else if !slices.Contains(seccompActions, a) {
		v.add(at, a, "is not a seccomp action; use SCMP_ACT_ALLOW, SCMP_ACT_ERRNO, SCMP_ACT_KILL_PROCESS, SCMP_ACT_KILL_THREAD, SCMP_ACT_TRAP, SCMP_ACT_TRACE or SCMP_ACT_LOG")
	}
	if errnoRet == nil {
		return
	}
	if a != specs.ActErrno && a != specs.ActTrace {
		v.add(errnoAt, *errnoRet, "is only meaningful with SCMP_ACT_ERRNO or SCMP_ACT_TRACE; remove it")
	} else if *errnoRet > maxErrno {
		v.add(errnoAt, *errnoRet, "is out of range; use 0 to %d", maxErrno)
	}
}

func joinOps() string {
	s := make([]string, len(seccompOperators))
	for i, o := range seccompOperators {
		s[i] = string(o)
	}
	return strings.Join(s, ", ")
}

// passes are the actions that let a call through.
var passes = []specs.LinuxSeccompAction{specs.ActAllow, specs.ActLog}

// Filters reports whether the policy's seccomp profile refuses anything:
// false without a profile, and for one whose default and every rule let
// calls through (SCMP_ACT_ALLOW, SCMP_ACT_LOG), which compiles to a filter
// that filters nothing.
func (p *Policy) Filters() bool {
	s := p.Seccomp
	if s == nil {
		return false
	}
	if !slices.Contains(passes, s.DefaultAction) {
		return true
	}
	for _, r := range s.Syscalls {
		if !slices.Contains(passes, r.Action) {
			return true
		}
	}
	return false
}

// CheckFilter returns the *FieldError refusing an effective policy that
// runs without a syscall filter and does not say "unfiltered": true, or
// nil. Validate applies it to every policy that extends nothing (what a
// policy extending another leaves unset comes from its base); a provider
// applies it to the policy it runs.
func (p *Policy) CheckFilter() error {
	if p.Unfiltered || p.Filters() {
		return nil
	}
	if p.Seccomp == nil {
		return &FieldError{Path: "seccomp", Reason: `is missing, so the tool would run with no syscall filter; ` +
			`add a profile ("extends": "default" brings the default allowlist) or state "unfiltered": true`}
	}
	return fieldErr("seccomp.defaultAction", p.Seccomp.DefaultAction, `lets every call through and no rule refuses any, `+
		`so the profile filters nothing; make it refuse something (the default allowlist uses SCMP_ACT_ERRNO), `+
		`or remove the profile and state "unfiltered": true`)
}

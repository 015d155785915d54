//go:build linux && cgo

package seccomp

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"
)

// Compile turns an OCI seccomp profile into a classic BPF program for the
// architecture this binary runs on. It runs libseccomp in the host; the
// sandbox child only loads the result (see Load).
//
// Interpretation of the profile, where OCI leaves room:
//   - architectures lists the architectures whose system calls may run at all.
//     The native one is always present. A compat architecture of the native one
//     (x86 and x32 on x86_64, arm on aarch64) is added only when listed; any
//     other architecture is ignored, the kernel never reports it here. A call
//     from an architecture not added gets the default action when that refuses
//     the call, and ENOSYS when the default action would allow it, so a
//     deny-list profile cannot be stepped around with int 0x80 or x32 numbers.
//   - A syscall name this libseccomp does not know for the native architecture
//     is skipped (profiles list names of every architecture, as runc does).
//   - With a refusing default action, a syscall number above the highest one
//     the profile names answers ENOSYS instead (see enosysStub), so a libc that
//     probes a newer call (fchmodat2, cachestat, clone3) falls back cleanly.
//   - Several args on one rule are ANDed; if one argument index repeats, each
//     arg becomes its own rule (ORed), as in runc.
//   - SCMP_CMP_MASKED_EQ takes the mask in value and the datum in valueTwo.
//   - flags, listenerPath and SCMP_ACT_NOTIFY are refused: the program is
//     loaded by Load with TSYNC only, and there is no notify agent.
func Compile(profile *specs.LinuxSeccomp) (Program, error) {
	if profile == nil {
		return nil, errors.New("compile seccomp profile: no profile")
	}
	if len(profile.Flags) > 0 {
		return nil, fmt.Errorf("compile seccomp profile: %w", &ProfileError{Field: "flags", Err: errors.New("filter flags are not supported (the program is loaded with TSYNC only)")})
	}
	if profile.ListenerPath != "" {
		return nil, fmt.Errorf("compile seccomp profile: %w", &ProfileError{Field: "listenerPath", Err: errors.New("seccomp user notification is not supported")})
	}
	def, err := action(profile.DefaultAction, profile.DefaultErrnoRet)
	if err != nil {
		return nil, fmt.Errorf("compile seccomp profile: %w", &ProfileError{Field: "defaultAction", Err: err})
	}
	// libseccomp refuses a rule whose action equals the filter's default
	// (EACCES, "requested action matches default action of filter"), yet an
	// allowlist needs exactly that for exceptions: ioctl is allowed, but
	// ioctl(TIOCSTI) answers EPERM like the default. So the filter is built
	// with a stand-in default (an errno the profile never uses) and the
	// stand-in's return instructions are rewritten to the real default
	// after export (see rewriteReturns).
	standIn, err := standInAction(profile)
	if err != nil {
		return nil, fmt.Errorf("compile seccomp profile: %w", err)
	}
	f, err := libseccomp.NewFilter(standIn)
	if err != nil {
		return nil, fmt.Errorf("compile seccomp profile: new filter: %w", err)
	}
	defer f.Release()
	// A binary tree of syscall numbers instead of a linear list: fewer
	// instructions run per call for an allowlist of a few hundred names.
	// Needs libseccomp >= 2.5.0 (API level 4); without it the linear filter
	// is equally correct, so the error is ignored on purpose.
	_ = f.SetOptimize(2)
	refuses := refusing(profile.DefaultAction)
	badArch := standIn
	if !refuses {
		badArch = libseccomp.ActErrno.SetReturnCode(int16(unix.ENOSYS))
	}
	if err := f.SetBadArchAction(badArch); err != nil {
		return nil, fmt.Errorf("compile seccomp profile: set bad-arch action: %w", err)
	}
	if err := addArches(f, profile.Architectures); err != nil {
		return nil, fmt.Errorf("compile seccomp profile: %w", err)
	}
	maxNr, err := addRules(f, profile.Syscalls)
	if err != nil {
		return nil, fmt.Errorf("compile seccomp profile: %w", err)
	}
	raw, err := export(f)
	if err != nil {
		return nil, fmt.Errorf("compile seccomp profile: export: %w", err)
	}
	prog, err := ParseProgram(raw)
	if err != nil {
		return nil, fmt.Errorf("compile seccomp profile: %w", err)
	}
	rewriteReturns(prog, retValue(standIn), retValue(def))
	if refuses && maxNr >= 0 {
		prog = append(enosysStub(uint32(maxNr)), prog...)
	}
	if len(prog) > unix.BPF_MAXINSNS {
		return nil, fmt.Errorf("compile seccomp profile: %d instructions exceed the kernel's limit of %d", len(prog), unix.BPF_MAXINSNS)
	}
	return prog, nil
}

// compatArches names, per native architecture, the architectures whose
// system calls its kernel also accepts (compat entry points).
var compatArches = map[libseccomp.ScmpArch][]libseccomp.ScmpArch{
	libseccomp.ArchAMD64: {libseccomp.ArchX86, libseccomp.ArchX32},
	libseccomp.ArchARM64: {libseccomp.ArchARM},
}

func addArches(f *libseccomp.ScmpFilter, names []specs.Arch) error {
	native, err := libseccomp.GetNativeArch()
	if err != nil {
		return fmt.Errorf("native architecture: %w", err)
	}
	for i, name := range names {
		// OCI writes SCMP_ARCH_X86_64; libseccomp-golang parses x86_64.
		a, err := libseccomp.GetArchFromString(strings.TrimPrefix(string(name), "SCMP_ARCH_"))
		if err != nil {
			return &ProfileError{Field: fmt.Sprintf("architectures[%d]", i), Err: fmt.Errorf("unknown architecture %q", name)}
		}
		if a == native || !isCompat(native, a) {
			continue
		}
		if err := f.AddArch(a); err != nil {
			return &ProfileError{Field: fmt.Sprintf("architectures[%d]", i), Err: err}
		}
	}
	return nil
}

func isCompat(native, a libseccomp.ScmpArch) bool {
	compat, known := compatArches[native]
	if !known {
		return true // an architecture we have no table for: trust the profile
	}
	for _, c := range compat {
		if c == a {
			return true
		}
	}
	return false
}

// addRules adds every rule and returns the highest native syscall number
// the profile names (-1 when it names none).
//
// libseccomp drops the conditional rules of a syscall that also has an
// unconditional one (the unconditional rule replaces the syscall's whole
// decision tree), so "allow ioctl, but deny ioctl(TIOCSTI)" would silently
// allow TIOCSTI. For such a syscall the unconditional rule is added last,
// as a condition that always holds (arg >= 0, unsigned, on an argument the
// conditional rules compare), so it becomes the fall-through of their chain.
// ((arg & 0) == 0 does not work: libseccomp folds it into an unconditional
// rule.) The probe tests check the outcome in a real filter.
func addRules(f *libseccomp.ScmpFilter, rules []specs.LinuxSyscall) (int, error) {
	condIndex := map[string]uint{} // syscall name -> an arg index its conditional rules use
	for _, r := range rules {
		if len(r.Args) == 0 {
			continue
		}
		for _, name := range r.Names {
			if _, ok := condIndex[name]; !ok {
				condIndex[name] = r.Args[0].Index
			}
		}
	}
	type deferred struct {
		nr    libseccomp.ScmpSyscall
		act   libseccomp.ScmpAction
		cond  libseccomp.ScmpCondition
		field string
	}
	var last []deferred
	maxNr := -1
	for i, r := range rules {
		field := fmt.Sprintf("syscalls[%d]", i)
		act, err := action(r.Action, r.ErrnoRet)
		if err != nil {
			return 0, &ProfileError{Field: field + ".action", Err: err}
		}
		condSets, err := conditions(r.Args)
		if err != nil {
			return 0, &ProfileError{Field: field + ".args", Err: err}
		}
		for j, name := range r.Names {
			nr, err := libseccomp.GetSyscallFromName(name)
			if err != nil {
				continue // not a syscall of this architecture or this libseccomp
			}
			if int(nr) > maxNr {
				maxNr = int(nr)
			}
			at := fmt.Sprintf("%s.names[%d]", field, j)
			if idx, ok := condIndex[name]; ok && len(condSets) == 0 {
				always, err := libseccomp.MakeCondition(idx, libseccomp.CompareGreaterEqual, 0)
				if err != nil {
					return 0, &ProfileError{Field: at, Err: err}
				}
				last = append(last, deferred{nr, act, always, at})
				continue
			}
			if len(condSets) == 0 {
				err = f.AddRule(nr, act)
			}
			for _, conds := range condSets {
				if err = f.AddRuleConditional(nr, act, conds); err != nil {
					break
				}
			}
			if err != nil {
				return 0, &ProfileError{Field: at, Err: fmt.Errorf("add rule for %s: %w", name, err)}
			}
		}
	}
	for _, d := range last {
		if err := f.AddRuleConditional(d.nr, d.act, []libseccomp.ScmpCondition{d.cond}); err != nil {
			return 0, &ProfileError{Field: d.field, Err: fmt.Errorf("add fall-through rule: %w", err)}
		}
	}
	return maxNr, nil
}

// conditions returns the condition sets of one rule: one set (ANDed) when
// every argument index is distinct, else one set per argument (ORed).
func conditions(args []specs.LinuxSeccompArg) ([][]libseccomp.ScmpCondition, error) {
	if len(args) == 0 {
		return nil, nil
	}
	conds := make([]libseccomp.ScmpCondition, 0, len(args))
	seen := map[uint]bool{}
	repeated := false
	for k, a := range args {
		c, err := condition(a)
		if err != nil {
			return nil, fmt.Errorf("[%d]: %w", k, err)
		}
		repeated = repeated || seen[a.Index]
		seen[a.Index] = true
		conds = append(conds, c)
	}
	if !repeated {
		return [][]libseccomp.ScmpCondition{conds}, nil
	}
	sets := make([][]libseccomp.ScmpCondition, 0, len(conds))
	for _, c := range conds {
		sets = append(sets, []libseccomp.ScmpCondition{c})
	}
	return sets, nil
}

var operators = map[specs.LinuxSeccompOperator]libseccomp.ScmpCompareOp{
	specs.OpNotEqual:     libseccomp.CompareNotEqual,
	specs.OpLessThan:     libseccomp.CompareLess,
	specs.OpLessEqual:    libseccomp.CompareLessOrEqual,
	specs.OpEqualTo:      libseccomp.CompareEqual,
	specs.OpGreaterEqual: libseccomp.CompareGreaterEqual,
	specs.OpGreaterThan:  libseccomp.CompareGreater,
	specs.OpMaskedEqual:  libseccomp.CompareMaskedEqual,
}

func condition(a specs.LinuxSeccompArg) (libseccomp.ScmpCondition, error) {
	op, ok := operators[a.Op]
	if !ok {
		return libseccomp.ScmpCondition{}, fmt.Errorf("unknown operator %q", a.Op)
	}
	if op == libseccomp.CompareMaskedEqual {
		return libseccomp.MakeCondition(a.Index, op, a.Value, a.ValueTwo)
	}
	return libseccomp.MakeCondition(a.Index, op, a.Value)
}

func action(a specs.LinuxSeccompAction, errnoRet *uint) (libseccomp.ScmpAction, error) {
	code := int16(unix.EPERM)
	if errnoRet != nil {
		if *errnoRet > 4094 {
			return libseccomp.ActInvalid, fmt.Errorf("errno %d out of range (at most 4094)", *errnoRet)
		}
		code = int16(*errnoRet)
	}
	switch a {
	case specs.ActAllow:
		return libseccomp.ActAllow, nil
	case specs.ActErrno:
		return libseccomp.ActErrno.SetReturnCode(code), nil
	case specs.ActKill, specs.ActKillThread:
		return libseccomp.ActKillThread, nil
	case specs.ActKillProcess:
		return libseccomp.ActKillProcess, nil
	case specs.ActTrap:
		return libseccomp.ActTrap, nil
	case specs.ActTrace:
		return libseccomp.ActTrace.SetReturnCode(code), nil
	case specs.ActLog:
		return libseccomp.ActLog, nil
	case specs.ActNotify:
		return libseccomp.ActInvalid, fmt.Errorf("action %s is not supported (no notify agent)", a)
	}
	return libseccomp.ActInvalid, fmt.Errorf("unknown action %q", a)
}

// refusing reports whether the default action stops the call (as opposed to
// allowing or merely logging it).
func refusing(a specs.LinuxSeccompAction) bool {
	return a != specs.ActAllow && a != specs.ActLog
}

// export writes the filter as BPF. seccomp_export_bpf_mem appeared in
// libseccomp 2.6; with 2.5.4 (Debian 12) it fails, so fall back to
// seccomp_export_bpf into a pipe, as runc's patchbpf does.
func export(f *libseccomp.ScmpFilter) ([]byte, error) {
	if b, err := f.ExportBPFMem(); err == nil {
		return b, nil
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	type result struct {
		b   []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		b, err := io.ReadAll(r)
		done <- result{b, err}
	}()
	err = f.ExportBPF(w)
	w.Close()
	res := <-done
	if err != nil {
		return nil, err
	}
	return res.b, res.err
}

// standInAction picks ERRNO(n) for the largest n (at most 4094, libseccomp refuses 4095) that no
// action of the profile returns, to stand in for the default action while
// libseccomp builds the filter.
func standInAction(profile *specs.LinuxSeccomp) (libseccomp.ScmpAction, error) {
	used := map[uint]bool{}
	mark := func(a specs.LinuxSeccompAction, r *uint) {
		if (a == specs.ActErrno || a == specs.ActTrace) && r != nil {
			used[*r] = true
		}
	}
	mark(profile.DefaultAction, profile.DefaultErrnoRet)
	used[uint(unix.EPERM)] = true // the implicit errnoRet
	used[uint(unix.ENOSYS)] = true
	for _, r := range profile.Syscalls {
		mark(r.Action, r.ErrnoRet)
	}
	for n := uint(4094); n > 0; n-- {
		if !used[n] {
			return libseccomp.ActErrno.SetReturnCode(int16(n)), nil
		}
	}
	return libseccomp.ActInvalid, errors.New("no free errno value for the stand-in default action")
}

// retValue is the SECCOMP_RET_* value the kernel sees for a, the K of the
// BPF return instruction libseccomp emits for it.
func retValue(a libseccomp.ScmpAction) uint32 {
	code := uint32(uint16(a.GetReturnCode()))
	switch a & 0xffff {
	case libseccomp.ActAllow:
		return unix.SECCOMP_RET_ALLOW
	case libseccomp.ActErrno:
		return unix.SECCOMP_RET_ERRNO | code
	case libseccomp.ActTrace:
		return unix.SECCOMP_RET_TRACE | code
	case libseccomp.ActKillThread:
		return unix.SECCOMP_RET_KILL_THREAD
	case libseccomp.ActKillProcess:
		return unix.SECCOMP_RET_KILL_PROCESS
	case libseccomp.ActTrap:
		return unix.SECCOMP_RET_TRAP
	case libseccomp.ActLog:
		return unix.SECCOMP_RET_LOG
	}
	return unix.SECCOMP_RET_KILL_PROCESS
}

// rewriteReturns replaces every "return from" instruction by "return to".
// Only BPF_RET|BPF_K instructions are touched, never a comparison constant.
func rewriteReturns(p Program, from, to uint32) {
	for i := range p {
		if p[i].Code == unix.BPF_RET|unix.BPF_K && p[i].K == from {
			p[i].K = to
		}
	}
}

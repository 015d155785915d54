//go:build linux && cgo

package seccomp

import (
	"fmt"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"
)

// addRules adds every rule and returns the highest syscall number of the
// target architecture the profile names (-1 when it names none).
//
// libseccomp drops the conditional rules of a syscall that also has an
// unconditional one (the unconditional rule replaces the syscall's whole
// decision tree), so "allow ioctl, but deny ioctl(TIOCSTI)" would silently
// allow TIOCSTI. For such a syscall the unconditional rule is added last,
// as a condition that always holds (arg >= 0, unsigned, on an argument the
// conditional rules compare), so it becomes the fall-through of their chain.
// ((arg & 0) == 0 does not work: libseccomp folds it into an unconditional
// rule.) The probe tests check the outcome in a real filter.
func addRules(f *libseccomp.ScmpFilter, target libseccomp.ScmpArch, rules []specs.LinuxSyscall) (int, error) {
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
			at := fmt.Sprintf("%s.names[%d]", field, j)
			nr, err := libseccomp.GetSyscallFromNameByArch(name, target)
			if err != nil {
				continue // not a syscall this libseccomp knows
			}
			if int(nr) > maxNr {
				maxNr = int(nr) // a call the target lacks has a negative (pseudo) number
			}
			// A rule takes the host's number, which libseccomp translates
			// by name for the filter's sections (compileFor).
			if nr, err = libseccomp.GetSyscallFromName(name); err != nil {
				return 0, &ProfileError{Field: at, Err: fmt.Errorf("%s has no number on this host to translate from: %w", name, err)}
			}
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

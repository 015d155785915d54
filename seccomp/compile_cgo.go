//go:build linux && cgo

package seccomp

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"
)

// Compile turns an OCI seccomp profile into a classic BPF program for the
// architecture this binary runs on (compileFor makes one for another). It
// runs libseccomp in the host; the sandbox child only loads the result (see
// Load).
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
	return compileFor(profile, runtime.GOARCH)
}

// libseccompArchs are the targets of compileFor other than this host's.
var libseccompArchs = map[string]libseccomp.ScmpArch{
	"amd64": libseccomp.ArchAMD64,
	"arm64": libseccomp.ArchARM64,
}

// compileFor is Compile for the architecture goarch, which need not be this
// host's: the built-in policies' programs for every architecture in archs
// are made on one host (precompiled.go). A libseccomp filter holds one
// section per architecture (an x86_64 filter holds its x86 one) and
// translates a rule, given with this host's syscall number, by name into
// each section's number (arch_syscall_translate, src/arch.c); its BPF
// generator reads the sections only, never the host's architecture
// (src/gen_bpf.c). So for a foreign target the filter gets the target's
// section and loses the host's before any rule is added, and is then what
// the target's own libseccomp builds: the same sections, the same rules in
// the same order. TestPrecompiledAgreeAcrossArches checks the result's
// verdicts against the host's program.
func compileFor(profile *specs.LinuxSeccomp, goarch string) (Program, error) {
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
	target, err := setTarget(f, goarch)
	if err != nil {
		return nil, fmt.Errorf("compile seccomp profile: %w", err)
	}
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
	if err := addArches(f, target, profile.Architectures); err != nil {
		return nil, fmt.Errorf("compile seccomp profile: %w", err)
	}
	maxNr, err := addRules(f, target, profile.Syscalls)
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
		prog = append(enosysStub(uint32(maxNr), archs[goarch]), prog...)
	}
	if len(prog) > unix.BPF_MAXINSNS {
		return nil, fmt.Errorf("compile seccomp profile: %d instructions exceed the kernel's limit of %d", len(prog), unix.BPF_MAXINSNS)
	}
	return prog, nil
}

// setTarget makes f a filter for goarch and returns its libseccomp
// architecture: the host's as it is, another one in place of the host's.
func setTarget(f *libseccomp.ScmpFilter, goarch string) (libseccomp.ScmpArch, error) {
	native, err := libseccomp.GetNativeArch()
	if err != nil {
		return 0, fmt.Errorf("native architecture: %w", err)
	}
	if goarch == runtime.GOARCH {
		return native, nil
	}
	target, ok := libseccompArchs[goarch]
	if !ok {
		return 0, fmt.Errorf("no seccomp target for GOARCH %s", goarch)
	}
	if err := f.AddArch(target); err != nil {
		return 0, fmt.Errorf("add architecture %s: %w", target, err)
	}
	if err := f.RemoveArch(native); err != nil {
		return 0, fmt.Errorf("remove architecture %s: %w", native, err)
	}
	return target, nil
}

// compatArches names, per native architecture, the architectures whose
// system calls its kernel also accepts (compat entry points).
var compatArches = map[libseccomp.ScmpArch][]libseccomp.ScmpArch{
	libseccomp.ArchAMD64: {libseccomp.ArchX86, libseccomp.ArchX32},
	libseccomp.ArchARM64: {libseccomp.ArchARM},
}

// addArches adds the compat architectures of native the profile lists.
func addArches(f *libseccomp.ScmpFilter, native libseccomp.ScmpArch, names []specs.Arch) error {
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

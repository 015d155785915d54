package main

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/conformance"
	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/executor/native"
	"github.com/moat-sandbox/moat/policies"
	"github.com/moat-sandbox/moat/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func TestMain(m *testing.M) { conformance.Main(m) }

// The checks below mean something only in a build without libseccomp.
func TestBuiltWithoutCgo(t *testing.T) {
	if v := buildSetting("CGO_ENABLED"); v != "0" || seccomp.LibraryVersion() != "" {
		t.Fatalf("built with CGO_ENABLED=%s and libseccomp %q: this test is for a build without cgo", v, seccomp.LibraryVersion())
	}
}

// The whole kit, the isolation checks and the hostile syscall battery
// included, with the default and python policies, whose filters this
// build carries precompiled.
func TestConformance(t *testing.T) {
	everything := conformance.WithIsolation(conformance.Isolation{Filesystem: true, Network: true, PIDs: true, Privileges: true, SetID: true, Seccomp: true})
	for _, name := range []string{"default", "python"} {
		t.Run(name, func(t *testing.T) {
			conformance.Run(t, func(t *testing.T, cfg conformance.Config) executor.Provider {
				pol, err := policies.Builtin(name)
				if err != nil {
					t.Fatal(err)
				}
				opts := []native.Option{native.WithPolicy(pol), native.WithCommand(cfg.Command, cfg.Args...),
					native.WithAllowEnv(cfg.AllowEnv...), native.WithTimeout(cfg.Timeout),
					native.WithMaxOutputBytes(cfg.MaxOutputBytes), native.WithCredentials(cfg.Credentials),
					native.WithBinds(specs.Mount{Source: cfg.RunnerDir, Destination: cfg.RunnerDir, Options: []string{"ro"}})}
				if cfg.Ledger != nil {
					opts = append(opts, native.WithLedger(cfg.Ledger))
				}
				if cfg.KillGrace != nil {
					opts = append(opts, native.WithKillGrace(*cfg.KillGrace))
				}
				p, err := native.New(opts...)
				if err != nil {
					t.Fatalf("native.New with policy %s: %v", name, err)
				}
				t.Cleanup(func() { p.Close() })
				return p
			}, everything)
		})
	}
}

// A policy whose seccomp profile is no built-in policy's, a built-in one
// changed in code included, is refused with the typed error that names
// the fix, never run with the program of the policy it came from.
func TestCustomPolicyRefused(t *testing.T) {
	grown, err := policies.Builtin("python") // still named python
	if err != nil {
		t.Fatal(err)
	}
	grown.Seccomp.Syscalls = append(grown.Seccomp.Syscalls, specs.LinuxSyscall{Names: []string{"ptrace"}, Action: specs.ActAllow})
	own, err := policies.Resolve(&policies.Policy{Version: 1, Name: "mine", Extends: "python", Seccomp: grown.Seccomp})
	if err != nil {
		t.Fatal(err)
	}
	strict, _ := policies.Builtin("strict")
	strict.Seccomp.DefaultErrnoRet = nil // EPERM all the same, but not the profile it was
	for _, pol := range []*policies.Policy{grown, own, strict} {
		p, err := newProvider(pol, "/bin/true", nil)
		if err == nil {
			p.Close()
			t.Errorf("policy %s with a changed profile: native.New accepted it", pol.Name)
			continue
		}
		var ee *executor.Error
		var npe *seccomp.NotPrecompiledError
		if !errors.As(err, &ee) || ee.Code != executor.CodeConfig || !errors.As(err, &npe) || !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("policy %s: got %T %v, want a config *executor.Error wrapping a *seccomp.NotPrecompiledError", pol.Name, err, err)
			continue
		}
		if !slices.Contains(npe.Policies, "python") || !strings.Contains(err.Error(), "CGO_ENABLED=1") || !strings.Contains(err.Error(), "libseccomp-dev") {
			t.Errorf("policy %s: the error does not name the fix: %v", pol.Name, err)
		}
	}
}

package native_test

import (
	"testing"

	"github.com/moat-sandbox/moat/conformance"
	"github.com/moat-sandbox/moat/conformance/testenv"
	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/executor/native"
	"github.com/moat-sandbox/moat/executor/subprocess"
	"github.com/moat-sandbox/moat/nsexec"
)

func TestMain(m *testing.M) { conformance.Main(m) }

// newProvider is the conformance factory: the default policy, with the
// runner's directory bound read-only at the same path (policyProvider).
var newProvider = policyProvider("default")

// everything is full mode's claim: every isolation check.
var everything = conformance.WithIsolation(conformance.ModeIsolation(string(nsexec.ModeFull)))

func TestConformance(t *testing.T) { conformance.Run(t, newProvider, everything) }

func TestConformanceAsNobody(t *testing.T) {
	if testenv.RunAsUser(t, testenv.NobodyUID, testenv.NobodyGID) {
		return
	}
	conformance.Run(t, newProvider, everything)
}

// plainProvider is the reference for Compare: the subprocess provider, a
// plain process group.
func plainProvider(t *testing.T, cfg conformance.Config) executor.Provider {
	opts := []subprocess.Option{
		subprocess.WithCommand(cfg.Command, cfg.Args...),
		subprocess.WithTimeout(cfg.Timeout),
	}
	if cfg.KillGrace != nil {
		opts = append(opts, subprocess.WithKillGrace(*cfg.KillGrace))
	}
	if cfg.Ledger != nil {
		opts = append(opts, subprocess.WithLedger(cfg.Ledger))
	}
	p, err := subprocess.New(opts...)
	if err != nil {
		t.Fatalf("subprocess.New: %v", err)
	}
	return p
}

// TestEndsAsAPlainProcess: the same tool ends the same way in the sandbox
// as in a plain process, in the ledger and in the error, timeouts included.
func TestEndsAsAPlainProcess(t *testing.T) { conformance.Compare(t, plainProvider, newProvider) }

func TestEndsAsAPlainProcessAsNobody(t *testing.T) {
	if testenv.RunAsUser(t, testenv.NobodyUID, testenv.NobodyGID) {
		return
	}
	conformance.Compare(t, plainProvider, newProvider)
}

// reuseProvider is the reuse battery's factory: the default policy with a
// pool of one sandbox that serves up to 50 dispatches, without cgroups
// (a v1 leaf cannot be reused, and the battery must run on every layout).
var reuseProvider = policyProvider("default", native.WithPool(1), native.WithReuse(50), native.WithoutCgroups())

func TestReuseBattery(t *testing.T) { conformance.RunReuse(t, reuseProvider) }

func TestReuseBatteryAsNobody(t *testing.T) {
	if testenv.RunAsUser(t, testenv.NobodyUID, testenv.NobodyGID) {
		return
	}
	conformance.RunReuse(t, reuseProvider)
}

// TestReuseConformance: the whole kit (reference checks, isolation,
// hostile syscalls) on sandboxes that serve many dispatches each.
func TestReuseConformance(t *testing.T) { conformance.Run(t, reuseProvider, everything) }

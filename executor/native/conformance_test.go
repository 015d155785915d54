package native_test

import (
	"testing"

	"github.com/moat-sandbox/moat/conformance"
	"github.com/moat-sandbox/moat/conformance/testenv"
	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/executor/native"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func TestMain(m *testing.M) { conformance.Main(m) }

// newProvider is the conformance factory: the default policy, with the
// runner's directory bound read-only at the same path.
func newProvider(t *testing.T, cfg conformance.Config) executor.Provider {
	opts := []native.Option{
		native.WithCommand(cfg.Command, cfg.Args...),
		native.WithAllowEnv(cfg.AllowEnv...),
		native.WithTimeout(cfg.Timeout),
		native.WithMaxOutputBytes(cfg.MaxOutputBytes),
		native.WithCredentials(cfg.Credentials),
		native.WithBinds(specs.Mount{Source: cfg.RunnerDir, Destination: cfg.RunnerDir, Options: []string{"ro"}}),
	}
	if cfg.Ledger != nil {
		opts = append(opts, native.WithLedger(cfg.Ledger))
	}
	p, err := native.New(opts...)
	if err != nil {
		t.Fatalf("native.New: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

var everything = conformance.WithIsolation(conformance.Isolation{Filesystem: true, Network: true, PIDs: true, Privileges: true, Seccomp: true})

func TestConformance(t *testing.T) { conformance.Run(t, newProvider, everything) }

func TestConformanceAsNobody(t *testing.T) {
	if testenv.RunAsUser(t, testenv.NobodyUID, testenv.NobodyGID) {
		return
	}
	conformance.Run(t, newProvider, everything)
}

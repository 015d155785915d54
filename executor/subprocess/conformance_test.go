package subprocess_test

import (
	"testing"

	"github.com/moat-sandbox/moat/conformance"
	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/executor/subprocess"
)

func TestMain(m *testing.M) { conformance.Main(m) }

// newProvider is the conformance factory for the subprocess provider.
func newProvider(t *testing.T, cfg conformance.Config) executor.Provider {
	opts := []subprocess.Option{
		subprocess.WithCommand(cfg.Command, cfg.Args...),
		subprocess.WithAllowEnv(cfg.AllowEnv...),
		subprocess.WithTimeout(cfg.Timeout),
		subprocess.WithMaxOutputBytes(cfg.MaxOutputBytes),
		subprocess.WithCredentials(cfg.Credentials),
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

func TestConformance(t *testing.T) { conformance.Run(t, newProvider) }

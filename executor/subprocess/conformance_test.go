package subprocess_test

import (
	"os"
	"os/exec"
	"regexp"
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

func TestConformance(t *testing.T) { conformance.Run(t, newProvider) }

// The isolation checks must be able to fail: the subprocess provider
// isolates nothing, so claiming everything for it must fail every one of
// them. The false claim runs in a child copy of the test binary.
func TestIsolationChecksCatchAnUnisolatedProvider(t *testing.T) {
	if os.Getenv("MOAT_TEST_FALSE_CLAIM") == "1" {
		conformance.Run(t, newProvider, conformance.WithIsolation(conformance.Isolation{Filesystem: true, Network: true, PIDs: true, Privileges: true, SetID: true, Seccomp: true}))
		return
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run=^TestIsolationChecksCatchAnUnisolatedProvider$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "MOAT_TEST_FALSE_CLAIM=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("claiming isolation for the subprocess provider passed:\n%s", out)
	}
	ids := []string{"i1_", "i2_", "i3_", "i4_", "i5_", "i6_", "i7_", "i9_", "h1_"}
	if os.Geteuid() == 0 {
		// Only as root can an unisolated tool write files host root owns;
		// an ordinary user's files are its own, which i8 accepts; and only
		// root's tool may chmod the runner directory root made (i11).
		ids = append(ids, "i8_", "i11_")
	}
	for _, id := range ids {
		if !regexp.MustCompile(`--- FAIL: \S+/` + id).Match(out) {
			t.Errorf("isolation check %s did not fail for an unisolated provider", id)
		}
	}
	if t.Failed() {
		t.Logf("child output:\n%s", out)
	}
}

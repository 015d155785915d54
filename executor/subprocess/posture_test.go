package subprocess_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/conformance"
	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/executor/subprocess"
	"github.com/moat-sandbox/moat/ledger"
)

// TestPostureDescriptor: the descriptor and its fingerprint are the
// reference subprocessExecutor's under the same settings
// (conformance.ReferencePostures, computed by running the reference):
// its example, the defaults, and a fractional timeout, attested as it runs.
func TestPostureDescriptor(t *testing.T) {
	opts := map[string][]subprocess.Option{
		"subprocess reference example": {
			subprocess.WithLedger(&ledger.Memory{}),
			subprocess.WithAllowEnv("PATH"),
			subprocess.WithTimeout(5 * time.Second),
			subprocess.WithSandbox(func(string, *executor.Request) ([]string, error) { return nil, nil }),
		},
		"subprocess defaults":           nil,
		"subprocess fractional timeout": {subprocess.WithLedger(&ledger.Memory{}), subprocess.WithTimeout(1500500 * time.Microsecond)},
	}
	seen := 0
	for _, r := range conformance.ReferencePostures() {
		o, ok := opts[r.Name]
		if !ok {
			continue
		}
		seen++
		t.Run(r.Name, func(t *testing.T) {
			p, err := subprocess.New(o...)
			if err != nil {
				t.Fatal(err)
			}
			got, err := json.Marshal(p.Posture())
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != r.Descriptor {
				t.Fatalf("posture\n got %s\nwant %s", got, r.Descriptor)
			}
			if fp := executor.Fingerprint(p.Posture()); fp != r.Fingerprint {
				t.Fatalf("fingerprint %s, the reference descriptor's %s", fp, r.Fingerprint)
			}
		})
	}
	if seen != len(opts) {
		t.Fatalf("%d of %d reference postures found", seen, len(opts))
	}
}

// The posture is a copy: changing it does not change the provider's.
func TestPostureIsACopy(t *testing.T) {
	p, err := subprocess.New(subprocess.WithAllowEnv("A"))
	if err != nil {
		t.Fatal(err)
	}
	first := p.Posture()
	first.AllowEnv[0] = "B"
	if got := p.Posture().AllowEnv[0]; got != "A" {
		t.Fatalf("allowEnv changed through a returned posture: %q", got)
	}
}

package subprocess_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/executor/subprocess"
	"github.com/moat-sandbox/moat/ledger"
)

// The exact descriptors of contract 10.1: the reference's example, and the
// defaults.
func TestPostureDescriptor(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []subprocess.Option
		want string
	}{
		{"configured", []subprocess.Option{
			subprocess.WithLedger(&ledger.Memory{}),
			subprocess.WithAllowEnv("PATH"),
			subprocess.WithTimeout(5 * time.Second),
			subprocess.WithSandbox(func(string, *executor.Request) ([]string, error) { return nil, nil }),
		}, `{"regulatedPosture":1,"kind":"tool-executor","name":"subprocess","ledger":true,"allowEnv":["PATH"],"bounds":{"timeoutMs":5000,"maxOutputBytes":1048576},"isolation":{"flavor":"subprocess","sandboxed":true}}`},
		{"defaults", nil,
			`{"regulatedPosture":1,"kind":"tool-executor","name":"subprocess","ledger":false,"allowEnv":[],"bounds":{"timeoutMs":30000,"maxOutputBytes":1048576},"isolation":{"flavor":"subprocess","sandboxed":false}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := subprocess.New(tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			got, err := json.Marshal(p.Posture())
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Fatalf("posture\n got %s\nwant %s", got, tc.want)
			}
		})
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

package container_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/executor/container"
	"github.com/moat-sandbox/moat/ledger"
)

func TestPosture(t *testing.T) {
	digest := "localhost/tools@sha256:" + strings.Repeat("0f", 32)
	for _, tc := range []struct {
		name   string
		opts   []container.Option
		want   string
		strict string // "" when StrictFloor passes
	}{
		{"defaults", []container.Option{container.WithImage("busybox:1.36")},
			`{"regulatedPosture":1,"kind":"tool-executor","name":"container","ledger":false,"allowEnv":[],"bounds":{"timeoutMs":30000,"maxOutputBytes":1048576},"isolation":{"flavor":"container","network":"none","readOnlyRoot":true,"capDrop":["ALL"],"image":"busybox:1.36"}}`,
			"construction['container'].ledger"},
		{"configured and pinned", []container.Option{container.WithImage(digest), container.WithLedger(&ledger.Memory{}),
			container.WithForwardEnv("LANG"), container.WithTimeout(5 * time.Second), container.WithMaxOutputBytes(4096)},
			`{"regulatedPosture":1,"kind":"tool-executor","name":"container","ledger":true,"allowEnv":["LANG"],"bounds":{"timeoutMs":5000,"maxOutputBytes":4096},"isolation":{"flavor":"container","network":"none","readOnlyRoot":true,"capDrop":["ALL"],"image":"` + digest + `"}}`,
			""},
		{"loosened", []container.Option{container.WithImage(digest), container.WithLedger(&ledger.Memory{}),
			container.WithNetwork("bridge"), container.WithReadOnly(false), container.WithCapDrop()},
			`{"regulatedPosture":1,"kind":"tool-executor","name":"container","ledger":true,"allowEnv":[],"bounds":{"timeoutMs":30000,"maxOutputBytes":1048576},"isolation":{"flavor":"container","network":"bridge","readOnlyRoot":false,"capDrop":[],"image":"` + digest + `"}}`,
			"construction['container'].isolation.network"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := container.New(tc.opts...)
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
			err = executor.StrictFloor(p.Posture())
			switch {
			case tc.strict == "" && err != nil:
				t.Fatalf("StrictFloor: %v", err)
			case tc.strict != "" && (err == nil || !strings.Contains(err.Error(), tc.strict)):
				t.Fatalf("StrictFloor: %v, want a failure on %s", err, tc.strict)
			}
		})
	}
}

package container_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/conformance"
	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/executor/container"
	"github.com/moat-sandbox/moat/ledger"
)

// referencePosture returns the descriptor and fingerprint the reference's
// containerExecutor gives under the named settings.
func referencePosture(t *testing.T, name string) (string, string) {
	t.Helper()
	for _, p := range conformance.ReferencePostures() {
		if p.Name == name {
			return p.Descriptor, p.Fingerprint
		}
	}
	t.Fatalf("no reference posture %q", name)
	return "", ""
}

// TestPosture: the descriptor and its fingerprint are the reference
// containerExecutor's under the same settings, member for member (moat's
// capDrop and image stay out of it), and StrictFloor judges moat's
// additions.
func TestPosture(t *testing.T) {
	digest := "localhost/tools@sha256:" + strings.Repeat("0f", 32)
	for _, tc := range []struct {
		name   string // of the reference posture
		opts   []container.Option
		strict string // "" when StrictFloor passes
	}{
		{"container defaults", []container.Option{container.WithImage("busybox:1.36")},
			"construction['container'].ledger"},
		{"container configured and pinned", []container.Option{container.WithImage(digest), container.WithLedger(&ledger.Memory{}),
			container.WithForwardEnv("LANG"), container.WithTimeout(5 * time.Second), container.WithMaxOutputBytes(4096)},
			""},
		{"container loosened", []container.Option{container.WithImage(digest), container.WithLedger(&ledger.Memory{}),
			container.WithNetwork("bridge"), container.WithReadOnly(false), container.WithCapDrop()},
			"construction['container'].isolation.capDrop"},
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
			want, fingerprint := referencePosture(t, tc.name)
			if string(got) != want {
				t.Fatalf("posture\n got %s\nwant %s", got, want)
			}
			if fp := executor.Fingerprint(p.Posture()); fp != fingerprint {
				t.Fatalf("fingerprint %s, the reference descriptor's %s", fp, fingerprint)
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

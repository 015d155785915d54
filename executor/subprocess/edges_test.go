package subprocess_test

import (
	"encoding/json"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/executor/subprocess"
)

// TestFractionalTimeoutRunsAndIsAttestedAsConfigured: a timeout of 50.5 ms
// is the reference's timeoutMs 50.5. The reference's subprocessExecutor
// (run with timeoutMs 50.5 on /bin/sleep 5) rejects with exactly this
// message; the posture attests 50.5, the value that runs.
func TestFractionalTimeoutRunsAndIsAttestedAsConfigured(t *testing.T) {
	const reference = "tool 'slow' exceeded 50.5ms and was killed"
	p, _ := sh(t, "sleep 5", subprocess.WithTimeout(50500*time.Microsecond))
	if got := p.Posture().Bounds.TimeoutMs; got != 50.5 {
		t.Fatalf("attested timeoutMs %v, want 50.5", got)
	}
	start := time.Now()
	_, err := dispatch(p, request("slow"))
	e := wantCode(t, err, executor.CodeTimeout)
	if e.Message != reference {
		t.Fatalf("message %q, the reference's %q", e.Message, reference)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Fatalf("the dispatch took %v; the 50.5 ms timeout did not run", d)
	}
}

// TestWorkdirNameIsPrefixAndSixCharacters: the per-call workdir is named as
// the reference's mkdtemp names it, "rulvar-exec-<tool>-" and six random
// characters of [A-Za-z0-9] (contract 5.4; e.g. rulvar-exec-echo-YCPIgY),
// fresh for every call.
func TestWorkdirNameIsPrefixAndSixCharacters(t *testing.T) {
	p, base := sh(t, `printf '"%s"' "$PWD"`)
	name := regexp.MustCompile(`^rulvar-exec-echo-[A-Za-z0-9]{6}$`)
	seen := map[string]bool{}
	for range 5 {
		res, err := dispatch(p, request("echo"))
		if err != nil {
			t.Fatal(err)
		}
		var wd string
		if err := json.Unmarshal(res, &wd); err != nil {
			t.Fatalf("result %s: %v", res, err)
		}
		if filepath.Dir(wd) != base || !name.MatchString(filepath.Base(wd)) {
			t.Fatalf("workdir %s, want %s/rulvar-exec-echo-XXXXXX", wd, base)
		}
		if seen[wd] {
			t.Fatalf("workdir %s reused", wd)
		}
		seen[wd] = true
	}
	assertEmpty(t, base)
}

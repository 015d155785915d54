package native_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/conformance"
	"github.com/moat-sandbox/moat/conformance/testenv"
	"github.com/moat-sandbox/moat/executor/native"
	"github.com/moat-sandbox/moat/nsexec"
	"github.com/moat-sandbox/moat/policies"
)

// The kit's claim for the no-proc rung passes in it, as root and as
// nobody: every check but the pid one, whose probe needs /proc.
func TestConformanceNoProc(t *testing.T) {
	conformance.Run(t, noProcProvider, noProcClaim)
}

func TestConformanceNoProcAsNobody(t *testing.T) {
	if testenv.RunAsUser(t, testenv.NobodyUID, testenv.NobodyGID) {
		return
	}
	conformance.Run(t, noProcProvider, noProcClaim)
}

var (
	noProcProvider = policyProvider("default", native.WithMode(nsexec.ModeNoProc))
	noProcClaim    = conformance.WithIsolation(conformance.ModeIsolation(string(nsexec.ModeNoProc)))
)

// The posture names the mode and what it drops; the tool has an empty /proc.
func TestNoProcModePosture(t *testing.T) {
	p, err := native.New(native.WithMode(nsexec.ModeNoProc), native.WithoutCgroups())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	n := p.Posture().Isolation.Native
	if n.Mode != "no-proc" || len(n.ModeDrops) == 0 || !strings.Contains(strings.Join(n.ModeDrops, " "), "/proc") || n.ModeReason == "" {
		t.Fatalf("posture mode %q, reason %q, drops %q: want no-proc, why, and /proc among the drops", n.Mode, n.ModeReason, n.ModeDrops)
	}
	st, err := p.Run(context.Background(), &native.Command{Args: []string{"/bin/sh", "-c", `[ -z "$(ls -A /proc)" ] && [ ! -e /proc/self ] && [ -d /work ]`}})
	if err != nil || st.Code != 0 {
		t.Fatalf("an empty /proc in no-proc mode: exit %+v, %v", st, err)
	}
	full, err := native.New(native.WithoutCgroups())
	if err != nil {
		t.Fatal(err)
	}
	defer full.Close()
	if m, _ := nsexec.HostMode(); m == nsexec.ModeFull && full.Posture().Isolation.Native.Mode != "full" {
		t.Fatalf("on a full host the posture says mode %q", full.Posture().Isolation.Native.Mode)
	}
}

// A policy that requires full mode is refused, naming the mode and what
// is missing, where the sandboxes would run in no-proc; strict does.
func TestRequiresModeRefused(t *testing.T) {
	strict, err := policies.Builtin("strict")
	if err != nil {
		t.Fatal(err)
	}
	_, err = native.New(native.WithPolicy(strict), native.WithMode(nsexec.ModeNoProc), native.WithoutCgroups())
	var me *native.ModeError
	if !errors.As(err, &me) || me.Required != nsexec.ModeFull || me.Mode != nsexec.ModeNoProc ||
		!strings.Contains(err.Error(), "requires mode full") || !strings.Contains(err.Error(), "/proc") {
		t.Fatalf("strict in no-proc mode: %v (%T), want a *native.ModeError naming full, no-proc and /proc", err, err)
	}
	def, _ := policies.Builtin("default")
	def.Requires = &policies.Requires{Mode: "no-proc"}
	p, err := native.New(native.WithPolicy(def), native.WithMode(nsexec.ModeNoProc), native.WithoutCgroups())
	if err != nil {
		t.Fatalf("a policy that accepts no-proc, in no-proc: %v", err)
	}
	p.Close()
}

// A warm pool's prepared sandboxes run in the no-proc mode too.
func TestNoProcModePool(t *testing.T) {
	p, err := native.New(native.WithMode(nsexec.ModeNoProc), native.WithoutCgroups(), native.WithPool(2))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i := range 4 {
		st, err := p.Run(context.Background(), &native.Command{Args: []string{"/bin/sh", "-c", `[ -z "$(ls -A /proc)" ] && echo ok > /work/x && [ "$(cat /work/x)" = ok ]`}})
		if err != nil || st.Code != 0 {
			t.Fatalf("dispatch %d in no-proc mode from the pool: exit %+v, %v", i, st, err)
		}
	}
}

package native_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/cgroups"
	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/executor/native"
	"github.com/moat-sandbox/moat/ledger"
)

// TestReuseRefused: reuse without a pool, or with what a reset cannot
// renew, is refused by New with a *native.ReuseError.
func TestReuseRefused(t *testing.T) {
	for name, opts := range map[string][]native.Option{
		"no pool":  {native.WithReuse(5), native.WithoutCgroups()},
		"negative": {native.WithReuse(-2), native.WithPool(1), native.WithoutCgroups()},
		"egress":   {native.WithReuse(5), native.WithPool(1), native.WithoutCgroups(), native.WithPolicy(egressPolicy(t))},
	} {
		p, err := native.New(opts...)
		var re *native.ReuseError
		if !errors.As(err, &re) {
			if p != nil {
				p.Close()
			}
			t.Errorf("%s: %v, want a *native.ReuseError", name, err)
		}
	}
}

// TestReusePostureAndStats: the posture says how many dispatches a
// sandbox serves, and the pool counts the reused dispatches and resets.
func TestReusePostureAndStats(t *testing.T) {
	n := postureOf(t, nil, native.WithPool(1), native.WithReuse(4), native.WithoutCgroups()).Isolation.Native.Reuse
	if n == nil || n.Dispatches != 4 {
		t.Fatalf("posture reuse %+v, want 4 dispatches", n)
	}
	if n := postureOf(t, nil, native.WithoutCgroups()).Isolation.Native.Reuse; n != nil {
		t.Fatalf("posture without reuse: %+v", n)
	}
	p, err := native.New(native.WithPool(1), native.WithReuse(3), native.WithoutCgroups(), native.WithLedger(&ledger.Memory{}),
		native.WithCommand("/bin/sh", "-c", "cat >/dev/null; echo '{}'"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	deadline := time.Now().Add(20 * time.Second)
	for p.PoolStats().Reused < 2 && time.Now().Before(deadline) {
		if _, err := p.Dispatch(context.Background(), &executor.Request{Tool: "t", Args: []byte("{}"), Spec: []byte("{}")}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	s := p.PoolStats()
	if s.Reused < 2 || s.Reset < 2 {
		t.Fatalf("stats %+v: want 2 reused dispatches and resets at least", s)
	}
}

// TestReuseRefusesV1Leaves: with the host's own cgroup manager, reuse is
// refused where a dispatch's leaf would be a v1 one (this hybrid host:
// run WithoutCgroups), and allowed on v2.
func TestReuseRefusesV1Leaves(t *testing.T) {
	p, err := native.New(native.WithPool(1), native.WithReuse(5), native.WithLedger(&ledger.Memory{}))
	var re *native.ReuseError
	if errors.As(err, &re) {
		t.Logf("refused: %v", err)
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if l := p.Cgroups().Layout; l == cgroups.V1 || l == cgroups.Hybrid {
		if p.Posture().Isolation.Native.Cgroup != "none" {
			t.Fatalf("reuse allowed with %v leaves", l)
		}
	}
}

// TestReuseRefusesUsageOnALeaf: WithUsage with reuse is refused wherever a
// dispatch would have a cgroup leaf, whose peak and CPU time would span
// dispatches.
func TestReuseRefusesUsageOnALeaf(t *testing.T) {
	usage := native.WithUsage(func(*executor.Request, cgroups.Usage) {})
	p, err := native.New(native.WithPool(1), native.WithReuse(5), usage, native.WithLedger(&ledger.Memory{}))
	var re *native.ReuseError
	if errors.As(err, &re) {
		if !strings.Contains(re.Reason, "WithUsage") {
			t.Fatalf("refused for another reason: %v", err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if c := p.Posture().Isolation.Native.Cgroup; c != "none" {
		t.Fatalf("reuse with WithUsage allowed on a %s leaf", c)
	}
}

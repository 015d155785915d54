package executor

import (
	"bytes"
	"io"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"
)

// fakeProc records the signals a stopper sends.
type fakeProc struct {
	mu   sync.Mutex
	sigs []syscall.Signal
}

func (p *fakeProc) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sigs = append(p.sigs, sig)
	return nil
}

func (p *fakeProc) Wait() (ExitStatus, error) { return ExitStatus{}, nil }

func (p *fakeProc) sent() []syscall.Signal {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.sigs)
}

// TestZeroGraceKillsAtOnce: with a grace of zero (the reference's
// killGraceMs 0) the stop sends SIGKILL right after the SIGTERM, before it
// returns, and nothing later.
func TestZeroGraceKillsAtOnce(t *testing.T) {
	p := &fakeProc{}
	st := &stopper{proc: p, grace: 0}
	st.stop(CodeTimeout, nil)
	if got := p.sent(); !slices.Equal(got, []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL}) {
		t.Fatalf("signals %v, want SIGTERM then SIGKILL at once", got)
	}
	st.stop(CodeAborted, nil)
	if reason, _ := st.done(); reason != CodeTimeout {
		t.Fatalf("reason %q, want the first, timeout", reason)
	}
	if got := p.sent(); len(got) != 2 {
		t.Fatalf("signals %v after a second stop, want none more", got)
	}
}

// TestZeroGraceIsNotTheDefault: a provider's configuration that gives the
// grace as zero keeps it zero; one that leaves it out gets the default.
func TestZeroGraceIsNotTheDefault(t *testing.T) {
	dir := t.TempDir()
	given, err := NewPipeline(Config{WorkdirBase: dir, KillGraceSet: true})
	if err != nil {
		t.Fatal(err)
	}
	if c := given.Config(); c.KillGrace != 0 {
		t.Fatalf("kill grace given as 0 resolved to %v", c.KillGrace)
	}
	left, err := NewPipeline(Config{WorkdirBase: dir})
	if err != nil {
		t.Fatal(err)
	}
	if c := left.Config(); c.KillGrace != DefaultKillGrace {
		t.Fatalf("kill grace left out resolved to %v, want %v", c.KillGrace, DefaultKillGrace)
	}
}

// TestCapSignalsAFloodAtOnce: reaching the cap makes
// output-cap the reason at once; the SIGTERM follows only once floodBytes
// more came past the cap (or capSettle passed), so a tool that wrote past
// the cap and exited keeps its exit status.
func TestCapSignalsAFloodAtOnce(t *testing.T) {
	p := &fakeProc{}
	st := &stopper{proc: p, grace: time.Hour}
	const limit = 5
	// The cap reached, and less than floodBytes past it, then EOF: the
	// tool ended by itself before capSettle.
	out := capture(bytes.NewReader(bytes.Repeat([]byte("x"), limit+100)), limit, st)
	if string(out) != "xxxxx" {
		t.Fatalf("kept %q, want the first %d bytes", out, limit)
	}
	if got := p.sent(); len(got) != 0 {
		t.Fatalf("signals %v for a tool that stopped writing, want none before capSettle", got)
	}
	if reason, _ := st.done(); reason != CodeOutputCap {
		t.Fatalf("reason %q, want output-cap", reason)
	}
	time.Sleep(capSettle + 50*time.Millisecond)
	if got := p.sent(); len(got) != 0 {
		t.Fatalf("signals %v after the dispatch was done", got)
	}

	// A flood: floodBytes past the cap signals without waiting.
	p2 := &fakeProc{}
	st2 := &stopper{proc: p2, grace: time.Hour}
	capture(io.LimitReader(zeros{}, limit+floodBytes+1), limit, st2)
	if got := p2.sent(); !slices.Equal(got, []syscall.Signal{syscall.SIGTERM}) {
		t.Fatalf("signals %v for a flood, want SIGTERM at once", got)
	}
	st2.done()
}

// TestCapSignalsAToolThatStays: a capped tool that neither
// exits nor writes more is signalled once capSettle passed.
func TestCapSignalsAToolThatStays(t *testing.T) {
	p := &fakeProc{}
	st := &stopper{proc: p, grace: time.Hour}
	st.capped()
	deadline := time.Now().Add(30 * time.Second)
	for len(p.sent()) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := p.sent(); !slices.Equal(got, []syscall.Signal{syscall.SIGTERM}) {
		t.Fatalf("signals %v, want SIGTERM after the settle", got)
	}
	if reason, _ := st.done(); reason != CodeOutputCap {
		t.Fatalf("reason %q, want output-cap", reason)
	}
}

type zeros struct{}

func (zeros) Read(b []byte) (int, error) { clear(b); return len(b), nil }

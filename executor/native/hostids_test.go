package native_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/moat-sandbox/moat/conformance/testenv"
	"github.com/moat-sandbox/moat/executor/native"
	"github.com/moat-sandbox/moat/nsexec"
)

// As root, each pooled sandbox holds a host id of its own while it waits:
// a pool of 2 over a range of 2 ids leaves none for anyone else, and still
// serves its dispatches (each refill takes the id its used sandbox gave
// back). Closing the pool frees every id.
func TestPoolSandboxesHoldTheirOwnHostIDs(t *testing.T) {
	testenv.RequireRoot(t)
	dir := filepath.Join(t.TempDir(), "ids")
	const first = nsexec.HostIDFirst + nsexec.HostIDCount + 100 // outside the live range
	p := probeProvider(t, 2, native.WithHostIDRange(dir, first, 2))
	waitReady(t, p, 2)
	other := func() error {
		_, err := nsexec.Prepare(context.Background(), &nsexec.Config{}, nsexec.WithHostIDRange(dir, first, 2))
		return err
	}
	if err := other(); !errors.Is(err, nsexec.ErrHostIDsExhausted) {
		t.Fatalf("a third sandbox in the pool's full range: %v, want ErrHostIDsExhausted", err)
	}
	for range 3 {
		waitReady(t, p, 2)
		var look lookResult
		probeDispatch(t, p, `{"mode":"look"}`, &look)
	}
	if s := p.PoolStats(); s.Hits != 3 {
		t.Errorf("pool stats %+v, want every dispatch served warm", s)
	}
	p.Close()
	pending, err := nsexec.Prepare(context.Background(), &nsexec.Config{}, nsexec.WithHostIDRange(dir, first, 2))
	if err != nil {
		t.Fatalf("a sandbox after the pool was closed: %v", err)
	}
	pending.Close()
}

package ledger

import (
	"bytes"
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The cases of ledger-exclusion.test.ts: repairs of one file by several
// writers, the live lock and the stale lock.

const tornFrag = `{"phase":"outcome","idempotencyKey":"k0","runId":"r`

func TestConcurrentRepairTruncatesOnce(t *testing.T) {
	path := writeLedger(t, intentLine(t, intentFor("k0", "a-0", 1))+tornFrag)
	var truncates atomic.Int32
	a := mustOpen(t, path, fixedNow(10))
	b := mustOpen(t, path, fixedNow(20))
	bWaiting := make(chan struct{})
	// Hold A's truncate until B is inside its own repair, waiting for the
	// lock A holds; B must then re-read and find nothing to cut.
	a.beforeTruncate = func() {
		truncates.Add(1)
		<-bWaiting
		time.Sleep(3 * lockPoll)
	}
	b.beforeTruncate = func() { truncates.Add(1) }
	var wg sync.WaitGroup
	wg.Add(2)
	errs := make([]error, 2)
	go func() { defer wg.Done(); errs[0] = a.Intent(context.Background(), intentFor("kA", "a-A", 2)) }()
	waitFor(t, func() bool { _, err := os.Stat(path + ".repair-lock"); return err == nil })
	go func() {
		defer wg.Done()
		close(bWaiting)
		errs[1] = b.Intent(context.Background(), intentFor("kB", "a-B", 3))
	}()
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("appends: %v", errs)
	}
	res := mustScan(t, path)
	if len(res.Intents) != 3 || len(res.Torn) != 1 || truncates.Load() != 1 {
		t.Fatalf("want 3 intents, 1 quarantine row, 1 truncate; got %d, %d, %d", len(res.Intents), len(res.Torn), truncates.Load())
	}
	if res.Torn[0].RecoveredAt != 10 {
		t.Fatalf("the quarantine row is A's: %+v", res.Torn[0])
	}
	assertNoLock(t, path)
}

func TestWriterWaitingOnLiveLockRereads(t *testing.T) {
	prefix := intentLine(t, intentFor("k0", "a-0", 1))
	path := writeLedger(t, prefix+tornFrag)
	lock := path + ".repair-lock"
	if err := os.WriteFile(lock, []byte("999-someone-else"), 0o600); err != nil {
		t.Fatal(err)
	}
	l := mustOpen(t, path)
	var truncates atomic.Int32
	l.beforeTruncate = func() { truncates.Add(1) }
	done := make(chan error)
	go func() { done <- l.Intent(context.Background(), intentFor("k1", "a-1", 2)) }()
	time.Sleep(4 * lockPoll)
	select {
	case err := <-done:
		t.Fatalf("the writer must wait on a live lock, returned %v", err)
	default:
	}
	// The holder repairs (here: by hand) and releases.
	quarantine, _ := appendTornRow(nil, []byte(tornFrag), 5)
	if err := os.WriteFile(path, append([]byte(prefix), quarantine...), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(lock); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if truncates.Load() != 0 {
		t.Fatal("the waiting writer must not truncate a file the holder repaired")
	}
	if got, want := readFile(t, path), prefix+string(quarantine)+intentLine(t, intentFor("k1", "a-1", 2)); got != want {
		t.Fatalf("file %q\nwant %q", got, want)
	}
	assertNoLock(t, path)
}

func TestStaleLockIsStolen(t *testing.T) {
	for name, skew := range map[string]time.Duration{"old": -60 * time.Second, "future": 60 * time.Second} {
		t.Run(name, func(t *testing.T) {
			path := writeLedger(t, tornFrag)
			lock := path + ".repair-lock"
			if err := os.WriteFile(lock, []byte("1-crashed-holder"), 0o600); err != nil {
				t.Fatal(err)
			}
			mt := time.Now().Add(skew)
			if err := os.Chtimes(lock, mt, mt); err != nil {
				t.Fatal(err)
			}
			l := mustOpen(t, path, fixedNow(31337))
			mustIntent(t, l, intentFor("k1", "a-1", 2))
			res := mustScan(t, path)
			if len(res.Torn) != 1 || res.Torn[0].RecoveredAt != 31337 || len(res.Intents) != 1 {
				t.Fatalf("%+v", res)
			}
			assertNoLock(t, path)
		})
	}
}

func TestCleanFileNeverCreatesLock(t *testing.T) {
	path := writeLedger(t, intentLine(t, intentFor("k0", "a-0", 1)))
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Fatalf("inotify_init1: %v", err)
	}
	defer unix.Close(fd)
	if _, err := unix.InotifyAddWatch(fd, filepath.Dir(path), unix.IN_CREATE); err != nil {
		t.Fatalf("inotify_add_watch: %v", err)
	}
	l := mustOpen(t, path)
	var truncates atomic.Int32
	l.beforeTruncate = func() { truncates.Add(1) }
	mustIntent(t, l, intentFor("k1", "a-1", 2))
	buf := make([]byte, 4096)
	n, err := unix.Read(fd, buf)
	if err != nil && err != unix.EAGAIN {
		t.Fatal(err)
	}
	if n > 0 && bytes.Contains(buf[:n], []byte("repair-lock")) {
		t.Fatal("a clean file must never create the repair lock")
	}
	if truncates.Load() != 0 {
		t.Fatal("no truncate on a clean file")
	}
}

func TestRepairIdempotentAcrossInstances(t *testing.T) {
	path := writeLedger(t, intentLine(t, intentFor("k0", "a-0", 1))+tornFrag)
	var truncates atomic.Int32
	for i := range 3 {
		l := mustOpen(t, path)
		l.beforeTruncate = func() { truncates.Add(1) }
		mustIntent(t, l, intentFor("k", "a-"+string(rune('1'+i)), Millis(i)))
		l.Close()
	}
	res := mustScan(t, path)
	if truncates.Load() != 1 || len(res.Torn) != 1 || len(res.Intents) != 4 {
		t.Fatalf("truncates %d, torn %d, intents %d", truncates.Load(), len(res.Torn), len(res.Intents))
	}
}

func TestRepairFailureIsMemoized(t *testing.T) {
	path := writeLedger(t, tornFrag)
	var calls atomic.Int32
	l := mustOpen(t, path, WithNow(func() Millis { calls.Add(1); return Millis(math.NaN()) }))
	for range 2 {
		if err := l.Intent(context.Background(), intentFor("k", "a", 1)); err == nil || !strings.Contains(err.Error(), "recoveredAt") {
			t.Fatalf("want the repair failure, got %v", err)
		}
	}
	if calls.Load() != 1 || readFile(t, path) != tornFrag {
		t.Fatalf("repair ran %d times; file %q", calls.Load(), readFile(t, path))
	}
	assertNoLock(t, path)
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

func assertNoLock(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Lstat(path + ".repair-lock"); !os.IsNotExist(err) {
		t.Fatalf("repair lock left behind: %v", err)
	}
}

// TestRepairWaitsForARowInFlight: a row another writer is still copying
// is visible half written (the file grows page by page), which looks like
// a torn tail. The repair of a new instance must wait for it (the writer
// holds the shared flock) instead of truncating it away, as it did when a
// slow VM made the race likely (lost rows in
// TestConcurrentAppendsNeverInterleave).
func TestRepairWaitsForARowInFlight(t *testing.T) {
	first := intentFor("k-first", "a-first", 1)
	path := writeLedger(t, intentLine(t, first))
	inflight := intentLine(t, intentFor("k-inflight", "a-inflight", 2))
	w, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := unix.Flock(int(w.Fd()), unix.LOCK_SH); err != nil {
		t.Fatal(err)
	}
	half := len(inflight) / 2
	if _, err := w.WriteString(inflight[:half]); err != nil {
		t.Fatal(err)
	}

	l := mustOpen(t, path)
	done := make(chan error, 1)
	go func() { done <- l.Intent(context.Background(), intentFor("k-new", "a-new", 3)) }()
	select {
	case err := <-done:
		t.Fatalf("the append went ahead while a row was in flight: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	if _, err := w.WriteString(inflight[half:]); err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(w.Fd()), unix.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	res := mustScan(t, path)
	if len(res.Intents) != 3 || len(res.Torn) != 0 {
		t.Fatalf("intents %d, torn %d: want the row in flight kept whole and no quarantine", len(res.Intents), len(res.Torn))
	}
}

package ledger

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// JSONL is the durable two-phase ledger (jsonlEffectLedger): one JSON row
// per line, appended to one file in the reference's exact format, so a
// TypeScript host reads it and Scan reads theirs. Before its first append
// an instance repairs a torn tail left by a crashed writer (see repair.go).
//
// Every row is one write(2) on an O_APPEND descriptor, so rows from
// several goroutines, instances or processes on one local file never
// interleave (the file offset update and the write happen under the inode
// lock; see write(2), "O_APPEND"). A reader, though, can see a row half
// copied (the size grows page by page), which a repair would take for a
// torn tail: so every instance holds a shared flock(2) on the file while
// it has a row in flight, and a repair truncates only under the exclusive
// one. Writers of other implementations do not take it; prefer one writer
// process per file all the same (effects.<worker>.jsonl, merged with
// Merge): neither O_APPEND, O_EXCL nor flock is dependable on network file
// systems.
//
// Durability: a returned append survives a crash of this process. It
// survives a power loss only with WithFsync.
//
// A JSONL is safe for concurrent use.
type JSONL struct {
	path  string
	f     *os.File
	dir   int    // the file's directory (O_PATH), where the repair lock goes
	name  string // the file's name in dir
	now   func() Millis
	fsync bool
	log   *slog.Logger

	repairOnce sync.Once
	repairErr  error

	// inflight counts this instance's appends under way; the first takes
	// the shared flock, the last releases it (flock is per open file, not
	// per goroutine).
	flockMu  sync.Mutex
	inflight int

	// writeMu orders this instance's writes, so that none lands after a
	// failed one before dirty is seen; dirty is set when a write failed or
	// was short (ENOSPC, EIO, a quota) and may have left a fragment at the
	// tail, which the next append repairs first, so two rows are never
	// glued into one line.
	writeMu sync.Mutex
	dirty   bool

	mu     sync.RWMutex // write side held only by Close
	closed bool

	// beforeTruncate, when set by a test, runs right before the
	// destructive step of a repair.
	beforeTruncate func()
}

// Option configures Open.
type Option func(*JSONL)

// WithNow sets the clock stamped into quarantine rows as recoveredAt (the
// reference's now option). It is used for nothing else; the repair lock's
// staleness is judged on the real wall clock.
func WithNow(now func() Millis) Option { return func(l *JSONL) { l.now = now } }

// WithFsync makes every append, and every repair, fsync(2) the file before
// it returns, and makes Open fsync the directory after creating the file
// (a new directory entry is durable only then; see fsync(2), NOTES).
func WithFsync() Option { return func(l *JSONL) { l.fsync = true } }

// WithLogger sets the logger for repairs and stolen locks; the default
// discards.
func WithLogger(log *slog.Logger) Option { return func(l *JSONL) { l.log = log } }

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// Intent appends the intent row. The executor awaits it before anything is
// spawned; an error refuses the dispatch. A cancelled ctx refuses it too.
func (l *JSONL) Intent(ctx context.Context, in Intent) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ledger intent %s: %w", in.IdempotencyKey, err)
	}
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	row, err := appendIntentRow((*bp)[:0], &in)
	if err != nil {
		return fmt.Errorf("ledger intent %s: %w", in.IdempotencyKey, err)
	}
	*bp = row
	return l.append(row)
}

// Record appends the outcome row. ctx is deliberately not consulted: the
// effect has happened, and a cancelled dispatch must still record how it
// ended, or its intent would stay orphaned for nothing.
func (l *JSONL) Record(_ context.Context, r Record) error {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	row, err := appendRecordRow((*bp)[:0], &r)
	if err != nil {
		return fmt.Errorf("ledger outcome %s: %w", r.IdempotencyKey, err)
	}
	*bp = row
	return l.append(row)
}

// Path returns the ledger file's path.
func (l *JSONL) Path() string { return l.path }

// Close closes the file. Appends after Close fail with os.ErrClosed.
func (l *JSONL) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	unix.Close(l.dir)
	return l.f.Close()
}

func (l *JSONL) append(row []byte) error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return fmt.Errorf("append to ledger %s: %w", l.path, os.ErrClosed)
	}
	// The repair runs once per instance, before its first append, and its
	// result, a failure included, is kept: an instance that could not
	// repair its tail must not glue rows onto a torn fragment.
	l.repairOnce.Do(func() { l.repairErr = l.repair() })
	if l.repairErr != nil {
		return fmt.Errorf("append to ledger %s: %w", l.path, l.repairErr)
	}
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	if l.dirty {
		// Under the repair lock, as a crashed writer's tail: a fragment is
		// truncated and quarantined as a torn row, a complete row that
		// lost its newline is terminated.
		if err := l.repair(); err != nil {
			return fmt.Errorf("append to ledger %s: repair the tail a failed append left: %w", l.path, err)
		}
		l.dirty = false
	}
	if err := l.share(); err != nil {
		return fmt.Errorf("append to ledger %s: %w", l.path, err)
	}
	err := l.write(row)
	l.unshare()
	if err != nil {
		l.dirty = true
		return fmt.Errorf("append to ledger %s: %w", l.path, err)
	}
	return nil
}

// share takes the file's shared flock for this instance's first append in
// flight; it waits while a repair holds the exclusive one.
func (l *JSONL) share() error {
	l.flockMu.Lock()
	defer l.flockMu.Unlock()
	if l.inflight == 0 {
		if err := flock(l.f, unix.LOCK_SH); err != nil {
			return err
		}
	}
	l.inflight++
	return nil
}

// unshare releases the shared flock with this instance's last append in
// flight.
func (l *JSONL) unshare() {
	l.flockMu.Lock()
	defer l.flockMu.Unlock()
	l.inflight--
	if l.inflight == 0 {
		_ = flock(l.f, unix.LOCK_UN)
	}
}

// flock applies how to f, retrying on EINTR.
func flock(f *os.File, how int) error {
	for {
		err := unix.Flock(int(f.Fd()), how)
		if !errors.Is(err, unix.EINTR) {
			if err != nil {
				return &os.PathError{Op: "flock", Path: f.Name(), Err: err}
			}
			return nil
		}
	}
}

// write appends b with exactly one write(2), retried only on EINTR (which
// writes nothing). A short write (disk full) leaves a torn row that this
// instance repairs before its next append (dirty) and any other writer's
// repair quarantines; it is reported, never completed by a second write
// another writer's row could land in front of.
func (l *JSONL) write(b []byte) error {
	fd := int(l.f.Fd())
	for {
		n, err := unix.Write(fd, b)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return &os.PathError{Op: "write", Path: l.path, Err: err}
		}
		if n != len(b) {
			return &os.PathError{Op: "write", Path: l.path, Err: io.ErrShortWrite}
		}
		break
	}
	if l.fsync {
		if err := l.f.Sync(); err != nil {
			return err
		}
	}
	return nil
}

func defaultNow() Millis { return MillisOf(time.Now()) }

package ledger

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"golang.org/x/sys/unix"
)

// Torn-tail repair (contract 8.5). A writer killed in the middle of an
// append leaves an unterminated fragment; the next row must not be glued
// onto it. Before its first append an instance therefore:
//
//	clean file (empty, or last byte '\n')  -> nothing, no lock file
//	otherwise, holding <path>.repair-lock:
//	  re-read; clean now                   -> nothing (another writer repaired)
//	  fragment decodes and parses as JSON  -> append "\n" (terminate in place)
//	  else, lock still ours                -> truncate to the last '\n', append a torn row
//	  else (lock stolen)                   -> take the lock again and start over
//
// The lock is a sidecar file created with O_CREAT|O_EXCL (open(2): the
// create fails with EEXIST if anyone else holds it) holding the token
// "<pid>-<uuid>". A lock whose mtime is more than lockTTL away from the
// wall clock, in either direction so a skewed clock cannot pin it, is
// presumed left by a crashed holder and stolen. Reading the file again
// after taking the lock is the point: the boundary computed from an older
// read may no longer be the tail, and truncating at it would erase rows
// another writer confirmed.

const (
	lockTTL  = 10 * time.Second
	lockPoll = 25 * time.Millisecond
)

func (l *JSONL) repair() error {
	dirty, err := l.tornTail()
	if err != nil || !dirty {
		return err
	}
	lk := repairLock{dir: l.dir, name: l.name + lockSuffix, path: l.path + lockSuffix}
	token := fmt.Sprintf("%d-%s", os.Getpid(), uuid.NewString())
	for {
		if err := l.acquire(lk, token); err != nil {
			return err
		}
		again, err := l.repairHeld(lk, token)
		lk.release(token)
		if err != nil || !again {
			return err
		}
	}
}

// lockSuffix names the repair lock after the ledger file.
const lockSuffix = ".repair-lock"

// repairLock is the lock file: created, read, stat'ed and removed relative
// to the ledger's directory descriptor (Open resolved it once, see
// openDir), never through its path, which someone could redirect.
type repairLock struct {
	dir  int
	name string
	path string // for messages
}

// tornTail reports whether the file is non-empty and does not end in "\n".
func (l *JSONL) tornTail() (bool, error) {
	fi, err := l.f.Stat()
	if err != nil {
		return false, fmt.Errorf("repair ledger %s: %w", l.path, err)
	}
	if fi.Size() == 0 {
		return false, nil
	}
	var last [1]byte
	if _, err := l.f.ReadAt(last[:], fi.Size()-1); err != nil {
		// Shrunk since the stat: let the locked path look again.
		return errors.Is(err, io.EOF), nil
	}
	return last[0] != '\n', nil
}

func (l *JSONL) acquire(lk repairLock, token string) error {
	for {
		fd, err := unix.Openat(lk.dir, lk.name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err == nil {
			lf := os.NewFile(uintptr(fd), lk.path)
			_, werr := lf.WriteString(token)
			cerr := lf.Close()
			if werr = errors.Join(werr, cerr); werr != nil {
				unix.Unlinkat(lk.dir, lk.name, 0)
				return fmt.Errorf("take repair lock %s: %w", lk.path, werr)
			}
			return nil
		}
		if err != unix.EEXIST {
			return fmt.Errorf("take repair lock %s: %w", lk.path, err)
		}
		var st unix.Stat_t
		err = unix.Fstatat(lk.dir, lk.name, &st, unix.AT_SYMLINK_NOFOLLOW)
		if err == unix.ENOENT {
			continue // released between the create and the stat
		}
		if err != nil {
			return fmt.Errorf("take repair lock %s: %w", lk.path, err)
		}
		if age := time.Since(time.Unix(st.Mtim.Unix())); age > lockTTL || age < -lockTTL {
			l.log.Warn("stealing stale ledger repair lock", "lock", lk.path, "age", age)
			if err := unix.Unlinkat(lk.dir, lk.name, 0); err != nil && err != unix.ENOENT {
				return fmt.Errorf("steal repair lock %s: %w", lk.path, err)
			}
			continue
		}
		time.Sleep(lockPoll)
	}
}

// release removes the lock only if it still holds our token: a lock stolen
// from us belongs to someone else now. The lock is read without following
// a symbolic link and without waiting on a FIFO: whoever replaced it may
// have planted either.
func (lk repairLock) release(token string) {
	if owner, err := lk.read(len(token)); err == nil && owner == token {
		unix.Unlinkat(lk.dir, lk.name, 0)
	}
}

// read reads at most max+1 bytes of a regular lock file.
func (lk repairLock) read(max int) (string, error) {
	fd, err := unix.Openat(lk.dir, lk.name, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return "", &os.PathError{Op: "open", Path: lk.path, Err: err}
	}
	f := os.NewFile(uintptr(fd), lk.path)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("repair lock %s: not a regular file (%s)", lk.path, fi.Mode().Type())
	}
	buf := make([]byte, max+1)
	n, err := io.ReadFull(f, buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return "", err
	}
	return string(buf[:n]), nil
}

// repairHeld is the locked part. again asks the caller to take the lock
// anew because it was stolen before the destructive step. It reads the
// tail under the file's exclusive flock, so no row another instance is
// still writing (and holds the shared flock for) looks torn.
func (l *JSONL) repairHeld(lk repairLock, token string) (again bool, err error) {
	if err := flock(l.f, unix.LOCK_EX); err != nil {
		return false, fmt.Errorf("repair ledger %s: %w", l.path, err)
	}
	defer flock(l.f, unix.LOCK_UN)
	fi, err := l.f.Stat()
	if err != nil {
		return false, fmt.Errorf("repair ledger %s: %w", l.path, err)
	}
	boundary, frag, err := readTail(l.f, fi.Size())
	if err != nil {
		return false, fmt.Errorf("repair ledger %s: %w", l.path, err)
	}
	if len(frag) == 0 {
		return false, nil
	}
	if parseable(frag) {
		// A complete row that lost only its newline: real data, keep it.
		if err := l.write([]byte{'\n'}); err != nil {
			return false, fmt.Errorf("repair ledger %s: terminate last line: %w", l.path, err)
		}
		l.log.Info("terminated unterminated ledger row in place", "path", l.path, "offset", boundary)
		return false, nil
	}
	if owner, _ := lk.read(len(token)); owner != token {
		l.log.Warn("ledger repair lock stolen before truncate; retrying", "lock", lk.path)
		return true, nil
	}
	row, err := appendTornRow(nil, frag, l.now())
	if err != nil {
		return false, fmt.Errorf("repair ledger %s: %w", l.path, err)
	}
	if l.beforeTruncate != nil {
		l.beforeTruncate()
	}
	if err := l.f.Truncate(boundary); err != nil {
		return false, fmt.Errorf("repair ledger %s: %w", l.path, err)
	}
	if err := l.write(row); err != nil {
		return false, fmt.Errorf("repair ledger %s: quarantine torn tail: %w", l.path, err)
	}
	l.log.Warn("quarantined torn ledger tail", "path", l.path, "offset", boundary, "bytes", len(frag))
	return false, nil
}

// readTail returns the offset just after the last "\n" of the first size
// bytes of f and the bytes from there to size, reading backwards so a
// large file is not read whole.
func readTail(f *os.File, size int64) (int64, []byte, error) {
	const step = 64 << 10
	var tail []byte
	end := size
	for end > 0 {
		start := max(end-step, 0)
		chunk := make([]byte, end-start)
		n, err := f.ReadAt(chunk, start)
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, nil, err
		}
		chunk = chunk[:n]
		if i := bytes.LastIndexByte(chunk, '\n'); i >= 0 {
			return start + int64(i) + 1, append(chunk[i+1:], tail...), nil
		}
		tail = append(chunk, tail...)
		end = start
	}
	return 0, tail, nil
}

// parseable is the reference's test for a fragment (8.5 f): strict UTF-8
// (one leading BOM consumed), then JSON.parse of any JSON value.
func parseable(frag []byte) bool {
	if !utf8.Valid(frag) {
		return false
	}
	var p reader
	var o object
	isJSON, _ := p.parse(strings.TrimPrefix(string(frag), bom), &o)
	return isJSON
}

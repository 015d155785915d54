package ledger

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"
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
	lockPath := l.path + ".repair-lock"
	token := fmt.Sprintf("%d-%s", os.Getpid(), uuid.NewString())
	for {
		if err := l.acquire(lockPath, token); err != nil {
			return err
		}
		again, err := l.repairHeld(lockPath, token)
		release(lockPath, token)
		if err != nil || !again {
			return err
		}
	}
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

func (l *JSONL) acquire(lockPath, token string) error {
	for {
		lf, err := os.OpenFile(lockPath, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_CLOEXEC, 0o600)
		if err == nil {
			_, werr := lf.WriteString(token)
			cerr := lf.Close()
			if werr = errors.Join(werr, cerr); werr != nil {
				os.Remove(lockPath)
				return fmt.Errorf("take repair lock %s: %w", lockPath, werr)
			}
			return nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("take repair lock %s: %w", lockPath, err)
		}
		fi, err := os.Lstat(lockPath)
		if errors.Is(err, fs.ErrNotExist) {
			continue // released between the create and the stat
		}
		if err != nil {
			return fmt.Errorf("take repair lock %s: %w", lockPath, err)
		}
		if age := time.Since(fi.ModTime()); age > lockTTL || age < -lockTTL {
			l.log.Warn("stealing stale ledger repair lock", "lock", lockPath, "age", age)
			if err := os.Remove(lockPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("steal repair lock %s: %w", lockPath, err)
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
func release(lockPath, token string) {
	if owner, err := readLock(lockPath, len(token)); err == nil && owner == token {
		os.Remove(lockPath)
	}
}

// readLock reads at most max+1 bytes of a regular lock file.
func readLock(lockPath string, max int) (string, error) {
	f, err := os.OpenFile(lockPath, os.O_RDONLY|syscall.O_CLOEXEC|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("repair lock %s: not a regular file (%s)", lockPath, fi.Mode().Type())
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
func (l *JSONL) repairHeld(lockPath, token string) (again bool, err error) {
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
	if owner, _ := readLock(lockPath, len(token)); owner != token {
		l.log.Warn("ledger repair lock stolen before truncate; retrying", "lock", lockPath)
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

package ledger

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Open opens the ledger at path for appending, creating it (mode 0600) if
// it does not exist. It refuses, with a *FileError and without writing a
// byte, a path whose directory is missing, anything but a regular file, a
// file owned by another user or writable by group or others (anyone who
// can write it can forge or erase rows), and a file that is not a ledger:
// its first line must be a ledger row, or the torn beginning of one. Open
// never repairs anything; the first append does.
func Open(path string, opts ...Option) (*JSONL, error) {
	l := &JSONL{path: path, now: defaultNow, log: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		o(l)
	}
	f, created, err := openFile(path)
	if err != nil {
		return nil, err
	}
	if err := checkFile(path, f); err != nil {
		f.Close()
		return nil, err
	}
	if created && l.fsync {
		if err := syncDir(filepath.Dir(path)); err != nil {
			f.Close()
			return nil, fmt.Errorf("open ledger %s: %w", path, err)
		}
	}
	if !created {
		if err := checkLedger(path, f); err != nil {
			f.Close()
			return nil, err
		}
	}
	l.f = f
	return l, nil
}

// openFile opens path read-write in append mode: O_APPEND makes every
// write land at the current end of file atomically with the write, and
// reads (pread) serve the tail repair. O_EXCL first tells whether this
// call created the file, which decides the directory fsync.
func openFile(path string) (f *os.File, created bool, err error) {
	const flags = os.O_RDWR | os.O_APPEND | syscall.O_CLOEXEC
	f, err = os.OpenFile(path, flags|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		return f, true, nil
	}
	if errors.Is(err, fs.ErrExist) {
		f, err = os.OpenFile(path, flags, 0)
		if err == nil {
			return f, false, nil
		}
	}
	switch {
	case errors.Is(err, syscall.EISDIR):
		return nil, false, &FileError{Path: path, Problem: ProblemNotRegular, Detail: "a directory", Err: err}
	case errors.Is(err, fs.ErrNotExist):
		return nil, false, &FileError{Path: path, Problem: ProblemNoDirectory, Detail: filepath.Dir(path), Err: err}
	}
	return nil, false, fmt.Errorf("open ledger %s: %w", path, err)
}

func checkFile(path string, f *os.File) error {
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("open ledger %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return &FileError{Path: path, Problem: ProblemNotRegular, Detail: fi.Mode().Type().String()}
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return &FileError{Path: path, Problem: ProblemForeignOwner,
			Detail: fmt.Sprintf("owner uid %d, running as uid %d", st.Uid, os.Geteuid())}
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return &FileError{Path: path, Problem: ProblemWritableByOthers, Detail: fmt.Sprintf("mode %#o", perm)}
	}
	return nil
}

// headWindow is how much of an existing file checkLedger looks at.
const headWindow = 64 << 10

// rowPrefix is how every row of the reference writer begins; a torn first
// row is a prefix of it or starts with it.
const rowPrefix = `{"phase":"`

// checkLedger refuses a file whose first non-blank line is not a ledger
// row. An unterminated first line that does not parse is accepted only if
// it looks like the torn beginning of a row, so that a crash during the
// very first append can be repaired but someone's text file is not
// "repaired" into a quarantine row.
func checkLedger(path string, f *os.File) error {
	head := make([]byte, headWindow)
	n, err := f.ReadAt(head, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("open ledger %s: %w", path, err)
	}
	head = head[:n]
	whole := n < headWindow // the window holds the whole file
	lineNo := 0
	var off int64
	for len(head) > 0 {
		lineNo++
		i := bytes.IndexByte(head, '\n')
		terminated := i >= 0
		line := head
		if terminated {
			line = head[:i]
		} else if !whole {
			// A first line longer than the window: judge its beginning.
			return checkTornStart(path, line, lineNo)
		}
		s := scanner{res: &ScanResult{}, lineNo: lineNo}
		s.line(string(line), off, terminated)
		s.finish()
		r := s.res
		switch {
		case len(r.Intents)+len(r.Outcomes)+len(r.Torn) > 0:
			return nil
		case len(r.TornTails) > 0:
			return checkTornStart(path, line, lineNo)
		case len(r.Corrupt) > 0:
			return &FileError{Path: path, Problem: ProblemNotLedger,
				Detail: fmt.Sprintf("line %d is not a ledger row: %q", lineNo, r.Corrupt[0].Preview)}
		}
		if !terminated {
			break
		}
		head = head[i+1:]
		off += int64(i + 1)
	}
	return nil
}

func checkTornStart(path string, line []byte, lineNo int) error {
	s := strings.TrimPrefix(string(line), bom)
	if strings.HasPrefix(s, rowPrefix) || strings.HasPrefix(rowPrefix, s) {
		return nil
	}
	return &FileError{Path: path, Problem: ProblemNotLedger,
		Detail: fmt.Sprintf("line %d is neither a ledger row nor the torn start of one: %q", lineNo, preview(lossyDecode(line, false)))}
}

// syncDir makes a new directory entry durable (fsync(2): syncing the file
// does not sync the entry that names it).
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return &os.PathError{Op: "fsync", Path: dir, Err: err}
	}
	return nil
}

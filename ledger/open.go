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
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Open opens the ledger at path for appending, creating it (mode 0600) if
// it does not exist. It refuses, with a *FileError and without writing a
// byte, a path whose directory is missing, a symbolic link (the final
// component is never followed), anything but a regular file, a
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
	if err := clearNonblock(path, f); err != nil {
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
//
// Neither open follows a symbolic link in the final component: O_EXCL
// fails on any existing name, a link included, and O_NOFOLLOW makes the
// second open fail with ELOOP (open(2)). Without it a link planted at the
// ledger's path (on a host with fs.protected_symlinks=0, or in a directory
// the planter owns) would have rows appended to, and a torn tail
// "repaired" in, whatever file it names. O_NONBLOCK keeps the open of a
// FIFO from waiting for a writer and O_NOCTTY keeps a terminal from
// becoming ours; checkFile then refuses both, and clearNonblock undoes
// O_NONBLOCK on the regular file that is left.
func openFile(path string) (f *os.File, created bool, err error) {
	const flags = os.O_RDWR | os.O_APPEND | syscall.O_CLOEXEC | syscall.O_NOFOLLOW | syscall.O_NONBLOCK | syscall.O_NOCTTY
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
	return nil, false, openError(path, err)
}

// openError turns a failed open of a ledger path into a *FileError where
// the errno says what the path is.
func openError(path string, err error) error {
	switch {
	case errors.Is(err, syscall.ELOOP):
		// O_NOFOLLOW on a symbolic link (or a loop in the directories).
		detail := "give the path of the file itself"
		if target, lerr := os.Readlink(path); lerr == nil {
			detail = "it points to " + strconv.Quote(target) + "; " + detail
		} else if fi, lerr := os.Lstat(path); lerr == nil && fi.Mode()&fs.ModeSymlink == 0 {
			detail = "too many symbolic links in its directories"
		}
		return &FileError{Path: path, Problem: ProblemSymlink, Detail: detail, Err: err}
	case errors.Is(err, syscall.EISDIR):
		return &FileError{Path: path, Problem: ProblemNotRegular, Detail: "a directory", Err: err}
	case errors.Is(err, fs.ErrNotExist):
		return &FileError{Path: path, Problem: ProblemNoDirectory, Detail: filepath.Dir(path), Err: err}
	}
	return fmt.Errorf("open ledger %s: %w", path, err)
}

// clearNonblock puts a checked regular file back in blocking mode (the
// O_NONBLOCK of openFile is there for FIFOs only).
func clearNonblock(path string, f *os.File) error {
	if err := unix.SetNonblock(int(f.Fd()), false); err != nil {
		return fmt.Errorf("open ledger %s: %w", path, err)
	}
	return nil
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
		// The reference creates its ledger with mode 0666 & ~umask: 0664
		// under the common umask 002, which this refuses. Name the fix.
		return &FileError{Path: path, Problem: ProblemWritableByOthers,
			Detail: fmt.Sprintf("mode %#o; make it private with: chmod 600 %s", perm, shellQuote(path))}
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

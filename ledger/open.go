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

	"github.com/moat-sandbox/moat/nsexec/hostpath"
	"golang.org/x/sys/unix"
)

// Open opens the ledger at path for appending, creating it (mode 0600) if
// it does not exist. It refuses, with a *FileError and without writing a
// byte, a path whose directory is missing, a symbolic link in the final
// component (never followed) or on the way to the file's directory that
// someone other than root or the caller could have planted (see
// openDir), anything but a regular file, a file owned by another user or
// writable by group or others (anyone who can write it can forge or erase
// rows), and a file that is not a ledger: its first line must be a ledger
// row, or the torn beginning of one. Open never repairs anything; the
// first append does.
func Open(path string, opts ...Option) (*JSONL, error) {
	l := &JSONL{path: path, now: defaultNow, log: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		o(l)
	}
	dir, name, err := openDir(path)
	if err != nil {
		return nil, err
	}
	f, created, err := openFile(path, dir, name)
	if err == nil {
		err = checkFile(path, f)
	}
	if err == nil {
		err = clearNonblock(path, f)
	}
	if err == nil && created && l.fsync {
		if err = syncDir(dir); err != nil {
			err = fmt.Errorf("open ledger %s: fsync its directory: %w", path, err)
		}
	}
	if err == nil && !created {
		err = checkLedger(path, f)
	}
	if err != nil {
		if f != nil {
			f.Close()
		}
		unix.Close(dir)
		return nil, err
	}
	l.f, l.dir, l.name = f, dir, name
	return l, nil
}

// openDir opens the directory of the ledger at path and returns it with
// the file's name in it. The directory is resolved by the rule of
// nsexec/hostpath: a symbolic link on the way is followed only if root or
// the caller could have planted it (owned by one of them, in directories
// no one else can write), so a link another user left in a shared
// directory cannot point the ledger, or its repair lock, at a file of
// theirs or at one the caller did not mean. The file and the lock are then
// opened, created and removed relative to this descriptor, never by path.
func openDir(path string) (int, string, error) {
	dir, _, name, err := hostpath.OpenParent(path)
	if err == nil {
		return dir, name, nil
	}
	var le *hostpath.LinkError
	switch {
	case errors.As(err, &le):
		return -1, "", &FileError{Path: path, Problem: ProblemSymlink, Err: err}
	case errors.Is(err, syscall.EISDIR):
		return -1, "", &FileError{Path: path, Problem: ProblemNotRegular, Detail: "a directory", Err: err}
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return -1, "", &FileError{Path: path, Problem: ProblemNoDirectory, Detail: filepath.Dir(path), Err: err}
	}
	return -1, "", fmt.Errorf("open ledger %s: %w", path, err)
}

// openFile opens name in dir read-write in append mode: O_APPEND makes
// every write land at the current end of file atomically with the write,
// and reads (pread) serve the tail repair. O_EXCL first tells whether this
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
func openFile(path string, dir int, name string) (f *os.File, created bool, err error) {
	const flags = unix.O_RDWR | unix.O_APPEND | unix.O_CLOEXEC | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_NOCTTY
	fd, err := unix.Openat(dir, name, flags|unix.O_CREAT|unix.O_EXCL, 0o600)
	if err == nil {
		return os.NewFile(uintptr(fd), path), true, nil
	}
	if err == unix.EEXIST {
		fd, err = unix.Openat(dir, name, flags, 0)
		if err == nil {
			return os.NewFile(uintptr(fd), path), false, nil
		}
	}
	return nil, false, openError(path, dir, name, err)
}

// openError turns a failed open of a ledger path into a *FileError where
// the errno says what the path is.
func openError(path string, dir int, name string, err error) error {
	switch {
	case errors.Is(err, syscall.ELOOP):
		// O_NOFOLLOW on a symbolic link.
		detail := "give the path of the file itself"
		buf := make([]byte, 4096)
		if n, lerr := unix.Readlinkat(dir, name, buf); lerr == nil {
			detail = "it points to " + strconv.Quote(string(buf[:n])) + "; " + detail
		}
		return &FileError{Path: path, Problem: ProblemSymlink, Detail: detail, Err: err}
	case errors.Is(err, syscall.EISDIR):
		return &FileError{Path: path, Problem: ProblemNotRegular, Detail: "a directory", Err: err}
	case errors.Is(err, fs.ErrNotExist):
		return &FileError{Path: path, Problem: ProblemNoDirectory, Detail: filepath.Dir(path), Err: err}
	}
	return fmt.Errorf("open ledger %s: %w", path, &os.PathError{Op: "open", Path: path, Err: err})
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
// does not sync the entry that names it). dir is an O_PATH descriptor,
// which fsync refuses, so the directory is reopened through it.
func syncDir(dir int) error {
	fd, err := unix.Openat(dir, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Fsync(fd)
}

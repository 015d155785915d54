package ledger

import (
	"fmt"
	"strconv"
	"strings"
)

// Problem says what is wrong with a ledger path that Open refused.
type Problem int

// The problems Open checks for before it appends anything.
const (
	// ProblemNoDirectory: the file's directory does not exist.
	ProblemNoDirectory Problem = iota + 1
	// ProblemNotRegular: the path is a directory, a device, a FIFO, ...
	ProblemNotRegular
	// ProblemForeignOwner: the file belongs to another user.
	ProblemForeignOwner
	// ProblemWritableByOthers: group or others may write the file, so
	// someone else could forge or erase rows.
	ProblemWritableByOthers
	// ProblemNotLedger: the file holds something that is not a ledger; it
	// is refused rather than "repaired".
	ProblemNotLedger
	// ProblemSymlink: the path's final component is a symbolic link, which
	// is never followed (a link planted there would have rows written into
	// whatever file it names), or a directory on the way is a link that
	// someone other than root or the caller could have planted (Err is then
	// the *hostpath.LinkError naming it). Name the file itself.
	ProblemSymlink
)

func (p Problem) String() string {
	switch p {
	case ProblemNoDirectory:
		return "directory does not exist"
	case ProblemNotRegular:
		return "not a regular file"
	case ProblemForeignOwner:
		return "owned by another user"
	case ProblemWritableByOthers:
		return "writable by group or others"
	case ProblemNotLedger:
		return "not an effect ledger"
	case ProblemSymlink:
		return "a symbolic link, not followed"
	}
	return "Problem(" + strconv.Itoa(int(p)) + ")"
}

// FileError is Open refusing a ledger path. Nothing was written to the
// file. Err, when set, is the underlying cause (errors.Is(err,
// fs.ErrNotExist) holds for ProblemNoDirectory).
type FileError struct {
	Path    string
	Problem Problem
	Detail  string // what was found, e.g. "owner uid 1000, we are 0"
	Err     error
}

func (e *FileError) Error() string {
	msg := "open ledger " + e.Path + ": " + e.Problem.String()
	if e.Detail != "" {
		msg += " (" + e.Detail + ")"
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *FileError) Unwrap() error { return e.Err }

// CorruptLine is one line the scan could not admit (CorruptLedgerLine of
// the reference): damage or a foreign writer, never a crash artifact.
type CorruptLine struct {
	// File is the scanned path (set by Scan; not part of the reference
	// shape).
	File string `json:"file,omitempty"`
	// Line is the 1-based physical line number.
	Line int `json:"line"`
	// Offset is the byte offset of the line's first byte.
	Offset int64 `json:"offset"`
	// SHA256 is the lower-case hex sha256 of the line's exact bytes,
	// without the "\n".
	SHA256 string `json:"sha256"`
	// Preview is the first 120 UTF-16 units of the line, lossy-decoded
	// when the bytes are not valid UTF-8; cut inside a surrogate pair, it
	// ends with the lone high surrogate, as the reference's does (Text).
	Preview Text `json:"preview"`
}

// CorruptionError is a scan refusing a ledger with corrupt lines
// (LedgerCorruptionError): reconciling from a partial scan would silently
// drop intents. Lines lists every corrupt line, in file order. Scan with
// Tolerate returns them as data instead.
type CorruptionError struct {
	Path  string
	Lines []CorruptLine
}

func (e *CorruptionError) Error() string {
	msg := fmt.Sprintf("effect ledger '%s' has %d corrupt line(s)", e.Path, len(e.Lines))
	if len(e.Lines) > 0 {
		first := e.Lines[0]
		msg += fmt.Sprintf("; first at line %d, byte %d, sha256 %s", first.Line, first.Offset, first.SHA256)
	}
	return msg + ". A line the scan cannot decode, parse and validate means external damage or a " +
		"foreign writer; reconciliation must not proceed from a partial scan " +
		"(scan with tolerate-corrupt to surface the lines for triage)."
}

// shellQuote returns path as a shell word: as it is when it holds only
// characters no shell treats specially, else in single quotes.
func shellQuote(path string) string {
	if path != "" && strings.Trim(path, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./,:@%+=-") == "" {
		return path
	}
	return "'" + strings.ReplaceAll(path, "'", `'\''`) + "'"
}

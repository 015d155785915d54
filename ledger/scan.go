package ledger

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// Location is where a row sits: the file, its 1-based physical line and the
// byte offset of the line's first byte.
type Location struct {
	File   string `json:"file,omitempty"`
	Line   int    `json:"line"`
	Offset int64  `json:"offset"`
}

// ScannedIntent is an admitted intent row.
type ScannedIntent struct {
	Intent
	// HasAttemptID reports that the row had an attemptId member, which
	// may be the empty string in a foreign row; without it the row is a
	// legacy row paired by (idempotencyKey, startedAt).
	HasAttemptID bool
	// Extra holds members the ledger does not know, as raw JSON; nil
	// when there are none. A repeated key keeps its last value.
	Extra map[string]json.RawMessage
	At    Location
}

// ScannedRecord is an admitted outcome row.
type ScannedRecord struct {
	Record
	HasAttemptID bool
	Extra        map[string]json.RawMessage
	At           Location
}

// TornArtifact is a quarantine row a writer left while repairing a torn
// tail. BytesBase64 and SHA256 are empty in legacy rows.
type TornArtifact struct {
	Bytes       string   `json:"bytes"`
	BytesBase64 string   `json:"bytesBase64,omitempty"`
	SHA256      string   `json:"sha256,omitempty"`
	RecoveredAt Millis   `json:"recoveredAt"`
	At          Location `json:"-"`
}

// Fragment returns the exact quarantined bytes, checked against SHA256. It
// fails for a legacy row, which kept only the lossy text.
func (t *TornArtifact) Fragment() ([]byte, error) {
	if t.BytesBase64 == "" {
		return nil, fmt.Errorf("torn row %s:%d: legacy row without bytesBase64", t.At.File, t.At.Line)
	}
	b, err := base64.StdEncoding.DecodeString(t.BytesBase64)
	if err != nil {
		return nil, fmt.Errorf("torn row %s:%d: bytesBase64: %w", t.At.File, t.At.Line, err)
	}
	if sum := sha256.Sum256(b); t.SHA256 != "" && hex.EncodeToString(sum[:]) != t.SHA256 {
		return nil, fmt.Errorf("torn row %s:%d: bytes do not match sha256 %s", t.At.File, t.At.Line, t.SHA256)
	}
	return b, nil
}

// TornTail is a live unterminated, unparseable last line: a crash in the
// middle of an append that no writer has repaired yet. It is tolerated and
// named, never silent, and never corruption.
type TornTail struct {
	Preview Text     `json:"preview"`
	At      Location `json:"-"`
}

// ScanResult is what Scan reads back (EffectLedgerScan). A single file has
// at most one torn tail; a Merge keeps one per file.
type ScanResult struct {
	Files    []string
	Intents  []ScannedIntent
	Outcomes []ScannedRecord
	// Orphans are the intents whose own attempt has no outcome row, in
	// file order: each may have had its effect, and must be reconciled by
	// its idempotency key before a retry.
	Orphans   []ScannedIntent
	Corrupt   []CorruptLine // only with Tolerate
	Torn      []TornArtifact
	TornTails []TornTail
}

// ScanOption configures Scan.
type ScanOption func(*scanConfig)

type scanConfig struct{ tolerate bool }

// Tolerate returns corrupt lines in ScanResult.Corrupt instead of failing
// the scan with a *CorruptionError.
func Tolerate() ScanOption { return func(c *scanConfig) { c.tolerate = true } }

// Scan reads the ledger at path (loadEffectLedger): every line is decoded
// as strict UTF-8, parsed and shape-checked (contract 8.6). A line that
// fails is corrupt, unless it is the unterminated last line and fails only
// decoding or parsing: that is a torn tail. Corrupt lines fail the scan
// with a *CorruptionError listing all of them, unless Tolerate is given.
// Errors opening or reading the file are returned as they come.
func Scan(path string, opts ...ScanOption) (*ScanResult, error) {
	var cfg scanConfig
	for _, o := range opts {
		o(&cfg)
	}
	// As Open: the directory is resolved by hostpath's rule, the final
	// component is never followed, and a FIFO must not block the open (it
	// is refused as not regular just below).
	dir, name, err := openDir(path)
	if err != nil {
		return nil, err
	}
	fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err == unix.ELOOP {
		err = openError(path, dir, name, err)
	} else if err != nil {
		err = &os.PathError{Op: "open", Path: path, Err: err}
	}
	unix.Close(dir)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, &FileError{Path: path, Problem: ProblemNotRegular, Detail: fi.Mode().Type().String()}
	}
	return scan(path, f, fi.Size(), cfg)
}

// scan reads one ledger named path from r, which holds about size bytes
// (a hint for the first buffer; a ledger that grows meanwhile is read to
// its end all the same).
func scan(path string, r io.Reader, size int64, cfg scanConfig) (*ScanResult, error) {
	s := scanner{res: &ScanResult{Files: []string{path}}, path: path}
	if err := s.read(r, size); err != nil {
		return nil, fmt.Errorf("scan ledger %s: %w", path, err)
	}
	if len(s.res.Corrupt) > 0 && !cfg.tolerate {
		return nil, &CorruptionError{Path: path, Lines: s.res.Corrupt}
	}
	s.res.Orphans = orphans(s.res.Intents, s.res.Outcomes)
	return s.res, nil
}

// scanner holds the per-scan state. Lines are handed to it as substrings of
// one string per read chunk, so an admitted row's unescaped strings share
// that chunk's memory instead of costing an allocation each.
type scanner struct {
	res      *ScanResult
	intents  blocks[ScannedIntent]
	outcomes blocks[ScannedRecord]
	path     string
	lineNo   int
	rd       reader
	obj      object
}

// scanChunk is the most read at once; a ledger of sizeHint bytes gets a
// buffer one byte larger (so its EOF comes in the same loop), at least
// minChunk: a small ledger costs no MiB buffer.
const (
	scanChunk = 1 << 20
	minChunk  = 4 << 10
)

func (s *scanner) read(r io.Reader, sizeHint int64) error {
	buf := make([]byte, min(max(sizeHint+1, minChunk), scanChunk))
	n := 0
	var off int64
	for {
		m, err := r.Read(buf[n:])
		n += m
		if last := bytes.LastIndexByte(buf[:n], '\n'); last >= 0 {
			s.lines(string(buf[:last+1]), off)
			n = copy(buf, buf[last+1:n])
			off += int64(last + 1)
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if n == len(buf) {
			buf = append(buf, make([]byte, len(buf))...)
		}
	}
	if n > 0 {
		s.lineNo++
		s.line(string(buf[:n]), off, false)
	}
	s.finish()
	return nil
}

// finish moves the collected rows into the result.
func (s *scanner) finish() {
	s.res.Intents = s.intents.slice()
	s.res.Outcomes = s.outcomes.slice()
}

// lines handles a chunk of complete lines, each ending in "\n".
func (s *scanner) lines(chunk string, off int64) {
	for len(chunk) > 0 {
		i := strings.IndexByte(chunk, '\n')
		s.lineNo++
		s.line(chunk[:i], off, true)
		chunk = chunk[i+1:]
		off += int64(i + 1)
	}
}

func (s *scanner) line(raw string, off int64, terminated bool) {
	at := Location{File: s.path, Line: s.lineNo, Offset: off}
	if !utf8.ValidString(raw) {
		pv := preview(lossyDecode([]byte(raw), false))
		if terminated {
			s.corrupt(raw, at, pv)
		} else {
			s.res.TornTails = append(s.res.TornTails, TornTail{Preview: pv, At: at})
		}
		return
	}
	// TextDecoder consumes one leading BOM of each decoded line.
	text := strings.TrimPrefix(raw, bom)
	isJSON, isObject := s.rd.parse(text, &s.obj)
	switch {
	case !isJSON && jsBlank(text):
		return
	case !isJSON && terminated:
		s.corrupt(raw, at, preview(text))
	case !isJSON:
		s.res.TornTails = append(s.res.TornTails, TornTail{Preview: preview(text), At: at})
	case !isObject || !s.admit(&s.obj, at):
		// An unterminated line that parses but has the wrong shape is
		// foreign data: a torn prefix of a flat row never parses.
		s.corrupt(raw, at, preview(text))
	}
}

func (s *scanner) corrupt(raw string, at Location, pv Text) {
	sum := sha256.Sum256([]byte(raw))
	s.res.Corrupt = append(s.res.Corrupt, CorruptLine{
		File: at.File, Line: at.Line, Offset: at.Offset, SHA256: hex.EncodeToString(sum[:]), Preview: pv,
	})
}

// admit checks the shape of a parsed object (contract 8.6 step 4) and
// stores the row; it reports false for a shape the rules reject.
func (s *scanner) admit(o *object, at Location) bool {
	phase := o.f[fPhase]
	if phase.kind != kindString {
		return false
	}
	switch phase.str {
	case "intent":
		if !intentShape(o) {
			return false
		}
		s.intents.add(ScannedIntent{
			Intent: intentOf(o), HasAttemptID: o.f[fAttemptID].kind == kindString, Extra: extras(o), At: at,
		})
	case "outcome":
		if !intentShape(o) || !outcomeShape(o) {
			return false
		}
		r := Record{Intent: intentOf(o), DurationMs: Millis(o.f[fDurationMs].num), Outcome: Outcome(o.f[fOutcome].str)}
		if v := o.f[fExitCode]; v.kind == kindNumber {
			ec := int(math.Max(math.Min(math.Trunc(v.num), math.MaxInt32), math.MinInt32))
			r.ExitCode = &ec
		}
		if v := o.f[fSignal]; v.kind == kindString {
			sig := v.str
			r.Signal = &sig
		}
		s.outcomes.add(ScannedRecord{
			Record: r, HasAttemptID: o.f[fAttemptID].kind == kindString, Extra: extras(o), At: at,
		})
	case "torn":
		if o.f[fBytes].kind != kindString || o.f[fRecoveredAt].kind != kindNumber ||
			!absentOr(o.f[fBytesBase64], kindString) || !absentOr(o.f[fSHA256], kindString) {
			return false
		}
		s.res.Torn = append(s.res.Torn, TornArtifact{
			Bytes: o.f[fBytes].str, BytesBase64: o.f[fBytesBase64].str, SHA256: o.f[fSHA256].str,
			RecoveredAt: Millis(o.f[fRecoveredAt].num), At: at,
		})
	default:
		return false
	}
	return true
}

func absentOr(v value, k kind) bool { return v.kind == kindAbsent || v.kind == k }

func intentShape(o *object) bool {
	for f := fIdempotencyKey; f <= fWorkdir; f++ {
		if o.f[f].kind != kindString {
			return false
		}
	}
	return o.f[fStartedAt].kind == kindNumber && absentOr(o.f[fAttemptID], kindString)
}

func outcomeShape(o *object) bool {
	if o.f[fDurationMs].kind != kindNumber || o.f[fOutcome].kind != kindString {
		return false
	}
	switch Outcome(o.f[fOutcome].str) {
	case OutcomeOK, OutcomeError, OutcomeTimeout:
	default:
		return false
	}
	ec, sig := o.f[fExitCode].kind, o.f[fSignal].kind
	return (ec == kindNumber || ec == kindNull) && (sig == kindString || sig == kindNull)
}

func intentOf(o *object) Intent {
	return Intent{
		IdempotencyKey: o.f[fIdempotencyKey].str,
		RunID:          o.f[fRunID].str,
		SpanID:         o.f[fSpanID].str,
		Tool:           o.f[fTool].str,
		ArgsHash:       o.f[fArgsHash].str,
		Executor:       o.f[fExecutor].str,
		Workdir:        o.f[fWorkdir].str,
		StartedAt:      Millis(o.f[fStartedAt].num),
		AttemptID:      o.f[fAttemptID].str,
	}
}

// extras keeps the members a phase does not define; for an intent that
// includes outcome-only names a foreign writer put there.
func extras(o *object) map[string]json.RawMessage {
	phase := o.f[fPhase].str
	var m map[string]json.RawMessage
	add := func(k, raw string) {
		if m == nil {
			m = make(map[string]json.RawMessage)
		}
		m[k] = json.RawMessage(raw)
	}
	for f := fDurationMs; f < numFields; f++ {
		if o.f[f].kind == kindAbsent || (phase == "outcome" && f <= fSignal) {
			continue
		}
		add(slotNames[f], o.f[f].raw)
	}
	for _, e := range o.extra {
		add(e.key, e.raw)
	}
	return m
}

var slotNames = [numFields]string{
	"phase", "idempotencyKey", "runId", "spanId", "tool", "argsHash", "executor", "workdir",
	"startedAt", "attemptId", "durationMs", "outcome", "exitCode", "signal",
	"bytes", "bytesBase64", "sha256", "recoveredAt",
}

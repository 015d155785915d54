package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode"

	"github.com/moat-sandbox/moat/ledger"
)

const ledgerUsage = `usage: moat ledger scan FILE... [--tolerate-corrupt] [--json]

Scans effect ledgers (one per writer process, e.g. effects.<worker>.jsonl),
pairs intents with outcomes across all the files, and lists every orphaned
intent: an effect that may have happened without its outcome being
recorded. Look each one up by its idempotency key with the effect's
provider before retrying or compensating.

Exit status:
  0   clean: nothing to reconcile
  1   orphaned intents need reconciling
  2   a file is corrupt: refused (or, with --tolerate-corrupt, its corrupt
      lines are listed); do not reconcile from a partial scan
  64  usage error
  66  a file cannot be read
`

// Exit statuses of `moat ledger scan` beyond exitOK and exitUsage.
const (
	ledgerExitOrphans = 1
	ledgerExitCorrupt = 2
	ledgerExitNoInput = 66 // EX_NOINPUT
)

// ledgerCmd implements `moat ledger scan`.
func ledgerCmd(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "scan" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			fmt.Fprint(stdout, ledgerUsage)
			return exitOK
		}
		fmt.Fprint(stderr, ledgerUsage)
		return exitUsage
	}
	fs := flag.NewFlagSet("moat ledger scan", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, ledgerUsage) }
	tolerate := fs.Bool("tolerate-corrupt", false, "list corrupt lines as data instead of refusing the file")
	asJSON := fs.Bool("json", false, "write the report as JSON on stdout")
	files, err := parseInterspersed(fs, args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		return exitUsage
	}
	if len(files) == 0 {
		fmt.Fprintln(stderr, "moat ledger scan: no FILE given")
		fs.Usage()
		return exitUsage
	}
	rep := scanFiles(files, *tolerate)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintln(stderr, "moat ledger scan:", err)
		}
	} else {
		rep.writeText(stdout)
	}
	for _, f := range rep.Files {
		if f.Error != "" {
			fmt.Fprintf(stderr, "moat ledger scan: %s\n", f.Error)
		}
	}
	return rep.ExitCode
}

// parseInterspersed parses flags placed before, between or after the
// files; everything after "--" is a file.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var files []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(files, rest...), nil
		}
		if len(rest) == 0 {
			return files, nil
		}
		files = append(files, rest[0])
		args = rest[1:]
	}
}

// scanReport is the --json document.
type scanReport struct {
	Status          string               `json:"status"` // clean, orphans, corrupt, unreadable
	ExitCode        int                  `json:"exitCode"`
	Files           []fileReport         `json:"files"`
	Counts          scanCounts           `json:"counts"`
	OrphanedIntents []orphanReport       `json:"orphanedIntents"`
	Corrupt         []ledger.CorruptLine `json:"corrupt"`
	TornArtifacts   []tornReport         `json:"tornArtifacts"`
	TornTails       []tailReport         `json:"tornTails"`
}

type fileReport struct {
	Path   string `json:"path"`
	Status string `json:"status"` // ok, corrupt, unreadable
	Error  string `json:"error,omitempty"`
}

type scanCounts struct {
	Intents         int `json:"intents"`
	Outcomes        int `json:"outcomes"`
	OrphanedIntents int `json:"orphanedIntents"`
	CorruptLines    int `json:"corruptLines"`
	TornArtifacts   int `json:"tornArtifacts"`
	TornTails       int `json:"tornTails"`
}

// orphanReport is the full reconciliation lookup set of one orphan, in the
// row's own member names, plus where it is.
type orphanReport struct {
	IdempotencyKey   string                     `json:"idempotencyKey"`
	RunID            string                     `json:"runId"`
	SpanID           string                     `json:"spanId"`
	Tool             string                     `json:"tool"`
	ArgsHash         string                     `json:"argsHash"`
	Executor         string                     `json:"executor"`
	Workdir          string                     `json:"workdir"`
	StartedAt        ledger.Millis              `json:"startedAt"`
	StartedAtRFC3339 string                     `json:"startedAtRFC3339"`
	AttemptID        *string                    `json:"attemptId,omitempty"`
	Extra            map[string]json.RawMessage `json:"extra,omitempty"`
	ledger.Location
}

type tornReport struct {
	ledger.TornArtifact
	ledger.Location
}

type tailReport struct {
	ledger.TornTail
	ledger.Location
}

func scanFiles(files []string, tolerate bool) *scanReport {
	var opts []ledger.ScanOption
	if tolerate {
		opts = append(opts, ledger.Tolerate())
	}
	rep := &scanReport{Corrupt: []ledger.CorruptLine{}, OrphanedIntents: []orphanReport{}, TornArtifacts: []tornReport{}, TornTails: []tailReport{}}
	var scans []*ledger.ScanResult
	refused, unreadable := false, false
	for _, path := range files {
		res, err := ledger.Scan(path, opts...)
		var ce *ledger.CorruptionError
		switch {
		case errors.As(err, &ce):
			refused = true
			rep.Corrupt = append(rep.Corrupt, ce.Lines...)
			rep.Files = append(rep.Files, fileReport{Path: path, Status: "corrupt", Error: err.Error()})
		case err != nil:
			unreadable = true
			rep.Files = append(rep.Files, fileReport{Path: path, Status: "unreadable", Error: err.Error()})
		default:
			scans = append(scans, res)
			status := "ok"
			if len(res.Corrupt) > 0 {
				status = "corrupt"
			}
			rep.Files = append(rep.Files, fileReport{Path: path, Status: status})
		}
	}
	m := ledger.Merge(scans...)
	rep.Corrupt = append(rep.Corrupt, m.Corrupt...)
	for _, o := range m.Orphans {
		rep.OrphanedIntents = append(rep.OrphanedIntents, orphanOf(o))
	}
	for _, t := range m.Torn {
		rep.TornArtifacts = append(rep.TornArtifacts, tornReport{t, t.At})
	}
	for _, t := range m.TornTails {
		rep.TornTails = append(rep.TornTails, tailReport{t, t.At})
	}
	rep.Counts = scanCounts{
		Intents: len(m.Intents), Outcomes: len(m.Outcomes), OrphanedIntents: len(m.Orphans),
		CorruptLines: len(rep.Corrupt), TornArtifacts: len(m.Torn), TornTails: len(m.TornTails),
	}
	switch {
	case unreadable:
		rep.Status, rep.ExitCode = "unreadable", ledgerExitNoInput
	case refused || len(rep.Corrupt) > 0:
		rep.Status, rep.ExitCode = "corrupt", ledgerExitCorrupt
	case len(m.Orphans) > 0:
		rep.Status, rep.ExitCode = "orphans", ledgerExitOrphans
	default:
		rep.Status, rep.ExitCode = "clean", exitOK
	}
	return rep
}

func orphanOf(o ledger.ScannedIntent) orphanReport {
	r := orphanReport{
		IdempotencyKey: o.IdempotencyKey, RunID: o.RunID, SpanID: o.SpanID, Tool: o.Tool, ArgsHash: o.ArgsHash,
		Executor: o.Executor, Workdir: o.Workdir, StartedAt: o.StartedAt, StartedAtRFC3339: rfc3339(o.StartedAt),
		Extra: o.Extra, Location: o.At,
	}
	if o.HasAttemptID {
		id := o.AttemptID
		r.AttemptID = &id
	}
	return r
}

// rfc3339 renders an instant in milliseconds as UTC RFC 3339 with
// milliseconds, or "" when it is not a representable instant.
func rfc3339(m ledger.Millis) string {
	v := float64(m)
	if math.IsNaN(v) || math.Abs(v) > 8.64e15 { // the ECMAScript Date range
		return ""
	}
	return m.Time().UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

func (rep *scanReport) writeText(w io.Writer) {
	c := rep.Counts
	fmt.Fprintf(w, "scanned %d file(s): %d intents, %d outcomes, %d orphaned intents, %d corrupt lines, %d torn artifacts, %d live torn tails\n",
		len(rep.Files), c.Intents, c.Outcomes, c.OrphanedIntents, c.CorruptLines, c.TornArtifacts, c.TornTails)
	for _, f := range rep.Files {
		if f.Status != "ok" {
			fmt.Fprintf(w, "file %s: %s\n", safe(f.Path), f.Status)
		}
	}
	for i, o := range rep.OrphanedIntents {
		fmt.Fprintf(w, "\norphaned intent %d of %d at %s:%d (byte %d): look the key up with the effect's provider before retrying\n",
			i+1, len(rep.OrphanedIntents), safe(o.File), o.Line, o.Offset)
		attempt := "(none: legacy row, paired by idempotency key and startedAt)"
		if o.AttemptID != nil {
			attempt = safe(*o.AttemptID)
		}
		at, _ := o.StartedAt.MarshalJSON()
		for _, kv := range [][2]string{
			{"idempotency key", safe(o.IdempotencyKey)}, {"run id", safe(o.RunID)}, {"tool", safe(o.Tool)},
			{"argsHash", safe(o.ArgsHash)}, {"span id", safe(o.SpanID)}, {"workdir", safe(o.Workdir)},
			{"executor", safe(o.Executor)}, {"startedAt", string(at) + " (" + o.StartedAtRFC3339 + ")"}, {"attemptId", attempt},
		} {
			fmt.Fprintf(w, "  %-16s %s\n", kv[0], kv[1])
		}
	}
	for _, l := range rep.Corrupt {
		fmt.Fprintf(w, "\ncorrupt line %s:%d (byte %d, sha256 %s): %s\n", safe(l.File), l.Line, l.Offset, l.SHA256, safe(string(l.Preview)))
	}
	for _, t := range rep.TornTails {
		fmt.Fprintf(w, "\nlive torn tail %s:%d (a crash mid-append; the next writer quarantines it): %s\n", safe(t.File), t.Line, safe(string(t.Preview)))
	}
	switch rep.Status {
	case "clean":
		fmt.Fprintln(w, "\nnothing to reconcile")
	case "corrupt":
		fmt.Fprintln(w, "\ncorrupt ledger: do not reconcile from a partial scan; triage the lines above")
	}
}

// safe returns s as is when every rune is printable, else quoted, so a
// foreign row cannot write terminal control sequences.
func safe(s string) string {
	for _, r := range s {
		if !unicode.IsPrint(r) || r == '\uFFFD' {
			return strconv.Quote(s)
		}
	}
	if strings.TrimSpace(s) != s || s == "" {
		return strconv.Quote(s)
	}
	return s
}

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Log formats of the library's warnings on stderr (--log-format).
const (
	logHuman = "human" // the default: one readable line per warning, once per run
	logText  = "text"  // slog's key=value records, every attribute
	logJSON  = "json"  // slog's JSON records, every attribute
)

// logFormatFlag registers --log-format on fs.
func logFormatFlag(fs *flag.FlagSet) *string {
	return fs.String("log-format", "", "warnings on stderr: human (one line each, the default), text (slog key=value) or json (slog JSON; the default with --json); for moat run, giving it asks for warnings on a stderr that is not a terminal")
}

// warningsTo is where `moat run` writes its warnings: stderr when a person
// reads it (a terminal) or when --log-format asks for them, else nowhere.
// As another executor's sandbox launcher moat run's stderr is the tool's:
// the executor keeps its tail for the error message of a failed tool (the
// reference: the last 500 units), and a line about this host's cgroups
// there, in front of every tool's own diagnostics, tells the model nothing
// about its tool. What moat run cannot do stays an error, on stderr
// whatever it is: a limit that was asked for and cannot be enforced stops
// the run (exit 125), and `moat doctor` says what a host degrades.
func warningsTo(format string, stderr io.Writer) io.Writer {
	if format != "" || isTerminal(stderr) {
		return stderr
	}
	return io.Discard
}

// isTerminal reports whether w is a terminal (TCGETS succeeds on it).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// cliLogger is the logger handed to the library: machine-readable records
// when asked for, else human lines.
func cliLogger(format, prefix string, stderr io.Writer) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{
		Level: slog.LevelWarn,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{} // a CLI's warning needs no timestamp
			}
			return a
		},
	}
	switch format {
	case "", logHuman:
		return slog.New(&humanHandler{w: stderr, prefix: prefix, seen: map[string]bool{}, mu: new(sync.Mutex)}), nil
	case logText:
		return slog.New(slog.NewTextHandler(stderr, opts)), nil
	case logJSON:
		return slog.New(slog.NewJSONHandler(stderr, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: use human, text or json", format)
}

// longAttr is the longest attribute value a human line shows; with a
// longer one (a path list, a reason per limit), or a fix, the line names
// the attributes, and `moat doctor` or --log-format text has them.
const longAttr = 60

// humanHandler writes each warning as one line, "moat run: warning: what:
// error (detail: value)", and each distinct line once per process: a
// warning repeated per dispatch says nothing new the second time.
type humanHandler struct {
	w      io.Writer
	prefix string
	attrs  []slog.Attr
	mu     *sync.Mutex
	seen   map[string]bool
}

func (h *humanHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (h *humanHandler) Handle(_ context.Context, r slog.Record) error {
	var errText, fix string
	var details, keys []string
	var long bool
	add := func(a slog.Attr) bool {
		v := a.Value.Resolve().String()
		switch {
		case a.Key == "err":
			errText = v
		case a.Key == "fix":
			fix = v
		case v == "":
		default:
			details = append(details, a.Key+" "+v)
			keys = append(keys, a.Key)
			long = long || len(v) > longAttr
		}
		return true
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(add)
	var b strings.Builder
	level := "warning"
	if r.Level >= slog.LevelError {
		level = "error"
	}
	fmt.Fprintf(&b, "%s: %s: %s", h.prefix, level, r.Message)
	if errText != "" {
		b.WriteString(": " + errText)
	}
	switch {
	case long || (fix != "" && len(keys) > 0):
		// Details that fill a screen (paths, reasons per limit) are the
		// doctor's to explain, once, with the fix.
		fmt.Fprintf(&b, " (%s: `moat doctor` says why and how to fix it)", strings.Join(keys, ", "))
	case len(details) > 0:
		b.WriteString(" (" + strings.Join(details, ", ") + ")")
	}
	if fix != "" && len(keys) == 0 {
		b.WriteString(" (`moat doctor` says how to fix it)")
	}
	line := b.String()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.seen[line] {
		return nil
	}
	h.seen[line] = true
	_, err := fmt.Fprintln(h.w, line)
	return err
}

func (h *humanHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), as...)
	return &c
}

// WithGroup: a human line has no groups; the attributes keep their keys.
func (h *humanHandler) WithGroup(string) slog.Handler { return h }

package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/moat-sandbox/moat/nsexec/hostpath"
	"golang.org/x/sys/unix"
)

// runtimeLog is where the runtime's messages go: an error to stderr and,
// with --log, to that file in --log-format, which is where containerd's
// shim reads a failed command's reason (the last "error" record of a JSON
// log).
type runtimeLog struct {
	file   *os.File
	logger *slog.Logger
}

func openLog(g global) *runtimeLog {
	l := &runtimeLog{}
	var w io.Writer = io.Discard
	if g.logPath != "" {
		// Resolved by the rule of nsexec/hostpath: a symlink on the way
		// (or the file itself) is followed only if root or the caller
		// could have planted it, so another user's link cannot have root
		// append to, or create, a file where it points.
		fd, real, err := hostpath.Open(g.logPath, unix.O_WRONLY|unix.O_APPEND|unix.O_CREAT, 0o600)
		if err != nil {
			fmt.Fprintf(os.Stderr, "moat-runtime: open --log %s: %v\n", g.logPath, err)
		} else {
			f := os.NewFile(uintptr(fd), real)
			l.file, w = f, f
		}
	}
	level := slog.LevelInfo
	if g.debug {
		level = slog.LevelDebug
	}
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		// runc's logrus records: level in lower case, the message as msg.
		if a.Key == slog.LevelKey {
			return slog.String("level", strings.ToLower(a.Value.String()))
		}
		return a
	}}
	if g.logFormat == "json" {
		l.logger = slog.New(slog.NewJSONHandler(w, opts))
	} else {
		l.logger = slog.New(slog.NewTextHandler(w, opts))
	}
	return l
}

// error reports a failed command on stderr and in the log.
func (l *runtimeLog) error(err error) {
	fmt.Fprintf(os.Stderr, "moat-runtime: %v\n", err)
	l.logger.Error(err.Error())
}

func (l *runtimeLog) close() {
	if l.file != nil {
		l.file.Close()
	}
}

package main

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/moat-sandbox/moat/executor/native"
	"golang.org/x/sys/unix"
)

// initBinary is the small static sandbox init (cmd/moat-init) that moat
// starts instead of re-executing itself when it is installed next to moat:
// it starts faster and loads no libseccomp in the sandbox.
const initBinary = "moat-init"

// sandboxOptions are the native options every subcommand shares.
func sandboxOptions() []native.Option {
	self, err := os.Executable()
	if err != nil {
		return nil
	}
	p := filepath.Join(filepath.Dir(self), initBinary)
	if unix.Access(p, unix.X_OK) != nil {
		return nil
	}
	return []native.Option{native.WithInitPath(p)}
}

// warnLogger writes the library's warnings (degraded limits, a cgroup that
// could not be removed) to stderr, one line each.
func warnLogger(stderr io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{
		Level: slog.LevelWarn,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{} // a CLI's warning needs no timestamp
			}
			return a
		},
	}))
}

package main

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"

	"github.com/moat-sandbox/moat/executor/native"
	"golang.org/x/sys/unix"
)

// initBinary is the small static sandbox init (cmd/moat-init) that moat
// starts instead of re-executing itself when it is installed next to moat:
// it starts faster and loads no libseccomp in the sandbox.
const initBinary = "moat-init"

// sandboxOptions are the native options every subcommand shares.
func sandboxOptions() []native.Option {
	var opts []native.Option
	if dir := seccompStoreDir(); dir != "" {
		opts = append(opts, native.WithSeccompStore(dir))
	}
	self, err := os.Executable()
	if err != nil {
		return opts
	}
	p := filepath.Join(filepath.Dir(self), initBinary)
	if unix.Access(p, unix.X_OK) != nil {
		return opts
	}
	return append(opts, native.WithInitPath(p))
}

// storeVar overrides where compiled seccomp programs are kept between runs:
// a directory, or "off".
const storeVar = "MOAT_SECCOMP_STORE"

// seccompStoreDir is where moat keeps compiled seccomp programs between
// runs (seccomp.Store): $MOAT_SECCOMP_STORE, else the user's runtime
// directory (a tmpfs of theirs alone, emptied at logout or boot), else
// /run/moat for root, else the user's cache directory when their home
// exists, else moat-<uid> in the temporary directory (which the store uses
// only if it is this user's and private: another user cannot plant one).
func seccompStoreDir() string {
	if v := os.Getenv(storeVar); v != "" {
		if v == "off" || !filepath.IsAbs(v) {
			return ""
		}
		return v
	}
	if rt := os.Getenv("XDG_RUNTIME_DIR"); filepath.IsAbs(rt) {
		if fi, err := os.Stat(rt); err == nil && fi.IsDir() {
			return filepath.Join(rt, "moat", "seccomp")
		}
	}
	if os.Geteuid() == 0 {
		return "/run/moat/seccomp"
	}
	if home, err := os.UserHomeDir(); err == nil {
		if fi, err := os.Stat(home); err == nil && fi.IsDir() {
			if dir, err := os.UserCacheDir(); err == nil {
				return filepath.Join(dir, "moat", "seccomp")
			}
		}
	}
	return filepath.Join(os.TempDir(), "moat-"+strconv.Itoa(os.Geteuid()), "seccomp")
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

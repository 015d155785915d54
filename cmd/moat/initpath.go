package main

import (
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
	opts := []native.Option{native.WithSystemdBus(userBus())}
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
// runs (seccomp.Store): $MOAT_SECCOMP_STORE, else /run/moat/seccomp. Only
// root keeps them: its sandboxes run under another host uid and cannot read
// the store's MAC key. A rootless sandbox is the caller's own uid and could
// forge a program for a later run, so rootless moat compiles on every run
// (native.WithSeccompStore ignores a store there too).
func seccompStoreDir() string {
	if os.Geteuid() != 0 {
		return ""
	}
	if v := os.Getenv(storeVar); v != "" {
		if v == "off" || !filepath.IsAbs(v) {
			return ""
		}
		return v
	}
	return "/run/moat/seccomp"
}

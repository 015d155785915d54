//go:build !linux

package workdir

import (
	"log/slog"
	"os"
)

// Dir is one workdir made by Create. Elsewhere than Linux it has no
// marker and Sweep finds nothing.
type Dir struct{ Path string }

// Create makes a fresh 0700 directory in base named prefix and random
// characters.
func Create(base, prefix string, _ *slog.Logger) (*Dir, error) {
	p, err := os.MkdirTemp(base, prefix)
	if err != nil {
		return nil, err
	}
	return &Dir{Path: p}, nil
}

// RemoveAll is os.RemoveAll.
func RemoveAll(path string) error { return os.RemoveAll(path) }

// Remove removes the workdir and logs a failure.
func (d *Dir) Remove(log *slog.Logger) {
	if err := os.RemoveAll(d.Path); err != nil {
		log.Warn("remove workdir", "workdir", d.Path, "err", err)
	}
}

// Release leaves the workdir.
func (d *Dir) Release() {}

// Sweep finds nothing.
func Sweep(*slog.Logger) int { return 0 }

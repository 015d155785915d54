//go:build !linux

package workdir

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
)

// Dir is one workdir made by Create. Elsewhere than Linux it has no
// marker and Sweep finds nothing.
type Dir struct{ Path string }

// Create makes a fresh 0700 directory in base named prefix and six random
// characters, as on Linux (os.MkdirTemp would append decimal digits).
func Create(base, prefix string, _ *slog.Logger) (*Dir, error) {
	for range 100 {
		p := filepath.Join(base, prefix+randomName())
		err := os.Mkdir(p, 0o700)
		if err == nil {
			return &Dir{Path: p}, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return nil, err
		}
	}
	return nil, &os.PathError{Op: "mkdirtemp", Path: filepath.Join(base, prefix+"*"), Err: fs.ErrExist}
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

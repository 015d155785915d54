package executor

import (
	"io/fs"
	"os"
	"path/filepath"
)

// removeWorkdir removes a per-call workdir and everything the tool left in
// it. A tool may have made directories unwritable (chmod 0500), which stops
// a plain RemoveAll for a non-root owner, so on failure it restores owner
// write permission on every directory and tries once more. What still fails
// is logged: the dispatch outcome stands either way.
func (p *Pipeline) removeWorkdir(dir string) {
	if err := os.RemoveAll(dir); err == nil {
		return
	}
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(path, 0o700)
		}
		return nil
	})
	if err := os.RemoveAll(dir); err != nil {
		p.cfg.Logger.Warn("remove workdir", "provider", p.cfg.Name, "workdir", dir, "err", err)
	}
}

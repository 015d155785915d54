package native

import (
	"slices"

	"github.com/moat-sandbox/moat/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// storeReachable names the first read-write mount whose source is the
// seccomp program store or one of its ancestors: from there a sandbox could
// write a program that a later start would load. "" when there is none.
func storeReachable(store *seccomp.Store, mounts []specs.Mount) string {
	for _, m := range mounts {
		if slices.Contains(m.Options, "rw") && store.Under(m.Source) {
			return m.Source
		}
	}
	return ""
}

// clearStore empties a seccomp program store that a sandbox could write.
func (p *Provider) clearStore(s *seccomp.Store) {
	if err := s.Clear(); err != nil {
		p.launcher.logger.Warn("empty the seccomp program store a sandbox could write", "err", err)
	}
}

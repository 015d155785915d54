package cgroups

import "log/slog"

// DefaultParent is the name of the group the leaves are created in,
// relative to this process's own cgroup (see the package doc).
const DefaultParent = "moat"

// Option configures a Manager.
type Option func(*config)

type config struct {
	parent  string
	log     *slog.Logger
	host    *Host
	owner   *owner // tests: pretend to be another process
	unified bool   // tests: use the cgroup2 mount of a hybrid host
}

// WithParent sets the group leaves are created in. A relative path is
// resolved below this process's own cgroup in each hierarchy, an absolute
// one below each hierarchy's root. Missing levels are created.
func WithParent(path string) Option { return func(c *config) { c.parent = path } }

// WithLogger sets the logger (discarded by default).
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.log = l } }

// WithHost uses an already detected Host instead of calling Detect.
func WithHost(h *Host) Option { return func(c *config) { c.host = h } }

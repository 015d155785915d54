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

	parentSet bool   // WithParent was given
	bus       string // the user's systemd manager's D-Bus address
	leafOwner int    // WithLeafOwner's pid, or 0
}

// WithParent sets the group leaves are created in. A relative path is
// resolved below this process's own cgroup in each hierarchy, an absolute
// one below each hierarchy's root. Missing levels are created.
func WithParent(path string) Option {
	return func(c *config) { c.parent, c.parentSet = path, true }
}

// WithSystemdBus is the D-Bus address of the calling user's systemd manager
// (for example "unix:path=/run/user/1000/bus", what $DBUS_SESSION_BUS_ADDRESS
// or $XDG_RUNTIME_DIR/bus name; this package reads no environment). When an
// unprivileged process on cgroup v2 sits in a group that is not delegated to
// it, New asks that manager for a transient scope with Delegate=yes, moves
// this process into it and creates the leaves below it (see the package
// doc). Ignored as root, with WithParent, and on v1 or hybrid hosts.
func WithSystemdBus(address string) Option { return func(c *config) { c.bus = address } }

// WithLogger sets the logger (discarded by default).
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.log = l } }

// WithHost uses an already detected Host instead of calling Detect.
func WithHost(h *Host) Option { return func(c *config) { c.host = h } }

// WithLeafOwner names the leaves Create makes after process pid instead of
// the caller (its start time is read in New, so pid must run then): they
// are stale, for CleanStale, once that process is gone, not the caller.
// moat-runtime's create makes a container's leaf for the container's
// monitor, which holds it (Open) and outlives create.
func WithLeafOwner(pid int) Option { return func(c *config) { c.leafOwner = pid } }

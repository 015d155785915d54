package nsexec

import "time"

// Trace is where the time of one sandbox start went, stage by stage, for
// benchmarks and profiling (WithTrace). Every figure is a wall-clock span on
// CLOCK_MONOTONIC, which the parent and the child share.
type Trace struct {
	// Spawn is the parent's clone with the namespace flags, the id maps and
	// the exec of the init binary (os.StartProcess).
	Spawn time.Duration
	// Runtime is the init binary's start until Init runs: dynamic loading,
	// the Go runtime and every package init of that binary.
	Runtime time.Duration
	// Config is reading and decoding the config frame, and joining a cgroup
	// v1 leaf (WithCgroupTasks).
	Config time.Duration
	// Handshake is the hello and go round trip, with the parent's placement
	// hook (WithPlacement) and the unshare of the cgroup namespace.
	Handshake time.Duration
	// Sources is cloning the bind sources (open_tree of the host
	// directories, the workdir and the extra binds) and the id switch.
	Sources time.Duration
	// Mounts is the new root: tmpfs, /etc, /tmp, the binds, /proc and /dev.
	Mounts time.Duration
	// Pivot is pivot_root, the detach of the old root and the read-only root.
	Pivot time.Duration
	// Hygiene is hostname, loopback, cwd, rlimits and umask.
	Hygiene time.Duration
	// Privileges is the tool lookup, the capability drop and close_range.
	Privileges time.Duration
	// Seccomp is loading the filter.
	Seccomp time.Duration
	// Exec is from the filter being in place until the parent heard that the
	// init's fork and exec of the tool succeeded.
	Exec time.Duration
}

// WithTrace calls record with the stage timings of each started sandbox,
// once the tool runs. It costs the child one extra write; leave it off
// outside benchmarks.
func WithTrace(record func(Trace)) Option { return func(o *options) { o.trace = record } }

// The child's marks, in order; markInit is taken when Init starts.
const (
	markInit = iota
	markConfig
	markGo
	markSources
	markMounts
	markPivot
	markHygiene
	markPrivileges
	markSeccomp
	numMarks
)

// traceOf turns the parent's and the child's marks into a Trace.
func traceOf(parentStart, parentSpawned, parentExec int64, m *[numMarks]int64) Trace {
	d := func(a, b int64) time.Duration { return time.Duration(b - a) }
	return Trace{
		Spawn:      d(parentStart, parentSpawned),
		Runtime:    d(parentSpawned, m[markInit]),
		Config:     d(m[markInit], m[markConfig]),
		Handshake:  d(m[markConfig], m[markGo]),
		Sources:    d(m[markGo], m[markSources]),
		Mounts:     d(m[markSources], m[markMounts]),
		Pivot:      d(m[markMounts], m[markPivot]),
		Hygiene:    d(m[markPivot], m[markHygiene]),
		Privileges: d(m[markHygiene], m[markPrivileges]),
		Seccomp:    d(m[markPrivileges], m[markSeccomp]),
		Exec:       d(m[markSeccomp], parentExec),
	}
}

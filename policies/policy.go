// Package policies is moat's declarative policy format: what a sandboxed tool
// may see and use, as JSON data. Built-in policies are embedded in the binary
// (builtin/*.json); users write their own files, possibly extending a
// built-in. Decoding is strict (an unknown or misspelled field is an error)
// and validation reports every problem at once, each naming its JSON path.
//
// Where OCI names a concept the OCI runtime-spec type is used as it is
// (specs.Mount, specs.POSIXRlimit, specs.LinuxSeccomp), so an OCI seccomp
// profile can be pasted into the "seccomp" field unchanged.
package policies

import specs "github.com/opencontainers/runtime-spec/specs-go"

// Version is the policy format version this package reads and writes.
const Version = 1

// Network modes.
const (
	NetworkNone     = "none"     // a new network namespace with no interface up
	NetworkLoopback = "loopback" // a new network namespace with lo up
)

// RootfsHost is the rootfs mode that shows the host's file system read-only
// (the default); any other rootfs value is the absolute path of a directory.
const RootfsHost = "host"

// Default identity inside the sandbox.
const (
	DefaultUID = 1000
	DefaultGID = 1000
)

// Policy is one sandbox policy. After Resolve, Extends is empty and every
// field holds its effective value.
type Policy struct {
	Version     int    `json:"version,omitempty"`
	Name        string `json:"name,omitempty"`
	Description string `json:"description,omitempty"`
	// Extends names a base policy (built-in name or file path) whose fields
	// this one overrides; see Resolve for the merging rules.
	Extends string `json:"extends,omitempty"`
	// Rootfs is "host" or the absolute path of a directory to use as /.
	Rootfs string `json:"rootfs,omitempty"`
	// Mounts are extra mounts on top of the root: binds (type "bind" or
	// empty, with an absolute source) and tmpfs.
	Mounts []specs.Mount `json:"mounts,omitempty"`
	// Network is "none" or "loopback".
	Network string `json:"network,omitempty"`
	// Egress lets the tool reach the listed hosts through moat's filtering
	// proxy (see Egress); nil means no egress at all.
	Egress   *Egress             `json:"egress,omitempty"`
	Identity *Identity           `json:"identity,omitempty"`
	Limits   Limits              `json:"limits,omitzero"`
	Rlimits  []specs.POSIXRlimit `json:"rlimits,omitempty"`
	// Env lists names of host environment variables passed to the tool;
	// nothing else of the host environment reaches it.
	Env []string `json:"env,omitempty"`
	// Seccomp is the syscall filter; nil means no filter, which needs
	// Unfiltered.
	Seccomp *specs.LinuxSeccomp `json:"seccomp,omitempty"`
	// Unfiltered states that the tool runs with no syscall filter at all.
	// A policy that ends up without an effective filter (no seccomp, or a
	// profile that lets every call through) is refused unless it says so
	// here: a filter must never be dropped by omission. It contradicts a
	// seccomp profile in the same document; over a base that has one it
	// drops it (see Resolve).
	Unfiltered bool `json:"unfiltered,omitempty"`
	// Requires is what the host must give the sandbox: a run it cannot
	// give is refused, not degraded.
	Requires *Requires `json:"requires,omitempty"`
}

// Requires names what a policy does not run without.
type Requires struct {
	// Mode is the weakest rung of the ladder (DESIGN.md "Modes") the
	// policy runs on, one of ModeNames: "full" refuses every degraded
	// mode, "no-proc" accepts a sandbox without a procfs, "no-userns" one
	// with no namespace at all (Landlock and seccomp as its walls).
	// Empty: any.
	Mode string `json:"mode,omitempty"`
}

// ModeNames are the modes Requires.Mode may name, strongest first (the
// native provider's ladder, nsexec.Modes).
var ModeNames = []string{"full", "no-proc", "no-userns"}

// ModeRank is mode's place in ModeNames, 0 for the strongest, -1 for a
// name that is none of them.
func ModeRank(mode string) int {
	for i, m := range ModeNames {
		if m == mode {
			return i
		}
	}
	return -1
}

// Identity is the user and group the tool runs as inside the sandbox. 0 is
// allowed: it is root of the sandbox's own user namespace, mapped to an
// unprivileged host id and holding no capabilities (they are dropped before
// exec), so it gains nothing over the host; some tools insist on uid 0.
type Identity struct {
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
}

// Limits are the resource limits of one run. Sizes and durations are
// strings for humans ("256M", "30s"); use the accessor methods for numbers.
// A zero or empty field means "no limit" (after Resolve: not set anywhere
// in the extends chain).
type Limits struct {
	Timeout   Duration `json:"timeout,omitempty"`   // wall clock, e.g. "30s"
	OutputCap Size     `json:"outputCap,omitempty"` // stdout and stderr bytes kept, each
	TmpfsSize Size     `json:"tmpfsSize,omitempty"` // size of /tmp
	Memory    Size     `json:"memory,omitempty"`    // memory.max
	Pids      int64    `json:"pids,omitempty"`      // pids.max
	CPUs      float64  `json:"cpus,omitempty"`      // CPU bandwidth in CPUs, e.g. 0.5
	// Required names limits (by their JSON name) that must be enforced: if
	// the host cannot enforce one (no delegated cgroup, say), the run is
	// refused instead of degraded.
	Required []string `json:"required,omitempty"`
}

// LimitNames are the JSON names of Limits fields that Required may list.
var LimitNames = []string{"timeout", "outputCap", "tmpfsSize", "memory", "pids", "cpus"}

package nsexec

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Mount propagation (mount_namespaces(7), "Shared subtrees"), as runc
// gives it: an OCI config's linux.rootfsPropagation on / after the pivot,
// and a mount's shared, slave, private and unbindable options (and their
// r-forms) in the order given, once the mount is attached.
//
// Nothing of it reaches the host: buildRoot makes every mount of the
// sandbox's mount namespace private before any source is cloned, so a
// clone joins no peer group of the host's (a host mount shared with its
// peers arrives private), and what "shared" makes is a new peer group of
// the sandbox's own mounts; a "slave" of a private mount is private
// (TestPropagationStaysInside tries both ways).

// propagation is one propagation change: an MS_* type, on the mount alone
// or on every mount of its tree.
type propagation struct {
	flag      uint64 // MS_SHARED, MS_SLAVE, MS_PRIVATE or MS_UNBINDABLE
	recursive bool
}

// propagationTypes are the option names of the four types (their r-forms
// are recursiveForms').
var propagationTypes = map[string]uint64{
	"shared": unix.MS_SHARED, "slave": unix.MS_SLAVE, "private": unix.MS_PRIVATE, "unbindable": unix.MS_UNBINDABLE,
}

// RootfsPropagations are the values of Config.RootfsPropagation, runc's
// eight (an OCI config's linux.rootfsPropagation).
var RootfsPropagations = []string{"shared", "slave", "private", "unbindable", "rshared", "rslave", "rprivate", "runbindable"}

// parsePropagation reads a propagation option ("rshared"), ok false when
// o is none.
func parsePropagation(o string) (propagation, bool) {
	base, recursive := o, false
	if b, ok := recursiveForms[o]; ok {
		base, recursive = b, true
	}
	flag, ok := propagationTypes[base]
	return propagation{flag: flag, recursive: recursive}, ok
}

// checkRootfsPropagation checks Config.RootfsPropagation.
func checkRootfsPropagation(v string) error {
	if v == "" {
		return nil
	}
	if _, ok := parsePropagation(v); !ok {
		return &ConfigError{Field: "rootfsPropagation", Value: v, Reason: fmt.Sprintf("is not a propagation; use one of %v", RootfsPropagations)}
	}
	return nil
}

// applyPropagation makes the attached mount at fd (and its tree, for an
// r-form) of each type of ps in turn.
func applyPropagation(fd int, ps []propagation) error {
	for _, p := range ps {
		flags := uint(unix.AT_EMPTY_PATH)
		if p.recursive {
			flags |= unix.AT_RECURSIVE
		}
		if err := unix.MountSetattr(fd, "", flags, &unix.MountAttr{Propagation: p.flag}); err != nil {
			return err
		}
	}
	return nil
}

// rootPropagation applies Config.RootfsPropagation on / once the pivot is
// done, as runc does after its pivot_root (rootfs_linux.go prepareRootfs:
// before it, the mount at / would still be the host's).
func rootPropagation(v string) error {
	if v == "" {
		return nil
	}
	p, ok := parsePropagation(v)
	if !ok {
		return stepErr(StepConfig, "/", "rootfsPropagation "+v, unix.EINVAL)
	}
	root, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return stepErr(StepPropagation, "/", "rootfsPropagation", err)
	}
	defer unix.Close(root)
	if err := applyPropagation(root, []propagation{p}); err != nil {
		return stepErr(StepPropagation, "/", "rootfsPropagation "+v, err)
	}
	return nil
}

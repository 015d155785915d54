package oci

import (
	"errors"
	"fmt"
)

// UnsupportedError is a config field moat does not honour: Field is its
// JSON path in config.json (e.g. "linux.namespaces[1]"), Reason says why
// and what to do instead.
type UnsupportedError struct {
	Field  string
	Value  string
	Reason string
}

func (e *UnsupportedError) Error() string {
	if e.Value == "" {
		return fmt.Sprintf("config.json %s: %s", e.Field, e.Reason)
	}
	return fmt.Sprintf("config.json %s %q: %s", e.Field, e.Value, e.Reason)
}

// IDError is a container ID that is not usable as a state directory name.
type IDError struct {
	ID     string
	Reason string
}

func (e *IDError) Error() string { return fmt.Sprintf("container id %q: %s", e.ID, e.Reason) }

// Errors of the state directory that callers branch on, in runc's words
// (libcontainer/error.go), which engines match: containerd's runc shim
// reads "does not exist" as a container that is gone.
var (
	ErrExist    = errors.New("container with given ID already exists")
	ErrNotExist = errors.New("container does not exist")
)

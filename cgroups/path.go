package cgroups

import (
	"fmt"
	"strings"
)

// PathError is a linux.cgroupsPath moat refuses to use.
type PathError struct {
	Path   string
	Reason string
}

func (e *PathError) Error() string {
	return fmt.Sprintf("cgroups: linux.cgroupsPath %q: %s", e.Path, e.Reason)
}

// CheckPath refuses a cgroupsPath that is empty, names a hierarchy's root
// or this process's own group, or has a "..", "." or empty component.
func CheckPath(path string) error {
	rel := strings.TrimPrefix(path, "/")
	if rel == "" {
		return &PathError{Path: path, Reason: "names no group below the hierarchy's root (or this process's own group); give a path such as /moat/<id>"}
	}
	for _, c := range strings.Split(rel, "/") {
		switch {
		case c == "" || c == ".":
			return &PathError{Path: path, Reason: "has an empty or \".\" component; give a clean path"}
		case c == "..":
			return &PathError{Path: path, Reason: "has a \"..\" component, which would leave the hierarchy (or the runtime's own group); give a path without one"}
		case strings.ContainsRune(c, 0):
			return &PathError{Path: path, Reason: "has a NUL byte"}
		}
	}
	return nil
}

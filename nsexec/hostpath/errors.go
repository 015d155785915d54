package hostpath

import (
	"fmt"
	"strconv"
	"syscall"
)

// LinkError is a symlink the walk did not follow. It unwraps to ELOOP, the
// errno open(2) gives for a link O_NOFOLLOW refused, so callers that map
// errnos keep working.
type LinkError struct {
	// Path is the path being resolved, as the caller gave it.
	Path string
	// Link is the symlink: where the walk found it, with no symlink before
	// its last component.
	Link string
	// Target is what the link points to ("" once too many were followed).
	Target string
	// UID is the link's owner.
	UID uint32
	// Reason says why it was not followed.
	Reason string
}

func (e *LinkError) Error() string {
	s := "hostpath: " + e.Path + ": "
	if e.Link != e.Path {
		s += e.Link + ", a component of it, "
	}
	if e.Target != "" {
		s += "is a symlink to " + strconv.Quote(e.Target) + " owned by uid " + strconv.FormatUint(uint64(e.UID), 10)
	} else {
		s += "is a symlink"
	}
	return s + "; not followed: " + e.Reason +
		" (moat follows a symlink only if root or you could have planted it; name the real path once you checked the link points where you mean: realpath(1))"
}

// Unwrap makes errors.Is(err, syscall.ELOOP) hold.
func (e *LinkError) Unwrap() error { return syscall.ELOOP }

// ChangedError is a path whose last component kept changing between the
// walk's look at it and its open: someone is swapping it.
type ChangedError struct {
	Path string
}

func (e *ChangedError) Error() string {
	return fmt.Sprintf("hostpath: %s changed while it was being opened, again and again; is something swapping it?", e.Path)
}

// Unwrap makes errors.Is(err, syscall.EAGAIN) hold.
func (e *ChangedError) Unwrap() error { return syscall.EAGAIN }

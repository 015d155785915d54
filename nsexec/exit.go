package nsexec

import (
	"syscall"
	"time"
)

// Exit is how the tool ended.
type Exit struct {
	// Code is the exit status, or -1 when a signal killed the tool.
	Code int
	// Signal is the signal that killed the tool, or 0.
	Signal syscall.Signal
	// UserTime, SystemTime and MaxRSS (bytes) are the resource usage of the
	// sandbox's pid 1 and its reaped descendants.
	UserTime, SystemTime time.Duration
	MaxRSS               int64
}

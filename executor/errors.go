package executor

import (
	"errors"
	"fmt"
)

// Code classifies a failed dispatch. The first eight are the reference's
// ExecutorErrorCode values; the rest are what only a real sandbox can say.
type Code string

// The reference codes (contract section 7).
const (
	CodeConfig    Code = "config"
	CodeTimeout   Code = "timeout"
	CodeAborted   Code = "aborted"
	CodeOutputCap Code = "output-cap"
	CodeExit      Code = "exit"
	CodeProtocol  Code = "protocol"
	CodeSpawn     Code = "spawn"
	CodeLedger    Code = "ledger"
)

// Codes beyond the reference, raised by sandboxing providers.
const (
	// CodeOOM: the tool was killed by the kernel at its memory limit.
	CodeOOM Code = "oom"
	// CodeSetup: the sandbox could not be set up (a namespace, mount,
	// seccomp or cgroup step failed); Err carries the step and errno.
	CodeSetup Code = "setup"
)

// Error is a typed dispatch failure (the reference's ExecutorError). Message
// is what the model sees, in the reference's wording; Err, when set, is the
// underlying cause for errors.Is/As.
type Error struct {
	Code    Code
	Message string
	Err     error
}

func (e *Error) Error() string { return e.Message }

// Unwrap returns the underlying cause, if any.
func (e *Error) Unwrap() error { return e.Err }

// Is matches another *Error by code, so errors.Is(err, executor.ErrTimeout)
// works for any timeout whatever its message.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Message == "" && t.Err == nil && t.Code == e.Code
}

// Sentinels for errors.Is, one per code.
var (
	ErrConfig    = &Error{Code: CodeConfig}
	ErrTimeout   = &Error{Code: CodeTimeout}
	ErrAborted   = &Error{Code: CodeAborted}
	ErrOutputCap = &Error{Code: CodeOutputCap}
	ErrExit      = &Error{Code: CodeExit}
	ErrProtocol  = &Error{Code: CodeProtocol}
	ErrSpawn     = &Error{Code: CodeSpawn}
	ErrLedger    = &Error{Code: CodeLedger}
	ErrOOM       = &Error{Code: CodeOOM}
	ErrSetup     = &Error{Code: CodeSetup}
)

// CodeOf returns the code of the first *Error in err's chain, or "" when
// there is none (a raw callback error).
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

func newError(code Code, cause error, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Err: cause}
}

package policies

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// FieldError is one problem in a policy document: the JSON path of the
// field, the offending value as JSON (empty when the field is missing), and
// the reason with what is allowed. Parse and Validate return every
// FieldError at once, joined with errors.Join; walk them with errors.As on
// each element of the interface{ Unwrap() []error }, or use FieldErrors.
type FieldError struct {
	Path   string // "limits.memory", "mounts[0].destination"
	Value  string // `"12 parsecs"`, `0`
	Reason string // `is not a size; use bytes or a suffix like 256M`
}

func (e *FieldError) Error() string {
	if e.Value == "" {
		return e.Path + ": " + e.Reason
	}
	return e.Path + ": " + e.Value + " " + e.Reason
}

// FieldErrors returns every *FieldError inside err (which may be a join of
// several), in order.
func FieldErrors(err error) []*FieldError {
	var out []*FieldError
	var walk func(error)
	walk = func(err error) {
		if err == nil {
			return
		}
		var fe *FieldError
		if errors.As(err, &fe) && fe == err {
			out = append(out, fe)
			return
		}
		switch u := err.(type) {
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				walk(e)
			}
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		}
	}
	walk(err)
	return out
}

// NotFoundError reports a policy name that is neither a built-in nor a
// readable file. Builtins lists what exists.
type NotFoundError struct {
	Name     string
	Builtins []string
	Err      error // the error opening it as a file
}

func (e *NotFoundError) Error() string {
	return fmt.Sprintf("policy %q: not a built-in (%s) and not a file: %v", e.Name, strings.Join(e.Builtins, ", "), e.Err)
}

func (e *NotFoundError) Unwrap() error { return e.Err }

// ExtendsError reports a broken extends chain: a cycle, or a chain deeper
// than MaxExtendsDepth.
type ExtendsError struct {
	Chain  []string // the names followed, in order
	Reason string
}

func (e *ExtendsError) Error() string {
	return fmt.Sprintf("extends %s: %s", strings.Join(e.Chain, " -> "), e.Reason)
}

// jsonValue renders v for FieldError.Value.
func jsonValue(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func fieldErr(path string, value any, format string, args ...any) *FieldError {
	return &FieldError{Path: path, Value: jsonValue(value), Reason: fmt.Sprintf(format, args...)}
}

//go:build !linux

package nsexec

import (
	"context"
	"os"
)

// InitArgv0 is the argv[0] of the sandbox child.
const InitArgv0 = "moat-sandbox-init"

// DefaultHostID: see the Linux documentation.
const DefaultHostID = 2000000000

// Init returns at once: there are no sandbox children on this system.
func Init() {}

// Start returns ErrUnsupported.
func Start(ctx context.Context, cfg *Config, stdio Stdio, opts ...Option) (*Process, error) {
	return nil, ErrUnsupported
}

// CheckStdio accepts everything: no sandbox is started on this system.
func CheckStdio(Stdio) error { return nil }

// SubordinateIdentity returns ErrUnsupported.
func SubordinateIdentity(user string) (Identity, error) { return Identity{}, ErrUnsupported }

// Process is never created on this system.
type Process struct{}

// Pid returns 0.
func (p *Process) Pid() int { return 0 }

// Signal returns ErrUnsupported.
func (p *Process) Signal(sig os.Signal) error { return ErrUnsupported }

// Done returns a closed channel.
func (p *Process) Done() <-chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// Wait returns ErrUnsupported.
func (p *Process) Wait() (Exit, error) { return Exit{}, ErrUnsupported }

// Pending is never created on this system.
type Pending struct{}

// ErrUsed: see the Linux documentation.
var ErrUsed = ErrUnsupported

// Prepare returns ErrUnsupported.
func Prepare(ctx context.Context, cfg *Config, opts ...Option) (*Pending, error) {
	return nil, ErrUnsupported
}

// Pid returns 0.
func (s *Pending) Pid() int { return 0 }

// Done returns a closed channel.
func (s *Pending) Done() <-chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// Exec returns ErrUnsupported.
func (s *Pending) Exec(ctx context.Context, args, env []string, stdio Stdio) (*Process, error) {
	return nil, ErrUnsupported
}

// Close does nothing.
func (s *Pending) Close() error { return nil }

// Detach returns ErrUnsupported.
func (s *Pending) Detach() (*Handover, *Process, error) { return nil, nil, ErrUnsupported }

// Adopted is never created on this system.
type Adopted struct{}

// Adopt returns ErrUnsupported.
func Adopt(h *Handover, opts ...Option) (*Adopted, error) { return nil, ErrUnsupported }

// Exec is never created on this system.
type Exec struct{}

//go:build !linux

package cgroups

import specs "github.com/opencontainers/runtime-spec/specs-go"

// owner is Linux-only; the stub keeps options.go portable.
type owner struct{}

// Host is empty outside Linux.
type Host struct{ Layout Layout }

// Detect returns ErrUnsupported outside Linux.
func Detect() (*Host, error) { return nil, ErrUnsupported }

// Manager is a stub outside Linux.
type Manager struct{}

// New returns ErrUnsupported outside Linux.
func New(...Option) (*Manager, error) { return nil, ErrUnsupported }

func (m *Manager) Posture() Posture { return Posture{} }
func (m *Manager) Create(string, *specs.LinuxResources) (*Leaf, error) {
	return nil, ErrUnsupported
}
func (m *Manager) CleanStale() error          { return ErrUnsupported }
func (m *Manager) Open(string) (*Leaf, error) { return nil, ErrUnsupported }
func (m *Manager) Close() error               { return nil }

// CreatePath returns ErrUnsupported outside Linux.
func CreatePath(string, *specs.LinuxResources, ...Option) (*Leaf, error) { return nil, ErrUnsupported }

// OpenPath returns ErrUnsupported outside Linux.
func OpenPath(string, []string, ...Option) (*Leaf, error) { return nil, ErrUnsupported }

// SystemBus is the system manager's D-Bus socket.
const SystemBus = "unix:path=/run/dbus/system_bus_socket"

// SystemdBooted is false outside Linux.
func SystemdBooted() bool { return false }

// StartScope returns ErrUnsupported outside Linux.
func StartScope(string, string, int, *specs.LinuxResources, ...Option) (*Leaf, error) {
	return nil, ErrUnsupported
}

// Leaf is a stub outside Linux.
type Leaf struct{}

func (l *Leaf) ID() string            { return "" }
func (l *Leaf) FD() (int, bool)       { return -1, false }
func (l *Leaf) Add(int) error         { return ErrUnsupported }
func (l *Leaf) Kill() error           { return ErrUnsupported }
func (l *Leaf) Stats() (Usage, error) { return Usage{}, ErrUnsupported }
func (l *Leaf) Delete() error         { return nil }
func (l *Leaf) Made() []string        { return nil }
func (l *Leaf) Path() string          { return "" }

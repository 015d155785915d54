//go:build !linux

package cgroups

import specs "github.com/opencontainers/runtime-spec/specs-go"

func (l *Leaf) Pids() ([]int, error)               { return nil, ErrUnsupported }
func (l *Leaf) Freeze() error                      { return ErrUnsupported }
func (l *Leaf) Thaw() error                        { return ErrUnsupported }
func (l *Leaf) Frozen() (bool, error)              { return false, ErrUnsupported }
func (l *Leaf) Settings() (Settings, error)        { return Settings{}, ErrUnsupported }
func (l *Leaf) Update(*specs.LinuxResources) error { return ErrUnsupported }

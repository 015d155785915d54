package cgroups

import (
	"fmt"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// freezeTimeout bounds how long Freeze waits for the kernel to report the
// leaf frozen: a task in an uninterruptible sleep (D state, on a slow
// filesystem) keeps a v1 leaf FREEZING and a v2 one unfrozen until it
// wakes.
const freezeTimeout = 10 * time.Second

// leafControl is what a running container's leaf does beyond a dispatch's
// needs (pause, ps, update, events); both trees' leaves implement it, in
// their *_control_linux.go files.
type leafControl interface {
	pids() ([]int, error)
	pause(timeout time.Duration) error
	resume() error
	frozen() (bool, error)
	update(u update) error
	settings() (Settings, error)
}

func (l *Leaf) control() (leafControl, error) {
	if l.deleted {
		return nil, fmt.Errorf("cgroup %s: leaf deleted", l.id)
	}
	c, ok := l.ops.(leafControl)
	if !ok {
		return nil, fmt.Errorf("cgroup %s: %w", l.id, ErrUnsupported)
	}
	return c, nil
}

// Pids lists the processes in the leaf (host pids; on v1 the union over
// its hierarchies).
func (l *Leaf) Pids() ([]int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, err := l.control()
	if err != nil {
		return nil, err
	}
	pids, err := c.pids()
	if err != nil {
		return nil, fmt.Errorf("list the processes of cgroup %s: %w", l.id, err)
	}
	return pids, nil
}

// Freeze stops every process of the leaf (and those it forks, which are
// born frozen) and returns once the kernel reports the leaf frozen; a leaf
// that does not freeze in time is thawed again and the error says so.
func (l *Leaf) Freeze() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, err := l.control()
	if err != nil {
		return err
	}
	if err := c.pause(freezeTimeout); err != nil {
		return fmt.Errorf("freeze cgroup %s: %w", l.id, err)
	}
	return nil
}

// Thaw lets a frozen leaf run again; thawing a leaf that is not frozen
// does nothing.
func (l *Leaf) Thaw() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, err := l.control()
	if err != nil {
		return err
	}
	if err := c.resume(); err != nil {
		return fmt.Errorf("thaw cgroup %s: %w", l.id, err)
	}
	return nil
}

// Frozen says whether the leaf is frozen now.
func (l *Leaf) Frozen() (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, err := l.control()
	if err != nil {
		return false, err
	}
	return c.frozen()
}

// Settings reads the leaf's limits.
func (l *Leaf) Settings() (Settings, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, err := l.control()
	if err != nil {
		return Settings{}, err
	}
	s, err := c.settings()
	if err != nil {
		return s, fmt.Errorf("read the limits of cgroup %s: %w", l.id, err)
	}
	return s, nil
}

// Update changes the limits of a live leaf, with runc update's meaning of
// res: a field that is nil or 0 is left as it is, -1 lifts the limit. Only
// memory (limit, swap), pids and cpu (quota, period, shares) are moat's;
// any other field set is a *LimitsError naming it, and a limit whose
// controller the leaf lacks a *ControllerError. As at Create, swap stays
// off when a new memory limit comes without a swap of its own. Nothing is
// written when the resources are refused.
func (l *Leaf) Update(res *specs.LinuxResources) error {
	u, err := updateFrom(res)
	if err != nil {
		return err
	}
	if !l.atPath {
		if err := refuseExtras(res); err != nil {
			return err
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	c, err := l.control()
	if err != nil {
		return err
	}
	if err := c.update(u); err != nil {
		return fmt.Errorf("update cgroup %s: %w", l.id, err)
	}
	return nil
}

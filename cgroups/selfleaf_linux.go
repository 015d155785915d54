package cgroups

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// lent is what this process changed in a delegated group that held only
// itself: it moved into a leaf below the group and turned controllers on in
// the group's cgroup.subtree_control. While they are on, the group can take
// no process (cgroup-v2.rst, "No Internal Process Constraint": a clone or
// move into it fails with EBUSY), so whoever delegated it, a service or a
// scope another program reuses, could not put anything there again once moat
// is done. The last Manager of this process that uses the leaf gives it all
// back on Close: the parents it made go, the controllers it turned on go
// off, the process moves back and the leaf goes.
type lent struct {
	group   string   // the delegated group
	leaf    string   // group/moat-self-PID-START, where this process is now
	pid     int      // the process moved
	enabled []string // controllers this process turned on in group's subtree_control
	made    []string // directories Managers made below group (deepest last per Manager)
	users   int      // Managers working below the leaf's group
}

// selfMu guards self and serialises the move itself: two Managers made at
// once must not both see the group holding only this process and move.
var (
	selfMu sync.Mutex
	self   *lent
)

// moveSelf moves pid from group (which holds only it) into a fresh leaf
// below it and records the loan. selfMu is held.
func moveSelf(group, leafName string, pid int) (*lent, error) {
	removeDeadSelfLeaves(group)
	leaf := filepath.Join(group, leafName)
	if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("make a leaf for moat itself: %w", err)
	}
	// cgroup.procs moves the whole thread group (cgroup-v2.rst,
	// "Processes"); both groups are below the delegated one, so the
	// delegation containment rule allows it.
	if err := writeFile(leaf, "cgroup.procs", strconv.Itoa(pid)); err != nil {
		_ = unix.Rmdir(leaf)
		return nil, fmt.Errorf("move moat into its own leaf %s: %w", leaf, err)
	}
	self = &lent{group: group, leaf: leaf, pid: pid}
	return self, nil
}

// use records a Manager's tree below the loan (nil when it made none): the
// controllers it turned on in the group (only the Manager that moved finds
// any off) and what it made.
func (l *lent) use(t *v2Tree) {
	l.users++
	if t == nil {
		return
	}
	l.enabled = append(l.enabled, t.turnedOn[l.group]...)
	l.made = append(l.made, t.made...)
}

// release drops one user; the last one gives the group back.
func (l *lent) release() error {
	selfMu.Lock()
	defer selfMu.Unlock()
	return l.releaseLocked()
}

// releaseLocked is release with selfMu held.
func (l *lent) releaseLocked() error {
	if l.users--; l.users > 0 {
		return nil
	}
	if err := l.giveBack(); err != nil {
		// Kept (a sandbox still runs below): the next Manager of this
		// process takes the loan over, and its Close tries again.
		l.users = 0
		return err
	}
	if self == l {
		self = nil
	}
	return nil
}

// giveBack undoes the loan in the order the kernel allows: a controller can
// be turned off only when no child group has it on in its own
// subtree_control (the parents moat made have it: they go first), and a
// process can enter the group only once no domain controller is on for its
// children. A parent still holding a leaf (a sandbox still running) keeps
// everything as it is; the error says so.
func (l *lent) giveBack() error {
	var errs []error
	if err := removeMade(l.made); err != nil {
		errs = append(errs, err)
	}
	for _, c := range l.enabled {
		if err := writeFile(l.group, "cgroup.subtree_control", "-"+c); err != nil {
			errs = append(errs, fmt.Errorf("turn %s off in %s: %w", c, l.group, err))
		}
	}
	if len(errs) == 0 {
		if err := writeFile(l.group, "cgroup.procs", strconv.Itoa(l.pid)); err != nil {
			errs = append(errs, fmt.Errorf("move back into %s: %w", l.group, err))
		} else if err := rmdir(l.leaf); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("give back the delegated cgroup %s: %w", l.group, err)
	}
	return nil
}

package cgroups

import (
	"fmt"
	"log/slog"
	"os"
	"sync"
)

// Leaf is one dispatch's cgroup. Its methods are safe for concurrent use.
type Leaf struct {
	id  string
	log *slog.Logger

	mu      sync.Mutex
	ops     leafOps
	deleted bool

	// atPath: a leaf at a cgroupsPath (CreatePath), whose Delete removes
	// only the directories in made, the levels CreatePath created.
	atPath bool
	made   []string
}

// Path returns the cgroupsPath of a leaf CreatePath, OpenPath or
// StartScope gave (for StartScope, the scope's group), "" for a Manager's.
func (l *Leaf) Path() string {
	if l.atPath {
		return l.id
	}
	return ""
}

// Made returns the directories CreatePath created for the leaf, which
// Delete removes (OpenPath takes them); nil for a Manager's leaf.
func (l *Leaf) Made() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.made...)
}

// ID returns the id the leaf was created with.
func (l *Leaf) ID() string { return l.id }

// FD returns an O_PATH directory fd of the leaf for clone3
// CLONE_INTO_CGROUP (syscall.SysProcAttr UseCgroupFD and CgroupFD), so the
// child is born inside the leaf with no window outside it. It is false on
// v1, where the parent calls Add before letting the child run. The fd stays
// owned by the Leaf and is closed by Delete.
func (l *Leaf) FD() (int, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.deleted {
		return -1, false
	}
	return l.ops.fd()
}

// Add moves a process (its whole thread group) into the leaf, in every v1
// hierarchy. The sandbox child must wait for it before exec.
func (l *Leaf) Add(pid int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.deleted {
		return fmt.Errorf("add %d to cgroup %s: leaf deleted", pid, l.id)
	}
	if err := l.ops.add(pid); err != nil {
		return fmt.Errorf("add %d to cgroup %s: %w", pid, l.id, err)
	}
	return nil
}

// Tasks opens the leaf's cgroup v1 "tasks" files for writing, one per
// hierarchy, for a sandbox child that joins the leaf itself
// (nsexec.WithCgroupTasks, which says why); the caller closes them. It is
// nil on v2, where FD or Add place the child.
func (l *Leaf) Tasks() ([]*os.File, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.deleted {
		return nil, fmt.Errorf("open the tasks files of cgroup %s: leaf deleted", l.id)
	}
	files, err := l.ops.tasks()
	if err != nil {
		return nil, fmt.Errorf("open the tasks files of cgroup %s: %w", l.id, err)
	}
	return files, nil
}

// Kill SIGKILLs every process in the leaf and waits until it is empty.
func (l *Leaf) Kill() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.deleted {
		return nil
	}
	return l.ops.kill()
}

// Stats reads what the leaf consumed so far.
func (l *Leaf) Stats() (Usage, error) { return l.read(true) }

// Events reads only what a dispatch's outcome needs: OOMKills, OOMKilled
// and PidsLimitHits (the other Usage fields stay zero): two files where
// Stats reads up to eight, at about 30 us each on the reference host, on
// every dispatch.
func (l *Leaf) Events() (Usage, error) { return l.read(false) }

func (l *Leaf) read(full bool) (Usage, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.deleted {
		return Usage{}, fmt.Errorf("stats cgroup %s: leaf deleted", l.id)
	}
	return l.ops.stats(full)
}

// Delete kills what still runs in the leaf and removes it. It is
// idempotent: deleting a deleted (or vanished) leaf returns nil.
func (l *Leaf) Delete() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.deleted {
		return nil
	}
	if busy, err := l.ops.populated(); err != nil || busy {
		if err := l.ops.kill(); err != nil {
			return fmt.Errorf("delete cgroup %s: %w", l.id, err)
		}
	}
	err := l.ops.remove
	if l.atPath {
		err = func() error {
			l.ops.forget()
			return removePathDirs(l.made, l.ops.leafDirs())
		}
	}
	if err := err(); err != nil {
		return fmt.Errorf("delete cgroup %s: %w", l.id, err)
	}
	l.deleted = true
	l.log.Debug("cgroup deleted", "id", l.id)
	return nil
}

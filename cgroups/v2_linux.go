package cgroups

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// v2Tree is the parent directory in the unified hierarchy.
type v2Tree struct {
	dir     string
	made    []string
	enabled []string // controllers enabled for the leaves (parent's subtree_control)
	// turnedOn: per level, the controllers this tree turned on in its
	// subtree_control (levels that had them already are not listed).
	turnedOn map[string][]string
	timeout  time.Duration
}

// v2Wanted are the controllers moat enables for its leaves.
var v2Wanted = []string{"memory", "pids", "cpu"}

// newV2Tree resolves and creates the parent and enables the controllers for
// its children at every level from this process's cgroup (or the mount
// root, for an absolute parent) down to the parent. Controllers can only be
// enabled top-down, and only in a group without processes: the kernel
// answers EBUSY otherwise (cgroup-v2.rst, "Top-down Constraint" and "No
// Internal Process Constraint"). Levels that already have a controller are
// not written, so nothing above what moat creates changes when the
// delegation already enabled them.
func newV2Tree(h *Host, parent string, p *Posture) (*v2Tree, string) {
	base := h.SelfUnified
	if filepath.IsAbs(parent) {
		base = h.Unified
	}
	if h.Unified == "" || base == "" {
		return nil, "this process's cgroup2 group is not visible (no cgroup2 mount, or outside it)"
	}
	return newV2TreeAt(h, base, parent, p)
}

// newV2TreeAt is newV2Tree below the group base (a directory of the
// cgroup2 mount) instead of this process's own group.
func newV2TreeAt(h *Host, base, parent string, p *Posture) (*v2Tree, string) {
	t := &v2Tree{timeout: killTimeout, turnedOn: map[string][]string{}}
	t.dir = filepath.Join(base, parent)
	made, err := mkdirOwn(t.dir)
	t.made = made
	if err != nil {
		return nil, fmt.Sprintf("cannot create %s: %v", t.dir, cause(err))
	}
	if !writable(t.dir) {
		return nil, t.dir + " is not writable by this user"
	}
	p.Parents = []string{t.dir}
	why := map[string]string{}
	levels := []string{base}
	rel, _ := filepath.Rel(base, t.dir)
	for _, c := range strings.Split(rel, "/") {
		levels = append(levels, filepath.Join(levels[len(levels)-1], c))
	}
	// A level that holds processes must not be written at all: a threaded
	// controller (pids) would be enabled there while the domain ones
	// (memory) are refused with EBUSY, and a half-enabled group makes every
	// clone into a leaf below it fail with EOPNOTSUPP. So either every
	// missing controller can be enabled everywhere, or none is touched.
	if busy := populatedLevel(levels, h.Unified); busy != "" {
		for _, c := range v2Wanted {
			why[c] = fmt.Sprintf("cannot enable %s below %s: it holds processes (cgroup v2 no-internal-process rule); "+
				"run moat in a leaf cgroup of its own, or pass an absolute parent such as WithParent(\"/moat\") as root", c, busy)
		}
	} else {
		for _, c := range v2Wanted {
			why[c] = enableDown(levels, c, t.turnedOn)
			if why[c] == "" {
				t.enabled = append(t.enabled, c)
			}
		}
	}
	p.Memory = v2Posture(why, "memory")
	p.Pids = v2Posture(why, "pids")
	p.CPU = v2Posture(why, "cpu")
	return t, ""
}

// enableDown enables controller c in cgroup.subtree_control of every level,
// top-down, noting in turnedOn each level it wrote; it returns why it could
// not, or "".
func enableDown(levels []string, c string, turnedOn map[string][]string) string {
	for _, d := range levels {
		on, err := fields(d, "cgroup.subtree_control")
		if err != nil {
			return err.Error()
		}
		if slices.Contains(on, c) {
			continue
		}
		avail, err := fields(d, "cgroup.controllers")
		if err != nil {
			return err.Error()
		}
		if !slices.Contains(avail, c) {
			return fmt.Sprintf("the %s controller is not available in %s (not delegated, or not enabled by its parent)", c, d)
		}
		err = writeFile(d, "cgroup.subtree_control", "+"+c)
		switch {
		case errors.Is(err, unix.EBUSY):
			return fmt.Sprintf("cannot enable %s below %s: it holds processes (cgroup v2 no-internal-process rule); "+
				"run moat in a leaf cgroup of its own or pass WithParent", c, d)
		case err != nil:
			return fmt.Sprintf("enable %s in %s: %v", c, d, err)
		}
		turnedOn[d] = append(turnedOn[d], c)
	}
	return ""
}

// populatedLevel returns the first level, other than the hierarchy root
// (exempt from the no-internal-process rule), that holds processes and still
// lacks one of the wanted controllers in its subtree_control; "" if none.
func populatedLevel(levels []string, root string) string {
	for _, d := range levels {
		if d == root {
			continue
		}
		on, err := fields(d, "cgroup.subtree_control")
		if err != nil {
			return ""
		}
		missing := false
		for _, c := range v2Wanted {
			if !slices.Contains(on, c) {
				missing = true
			}
		}
		if !missing {
			continue
		}
		if procs, err := fields(d, "cgroup.procs"); err == nil && len(procs) > 0 {
			return d
		}
	}
	return ""
}

func v2Posture(why map[string]string, c string) LimitPosture {
	if why[c] == "" {
		return LimitPosture{Enforced: true}
	}
	return LimitPosture{Reason: why[c]}
}

func fields(dir, name string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(dir, name))
	return strings.Fields(string(b)), err
}

func (t *v2Tree) usable() bool { return t != nil }

func (t *v2Tree) open(name string) leafOps {
	return &v2Leaf{dir: filepath.Join(t.dir, name), fdNum: -1, timeout: t.timeout}
}

func (t *v2Tree) create(name string, lim limits) (leafOps, error) {
	l := &v2Leaf{dir: filepath.Join(t.dir, name), fdNum: -1, timeout: t.timeout}
	if err := os.Mkdir(l.dir, 0o755); err != nil {
		return nil, err
	}
	if err := l.set(lim, t.enabled); err != nil {
		l.remove()
		return nil, err
	}
	// An O_PATH directory fd is what clone3's CLONE_INTO_CGROUP takes
	// (clone(2), "CLONE_INTO_CGROUP"; Go: SysProcAttr.UseCgroupFD).
	fd, err := unix.Open(l.dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		l.remove()
		return nil, &os.PathError{Op: "open", Path: l.dir, Err: err}
	}
	l.fdNum = fd
	return l, nil
}

func (t *v2Tree) leaves() ([]string, error) {
	ents, err := os.ReadDir(t.dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range ents {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

func (t *v2Tree) close() error { return removeMade(t.made) }

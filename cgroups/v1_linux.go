package cgroups

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// v1Controllers are the v1 hierarchies a leaf lives in: the three limits,
// cpuacct for CPU time and freezer for an atomic kill.
var v1Controllers = []string{"memory", "pids", "cpu", "cpuacct", "freezer"}

// v1Tree is the parent directory in each usable v1 hierarchy.
type v1Tree struct {
	dirs    map[string]string // controller -> parent directory
	made    []string          // parent directories New created, deepest last
	memsw   bool              // memory.memsw.* exists (swap accounting on)
	timeout time.Duration
}

// newV1Tree resolves and creates the parent in every hierarchy and returns
// the posture. A controller whose parent cannot be created is left out.
func newV1Tree(h *Host, parent string, p *Posture) *v1Tree {
	t := &v1Tree{dirs: map[string]string{}, timeout: killTimeout}
	why := map[string]string{}
	for _, c := range v1Controllers {
		dir, reason := v1Parent(h, c, parent)
		if reason == "" {
			made, err := mkdirOwn(dir)
			t.made = append(t.made, made...)
			switch {
			case err != nil:
				reason = fmt.Sprintf("cannot create %s: %v", dir, cause(err))
			case !writable(dir):
				reason = dir + " is not writable by this user"
			}
		}
		if reason != "" {
			why[c] = reason
			continue
		}
		t.dirs[c] = dir
	}
	t.memsw = t.dirs["memory"] != "" && exists(filepath.Join(t.dirs["memory"], "memory.memsw.limit_in_bytes"))
	for _, d := range t.dirs {
		if !slices.Contains(p.Parents, d) {
			p.Parents = append(p.Parents, d)
		}
	}
	slices.Sort(p.Parents)
	p.Memory = v1Posture(t.dirs, why, "memory")
	if p.Memory.Enforced && !t.memsw {
		p.Memory.Reason = "enforced without swap accounting (no memory.memsw files): swap use is not limited"
	}
	p.Pids = v1Posture(t.dirs, why, "pids")
	p.CPU = v1Posture(t.dirs, why, "cpu")
	return t
}

func v1Posture(dirs, why map[string]string, c string) LimitPosture {
	if _, ok := dirs[c]; ok {
		return LimitPosture{Enforced: true}
	}
	return LimitPosture{Reason: why[c]}
}

// v1Parent resolves the parent directory for one controller: relative to
// this process's own cgroup, or to the hierarchy root when parent is
// absolute (see the package doc).
func v1Parent(h *Host, c, parent string) (string, string) {
	mount, ok := h.V1[c]
	if !ok {
		return "", "no cgroup v1 " + c + " hierarchy is mounted"
	}
	if filepath.IsAbs(parent) {
		return filepath.Join(mount, parent), ""
	}
	self := h.Self[c]
	if self == "" {
		return "", "this process's " + c + " cgroup is not visible under " + mount
	}
	return filepath.Join(self, parent), ""
}

// usable reports whether any hierarchy is.
func (t *v1Tree) usable() bool { return len(t.dirs) > 0 }

// leafDirs are the leaf's directories, one per distinct hierarchy
// (co-mounted controllers such as cpu,cpuacct share one).
func (t *v1Tree) leafDirs(name string) *v1Leaf {
	l := &v1Leaf{ctl: map[string]string{}, timeout: t.timeout}
	for c, d := range t.dirs {
		dir := filepath.Join(d, name)
		l.ctl[c] = dir
		if !slices.Contains(l.dirs, dir) {
			l.dirs = append(l.dirs, dir)
		}
	}
	slices.Sort(l.dirs)
	return l
}

func (t *v1Tree) create(name string, lim limits) (leafOps, error) {
	l := t.leafDirs(name)
	for _, d := range l.dirs {
		if err := os.Mkdir(d, 0o755); err != nil {
			l.remove()
			return nil, err
		}
	}
	if err := l.set(lim, t.memsw); err != nil {
		l.remove()
		return nil, err
	}
	return l, nil
}

func (t *v1Tree) open(name string) leafOps { return t.leafDirs(name) }

// leaves lists the leaf names found in any hierarchy's parent.
func (t *v1Tree) leaves() ([]string, error) {
	var names []string
	for _, d := range t.dirs {
		ents, err := os.ReadDir(d)
		if err != nil {
			return nil, err
		}
		for _, e := range ents {
			if e.IsDir() && !slices.Contains(names, e.Name()) {
				names = append(names, e.Name())
			}
		}
	}
	return names, nil
}

func (t *v1Tree) close() error { return removeMade(t.made) }

// defaultCFSPeriod is the kernel's default CFS bandwidth period in us.
const defaultCFSPeriod = 100000

// v1Leaf is one leaf: a directory in each hierarchy.
type v1Leaf struct {
	ctl     map[string]string // controller -> leaf directory
	dirs    []string          // distinct leaf directories
	timeout time.Duration
}

// set writes the limits. The memory limit goes first: the kernel refuses a
// memsw limit below the memory limit (memory.txt, "2.4 Reclaim" and
// "memsw"), and a fresh cgroup starts with both unlimited.
func (l *v1Leaf) set(lim limits, memsw bool) error {
	if d, ok := l.ctl["memory"]; ok && lim.memory > 0 {
		if err := writeFile(d, "memory.limit_in_bytes", strconv.FormatInt(lim.memory, 10)); err != nil {
			return err
		}
		if memsw {
			if err := writeFile(d, "memory.memsw.limit_in_bytes", strconv.FormatInt(lim.memSwap, 10)); err != nil {
				return err
			}
		}
	}
	if d, ok := l.ctl["pids"]; ok && lim.pids > 0 {
		if err := writeFile(d, "pids.max", strconv.FormatInt(lim.pids, 10)); err != nil {
			return err
		}
	}
	if d, ok := l.ctl["cpu"]; ok && lim.cpuQuota > 0 {
		// A new cgroup starts with the default period, 100 ms, whatever
		// its parent's (kernel/sched/fair.c init_cfs_bandwidth); writing
		// it again would cost every dispatch a cgroup file write.
		if lim.cpuPeriod != defaultCFSPeriod {
			if err := writeFile(d, "cpu.cfs_period_us", strconv.FormatUint(lim.cpuPeriod, 10)); err != nil {
				return err
			}
		}
		if err := writeFile(d, "cpu.cfs_quota_us", strconv.FormatInt(lim.cpuQuota, 10)); err != nil {
			return err
		}
	}
	return nil
}

func (l *v1Leaf) fd() (int, bool) { return -1, false }

// add moves pid into the leaf of every hierarchy. Writing cgroup.procs moves
// the whole thread group (cgroups.txt, "cgroup.procs").
func (l *v1Leaf) add(pid int) error {
	for _, d := range l.dirs {
		if err := writeFile(d, "cgroup.procs", strconv.Itoa(pid)); err != nil {
			return err
		}
	}
	return nil
}

// tasks opens every hierarchy's tasks file of the leaf for writing.
func (l *v1Leaf) tasks() ([]*os.File, error) {
	files := make([]*os.File, 0, len(l.dirs))
	for _, d := range l.dirs {
		f, err := os.OpenFile(filepath.Join(d, "tasks"), os.O_WRONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}

// procs is the union of the leaf's processes over all hierarchies.
func (l *v1Leaf) procs() ([]int, error) {
	var all []int
	for _, d := range l.dirs {
		pids, err := readPids(d)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, p := range pids {
			if !slices.Contains(all, p) {
				all = append(all, p)
			}
		}
	}
	return all, nil
}
